"""Review and release pages: the reviewer's queue and nav badge, evidence above the decision, confirm steps,
"Mark deployed" only once the version is in effect, rendered artifacts per version and per change with diffs (a
change's against its base version, so an applied request still shows what was approved)."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest

from app.core.db import unit_of_work
from app.core.timeutil import floor_hour, utcnow
from app.review import changes, releases
from app.review.models import ChangeRequest, ChangeState, Release, ReleaseState
from tests.support.review import approved, draft, post, row, set_quota

pytestmark = pytest.mark.anyio
BADGE = re.compile(r'class="badge nav-badge"[^>]*>(\d+)<')


def submitted(engine, v1, *, author: str = "olga", title: str = "More GPUs for vision") -> int:
    with unit_of_work(engine) as session:
        change = draft(session, v1, author=author, title=title)
        changes.submit(session=session, change_id=change.id, actor=author)
        return change.id


def applied_release(engine, v1, *, effective_from) -> int:
    with unit_of_work(engine) as session:
        release = releases.create_release(session=session, actor="olga", name="search v2", service="search-chat",
                                          planned_at=floor_hour(utcnow()))
        releases.attach(session=session, release_id=release.id, change_id=approved(session, v1).id, actor="olga")
        releases.apply_release(session=session, release_id=release.id, actor="olga", effective_from=effective_from)
        return release.id


async def test_awaiting_my_review_lists_others_submissions_and_the_nav_counts_them(browser, v1, fresh_engine):
    rita, rita_csrf = await browser("rita", "reviewer")
    olga, _ = await browser("olga", "operator")
    first = submitted(fresh_engine, v1, title="first")
    second = submitted(fresh_engine, v1, title="second")
    mine = submitted(fresh_engine, v1, author="rita", title="rita's own")
    with unit_of_work(fresh_engine) as session:
        draft(session, v1, title="still a draft")
    page = await rita.get("/policy/review")
    assert page.status_code == 200 and BADGE.findall(page.text) == ["2"]
    listed = re.findall(r'href="/policy/changes/(\d+)"', page.text)
    assert listed == [str(first), str(second)] and str(mine) not in listed and "Awaiting my review (2)" in page.text
    assert BADGE.findall((await rita.get("/")).text) == ["2"]  # on every page, not only Policy's
    # Deciding takes a request off the queue.
    assert (await post(rita, f"/policy/changes/{first}/approve", rita_csrf, confirm="yes")).status_code == 303
    assert BADGE.findall((await rita.get("/policy/review")).text) == ["1"]
    # Operators do not review: no badge, and the queue says why.
    page = await olga.get("/policy/review")
    assert page.status_code == 200 and not BADGE.findall(page.text) and "Only reviewers" in page.text


async def test_change_page_shows_the_evidence_above_the_decision(browser, v1, fresh_engine):
    rita, _ = await browser("rita", "reviewer")
    change_id = submitted(fresh_engine, v1)
    html = (await rita.get(f"/policy/changes/{change_id}")).text
    order = [html.index(marker) for marker in ('id="validation-title"', 'id="diff-title"', 'id="artifacts"',
                                               'id="impact"', 'id="decision"', f'action="/policy/changes/{change_id}/approve"')]
    assert order == sorted(order)
    # The Kueue ClusterQueue of vision/mixed-a100 changes its nominal quota 4 -> 6; nothing else of it does.
    assert re.search(r'diff-del">-\s+nominalQuota: 4<', html) and re.search(r'diff-add">\+\s+nominalQuota: 6<', html)


async def test_reject_and_withdraw_ask_to_confirm_first(browser, v1, fresh_engine):
    rita, rita_csrf = await browser("rita", "reviewer")
    olga, olga_csrf = await browser("olga", "operator")
    change_id = submitted(fresh_engine, v1)
    url = f"/policy/changes/{change_id}"
    asked = await post(rita, f"{url}/reject", rita_csrf, comment="not now")
    assert asked.status_code == 200 and "Reject #" in asked.text and 'name="confirm" value="yes"' in asked.text
    assert f'href="{url}">Cancel' in asked.text and row(fresh_engine, ChangeRequest, change_id).state == ChangeState.SUBMITTED
    assert (await post(rita, f"{url}/reject", rita_csrf, comment="not now", confirm="yes")).status_code == 303
    assert row(fresh_engine, ChangeRequest, change_id).state == ChangeState.REJECTED
    # Asking to confirm something that would be refused is refused at once (no confirm page for a 403 or 409).
    assert (await post(rita, f"{url}/withdraw", rita_csrf)).status_code == 403
    assert (await post(olga, f"{url}/withdraw", olga_csrf)).status_code == 409

    other = submitted(fresh_engine, v1, title="other")
    asked = await post(olga, f"/policy/changes/{other}/withdraw", olga_csrf)
    assert asked.status_code == 200 and "Withdraw #" in asked.text
    assert row(fresh_engine, ChangeRequest, other).state == ChangeState.SUBMITTED
    assert (await post(olga, f"/policy/changes/{other}/withdraw", olga_csrf, confirm="yes")).status_code == 303
    assert row(fresh_engine, ChangeRequest, other).state == ChangeState.WITHDRAWN


async def test_rollback_asks_to_confirm_first(browser, v1, fresh_engine):
    olga, olga_csrf = await browser("olga", "operator")
    release_id = applied_release(fresh_engine, v1, effective_from=floor_hour(utcnow()))
    url = f"/policy/releases/{release_id}/rollback"
    assert (await post(olga, url, olga_csrf, effective_from="soon")).status_code == 422  # a typo, before confirming
    asked = await post(olga, url, olga_csrf)
    assert asked.status_code == 200 and "Roll back search v2" in asked.text and "equal to version 1" in asked.text
    assert row(fresh_engine, Release, release_id).state == ReleaseState.APPLIED
    assert (await post(olga, url, olga_csrf, effective_from="", confirm="yes")).status_code == 303
    assert row(fresh_engine, Release, release_id).state == ReleaseState.ROLLED_BACK
    assert (await post(olga, url, olga_csrf)).status_code == 409  # nothing left to confirm


async def test_deploy_before_the_version_is_in_effect_is_409_and_the_board_says_why(browser, v1, fresh_engine):
    olga, olga_csrf = await browser("olga", "operator")
    effective = floor_hour(utcnow()) + timedelta(hours=2)
    release_id = applied_release(fresh_engine, v1, effective_from=effective)
    refused = await post(olga, f"/policy/releases/{release_id}/deploy", olga_csrf)
    assert refused.status_code == 409 and "takes effect at" in refused.text
    api = await olga.post(f"/api/v1/policy/releases/{release_id}/deploy", headers={"X-CSRF-Token": olga_csrf})
    assert api.status_code == 409 and api.headers["content-type"].startswith("application/problem+json")
    assert effective.isoformat() in api.json()["detail"]
    assert row(fresh_engine, Release, release_id).state == ReleaseState.APPLIED
    board = (await olga.get("/policy/releases")).text
    assert f'disabled aria-describedby="deploy-blocker-{release_id}"' in board and "Not yet: version 2 takes effect" in board


async def test_artifacts_of_a_version_and_of_a_change_with_unified_diffs(browser, v1, fresh_engine):
    vic, _ = await browser("vic", "viewer")
    release_id = applied_release(fresh_engine, v1, effective_from=floor_hour(utcnow()))
    version = row(fresh_engine, Release, release_id).applied_version_id
    page = await vic.get(f"/policy/versions/{version}/artifacts")
    assert page.status_code == 200 and "kueue" in page.text and "against version 1" in page.text
    assert re.search(r'diff-add">\+\s+nominalQuota: 6<', page.text)
    assert "# Rendered by gpu-chargeback from policy version" in page.text  # each file's text is shown
    assert f'href="/policy/versions/{version}/artifacts"' in (await vic.get(f"/policy/versions/{version}")).text
    api = (await vic.get(f"/api/v1/policy/versions/{version}/artifacts/diff")).json()
    assert api["version"] == version and api["against"] == 1 and api["change"] is None
    statuses = {f["file"]: f["status"] for f in api["files"]}
    assert statuses["kueue/clusterqueues.yaml"] == "changed" and "same" in statuses.values()
    assert all((f["diff"] == "") == (f["status"] == "same") for f in api["files"])
    first = await vic.get("/policy/versions/1/artifacts")
    assert first.status_code == 200 and "nothing to compare with" in first.text and "diff-add" not in first.text
    assert (await vic.get("/policy/versions/99/artifacts")).status_code == 404

    with unit_of_work(fresh_engine) as session:  # a draft made now: diffed against the active version 2 (6 -> 8)
        change_id = draft(session, v1, edit=set_quota(8)).id
    page = await vic.get(f"/policy/changes/{change_id}/artifacts")
    assert page.status_code == 200 and f"version {version} (active)" in page.text and "same" in page.text
    assert re.search(r'diff-del">-\s+nominalQuota: 6<', page.text) and re.search(r'diff-add">\+\s+nominalQuota: 8<', page.text)
    with unit_of_work(fresh_engine) as session:
        broken = changes.create_change(session=session, actor="olga", title="t", justification="j", document="tenants: [").id
    refused = await vic.get(f"/policy/changes/{broken}/artifacts")
    assert refused.status_code == 422 and "does not validate" in refused.text
    refused = await vic.get(f"/api/v1/policy/changes/{broken}/artifacts")
    assert refused.status_code == 422 and [e["path"] for e in refused.json()["errors"]] == ["document"]
    api = (await vic.get(f"/api/v1/policy/changes/{change_id}/artifacts")).json()
    assert api["change"] == change_id and api["against"] == version
    queues = next(f["diff"] for f in api["files"] if f["file"] == "kueue/clusterqueues.yaml")
    assert re.search(r"^\+\s+nominalQuota: 8$", queues, re.M)
    assert "nothing to render until they are fixed" in (await vic.get(f"/policy/changes/{broken}")).text


async def test_after_apply_the_change_page_keeps_the_artifact_diff_as_approved(browser, v1, fresh_engine):
    vic, _ = await browser("vic", "viewer")
    release_id = applied_release(fresh_engine, v1, effective_from=floor_hour(utcnow()))
    with unit_of_work(fresh_engine) as session:
        (change,) = releases.attached(session=session, release_id=release_id)
    html = (await vic.get(f"/policy/changes/{change.id}")).text
    section = re.search(r'<section class="card" id="artifacts".*?</section>', html, re.S).group(0)
    # Against its base (version 1), not the active version 2 it became (which would show no change at all).
    assert "Rendered artifacts against version 1 (its base)" in section and "No rendered file changes" not in section
    assert re.search(r'diff-del">-\s+nominalQuota: 4<', section) and re.search(r'diff-add">\+\s+nominalQuota: 6<', section)
    page = await vic.get(f"/policy/changes/{change.id}/artifacts")
    assert "against version 1 (its base)" in page.text and re.search(r'diff-add">\+\s+nominalQuota: 6<', page.text)
    api = (await vic.get(f"/api/v1/policy/changes/{change.id}/artifacts")).json()
    assert api["against"] == 1 and "against_active" not in api
