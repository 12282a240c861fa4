"""Policy pages with real browser sessions and CSRF: editor with live validation, review (four eyes), releases board."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlmodel import select

from app.core.db import unit_of_work
from app.core.timeutil import floor_hour, utcnow
from app.policy.models import PolicyVersion
from app.review.models import ChangeRequest, ChangeState, Release, ReleaseState
from tests.support.review import edited, post, row, set_quota
from tests.support.routes import page_csrf

pytestmark = pytest.mark.anyio
SOON = (floor_hour(utcnow()) + timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M")


async def test_editor_validates_as_you_type_and_review_enforces_four_eyes(browser, v1, fresh_engine):
    ada, ada_csrf = await browser("ada", "admin")
    rita, rita_csrf = await browser("rita", "reviewer")
    page = await ada.get("/policy/changes/new")
    assert page.status_code == 200 and 'hx-post="/policy/validate"' in page.text
    assert page_csrf(page.text) == ada_csrf

    # The htmx live check: a fragment naming the offending field path, always 200.
    fragment = await ada.post("/policy/validate", data={"document": edited(v1, set_quota(99))},
                              headers={"HX-Request": "true", "X-CSRF-Token": ada_csrf})
    assert fragment.status_code == 200 and "quotas[vision/mixed-a100].guaranteed_gpus" in fragment.text and "<html" not in fragment.text
    fragment = await ada.post("/policy/validate", data={"document": "tenants: ["}, headers={"X-CSRF-Token": ada_csrf})
    assert fragment.status_code == 200 and "alert-error" in fragment.text
    # Without the CSRF token the same POST is refused.
    assert (await ada.post("/policy/validate", data={"document": "x"})).status_code == 403

    created = await post(ada, "/policy/changes", ada_csrf, title="six GPUs", justification="Q4",
                         document=edited(v1, set_quota(6)))
    assert created.status_code == 303
    url = created.headers["location"]
    change_id = int(url.rsplit("/", 1)[1])
    detail = await ada.get(url)
    assert "quotas[vision/mixed-a100].guaranteed_gpus" in detail.text and "Capacity impact" in detail.text
    assert (await post(ada, f"{url}/submit", ada_csrf)).status_code == 303
    # The author, an admin, gets no approve button and is refused when she posts anyway.
    assert f'action="/policy/changes/{change_id}/approve"' not in (await ada.get(url)).text
    for verb in ("approve", "reject"):
        refused = await post(ada, f"{url}/{verb}", ada_csrf)
        assert refused.status_code == 403 and "another reviewer" in refused.text
    assert row(fresh_engine, ChangeRequest, change_id).state == ChangeState.SUBMITTED
    # Editing a submitted request: 409.
    assert (await post(ada, url, ada_csrf, title="x", justification="y", document="z")).status_code == 409
    assert f'action="/policy/changes/{change_id}/approve"' in (await rita.get(url)).text
    # Approving asks to confirm first (no JavaScript needed): the confirm page carries the comment on.
    asked = await post(rita, f"{url}/approve", rita_csrf, comment="fine")
    assert asked.status_code == 200 and 'name="confirm" value="yes"' in asked.text and ">fine</textarea>" in asked.text
    assert row(fresh_engine, ChangeRequest, change_id).state == ChangeState.SUBMITTED
    assert (await post(rita, f"{url}/approve", rita_csrf, comment="fine", confirm="yes")).status_code == 303
    assert row(fresh_engine, ChangeRequest, change_id).state == ChangeState.APPROVED
    assert (await post(rita, f"{url}/comments", rita_csrf, body="ship it")).status_code == 303
    assert "ship it" in (await ada.get(url)).text


async def test_releases_board_gate(browser, v1, fresh_engine):
    olga, olga_csrf = await browser("olga", "operator")
    rita, rita_csrf = await browser("rita", "reviewer")
    vic, vic_csrf = await browser("vic", "viewer")
    created = await post(olga, "/policy/changes", olga_csrf, title="six", justification="Q4", document=edited(v1, set_quota(6)))
    url = created.headers["location"]
    change_id = int(url.rsplit("/", 1)[1])
    await post(olga, f"{url}/submit", olga_csrf)
    # An operator cannot approve, even someone else's request; a viewer cannot plan releases.
    assert (await post(olga, f"{url}/approve", olga_csrf)).status_code == 403
    await post(rita, f"{url}/approve", rita_csrf, confirm="yes")
    assert (await post(vic, "/policy/releases", vic_csrf, name="r", service="s", planned_at="2026-11-20T09:00")).status_code == 403
    assert (await post(olga, "/policy/releases", olga_csrf, name="search v2", service="search-chat",
                       planned_at="2026-11-20T09:00")).status_code == 303
    with unit_of_work(fresh_engine) as session:
        release_id = session.exec(select(Release.id)).one()
    board = await vic.get("/policy/releases")
    assert board.status_code == 200 and "search v2" in board.text and "Apply policy" not in board.text
    assert f'<option value="{change_id}">' in (await olga.get("/policy/releases")).text
    assert (await post(olga, f"/policy/releases/{release_id}/attach", olga_csrf, change_id=str(change_id))).status_code == 303
    assert (await post(olga, f"/policy/releases/{release_id}/deploy", olga_csrf)).status_code == 409
    bad = await post(olga, f"/policy/releases/{release_id}/apply", olga_csrf, effective_from="soon")
    assert bad.status_code == 422 and "effective_from" in bad.text
    now = floor_hour(utcnow()).strftime("%Y-%m-%dT%H:%M")
    assert (await post(olga, f"/policy/releases/{release_id}/apply", olga_csrf, effective_from=now,
                       confirm="yes")).status_code == 303
    assert (await post(olga, f"/policy/releases/{release_id}/deploy", olga_csrf, confirm="yes")).status_code == 303
    assert row(fresh_engine, Release, release_id).state == ReleaseState.DEPLOYED
    with unit_of_work(fresh_engine) as session:
        assert [v.source for v in session.exec(select(PolicyVersion).order_by(PolicyVersion.id))] == ["bootstrap", "change"]
    for page in ("/policy", "/policy/versions", "/policy/versions/2", "/policy/changes", "/policy/audit?action=release.", "/policy/releases"):
        response = await vic.get(page)
        assert response.status_code == 200, page
    assert "release.deploy" in (await vic.get("/policy/audit?action=release.")).text
    assert "guaranteed_gpus" in (await vic.get("/policy/versions")).text


async def test_broken_draft_page_and_rebase_conflicts_page(browser, v1, fresh_engine):
    from app.policy.parsing import parse_document
    from app.policy.service import import_version
    from tests.support.review import set_p99

    olga, csrf = await browser("olga", "operator")
    broken = await post(olga, "/policy/changes", csrf, title="wip", justification="later", document="tenants: [")
    page = await olga.get(broken.headers["location"])
    assert page.status_code == 200 and "alert-error" in page.text
    created = await post(olga, "/policy/changes", csrf, title="p99", justification="tighter", document=edited(v1, set_p99(200)))
    url = created.headers["location"]
    with unit_of_work(fresh_engine) as session:
        import_version(session=session, document=parse_document(edited(v1, set_p99(250))), actor="ops", source="change",
                       effective_from=v1.effective_from.replace(month=3))
    assert "must be rebased" in (await olga.get(url)).text
    conflict = await post(olga, f"{url}/rebase", csrf)
    assert conflict.status_code == 409 and "sla[search-chat].p99_ms" in conflict.text


async def test_structured_edit_form_sets_a_field(browser, v1, fresh_engine):
    olga, csrf = await browser("olga", "operator")
    created = await post(olga, "/policy/changes", csrf, title="price", justification="new contract")
    url = created.headers["location"]
    page = (await olga.get(url)).text
    assert '<option value="sla[search-chat].p99_ms">' in page
    assert (await post(olga, f"{url}/fields", csrf, path="sla[search-chat].p99_ms", value="250")).status_code == 303
    refused = await post(olga, f"{url}/fields", csrf, path="sla[search-chat].p99_ms", value="-5")
    assert refused.status_code == 422 and "p99_ms" in refused.text
    change_id = int(url.rsplit("/", 1)[1])
    assert "p99_ms: 250" in row(fresh_engine, ChangeRequest, change_id).document
