"""The policy flow as a guided path (issue 30 item 3): the change page names the next step in every state and
links where it is taken; Apply policy is offered only with something attached; a refused apply or deploy is a page
saying what was refused and what to do next; Apply and Mark deployed confirm first and say what they did."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest

from app.core.db import unit_of_work
from app.core.timeutil import floor_hour, utcnow
from app.review import releases
from app.review.models import ChangeRequest, ChangeState, Release, ReleaseState
from tests.support.review import approved, draft, post, row

pytestmark = pytest.mark.anyio
HOUR = "%Y-%m-%dT%H:%M"


def next_step(html: str) -> str:
    """The change page's next-step card."""
    found = re.search(r'<section class="card next-step[^"]*" id="next-step".*?</section>', html, re.S)
    assert found, "no next-step card"
    return found.group(0)


def release_article(html: str, release_id: int) -> str:
    found = re.search(rf'<article id="release-{release_id}".*?</article>', html, re.S)
    assert found, f"release {release_id} is not on the board"
    return found.group(0)


def planned(engine, name: str = "search v2") -> int:
    with unit_of_work(engine) as session:
        return releases.create_release(session=session, actor="olga", name=name, service="search-chat",
                                       planned_at=floor_hour(utcnow())).id


async def test_the_change_page_leads_from_draft_to_deployed(browser, v1, fresh_engine):
    olga, olga_csrf = await browser("olga", "operator")
    rita, rita_csrf = await browser("rita", "reviewer")
    with unit_of_work(fresh_engine) as session:
        change_id = draft(session, v1).id
    url = f"/policy/changes/{change_id}"

    card = next_step((await olga.get(url)).text)  # draft, by its author: submit, right there
    assert "Next step: Submit for review" in card and f'action="{url}/submit"' in card
    assert "Waiting for its author" in next_step((await rita.get(url)).text)
    assert (await post(olga, f"{url}/submit", olga_csrf)).status_code == 303

    card = next_step((await rita.get(url)).text)  # submitted: the reviewer is sent to the decision
    assert "Next step: Review it" in card and f'href="{url}#decision"' in card
    assert "Waiting for a reviewer" in next_step((await olga.get(url)).text)  # not the author's to approve
    assert (await post(rita, f"{url}/approve", rita_csrf, confirm="yes")).status_code == 303

    # Approved: the operator is sent to the releases board with this request up for attaching.
    card = next_step((await olga.get(url)).text)
    attach = f"/policy/releases?change={change_id}#attach"
    assert "Next step: Attach it to a release" in card and f'href="{attach}"' in card
    board = (await olga.get(attach)).text
    assert 'id="attach"' in board and "No release is planned yet" in board and f"Plan and attach #{change_id}" in board
    done = await post(olga, "/policy/releases", olga_csrf, name="search v2", service="search-chat",
                      planned_at=floor_hour(utcnow()).strftime(HOUR), change_id=str(change_id))
    assert done.status_code == 303
    with unit_of_work(fresh_engine) as session:
        release_id = releases.release_of_change(session=session, change_id=change_id)
    assert done.headers["location"] == f"/policy/releases?done=attached&release={release_id}&change={change_id}#done"
    board = (await olga.get(done.headers["location"])).text
    assert f"Change request #{change_id} “More GPUs for vision” attached to search v2. Next: apply policy." in board

    card = next_step((await olga.get(url)).text)  # attached: apply, on the release's place on the board
    assert "Next step: Apply policy" in card and f'href="/policy/releases#release-{release_id}"' in card
    assert f'href="/policy/releases#release-{release_id}">release search v2</a> (planned)' in (await olga.get(url)).text

    done = await post(olga, f"/policy/releases/{release_id}/apply", olga_csrf,
                      effective_from=floor_hour(utcnow()).strftime(HOUR), confirm="yes")
    assert done.status_code == 303
    board = (await olga.get(done.headers["location"])).text
    assert re.search(r'class="alert alert-ok" role="status" id="done"><p>Release search v2 \(search-chat\) applied: '
                     r"version 2 is the policy from .* Next: mark it deployed", board)
    card = next_step((await olga.get(url)).text)
    assert "Next step: Mark deployed" in card and "Version 2 is in effect since" in card

    done = await post(olga, f"/policy/releases/{release_id}/deploy", olga_csrf, confirm="yes")
    assert done.status_code == 303
    assert "Release search v2 (search-chat) marked deployed with version 2." in (await olga.get(done.headers["location"])).text
    card = next_step((await olga.get(url)).text)
    assert 'id="next-step-title">Done: deployed</h2>' in card and 'href="/policy/versions/2"' in card


async def test_a_viewer_and_final_states_are_told_who_acts_and_where_it_ended(browser, v1, fresh_engine):
    vic, _ = await browser("vic", "viewer")
    olga, olga_csrf = await browser("olga", "operator")
    with unit_of_work(fresh_engine) as session:
        change = approved(session, v1)
        gone = approved(session, v1)
    card = next_step((await vic.get(f"/policy/changes/{change.id}")).text)
    assert "Waiting for an operator" in card and 'href="/policy/releases"' in card
    assert (await post(olga, f"/policy/changes/{gone.id}/withdraw", olga_csrf, confirm="yes")).status_code == 303
    card = next_step((await olga.get(f"/policy/changes/{gone.id}")).text)
    assert "Done: withdrawn" in card and 'href="/policy/changes/new"' in card and "next-step-done" in card


async def test_apply_is_offered_only_with_something_attached(browser, v1, fresh_engine):
    olga, _ = await browser("olga", "operator")
    empty = planned(fresh_engine, "empty one")
    full = planned(fresh_engine, "full one")
    with unit_of_work(fresh_engine) as session:
        releases.attach(session=session, release_id=full, change_id=approved(session, v1).id, actor="olga")
    board = (await olga.get("/policy/releases")).text
    bare = release_article(board, empty)
    assert f"/policy/releases/{empty}/apply" not in bare and "Apply policy" not in bare
    assert "Next: Get a change request approved." in bare  # and why there is nothing to apply
    assert f'action="/policy/releases/{full}/apply"' in release_article(board, full)
    assert "Apply policy…" in release_article(board, full)


async def test_a_refused_apply_or_deploy_says_what_happened_and_what_to_do_next(browser, v1, fresh_engine):
    olga, olga_csrf = await browser("olga", "operator")
    release_id = planned(fresh_engine)
    now = floor_hour(utcnow()).strftime(HOUR)
    for confirm in ("", "yes"):  # the confirm step refuses at once; a post that skips it is refused by the gate
        refused = await post(olga, f"/policy/releases/{release_id}/apply", olga_csrf, effective_from=now, confirm=confirm)
        assert refused.status_code == 409 and "409 · Conflict" not in refused.text
        assert '<strong id="error-title">search v2 was not applied</strong>' in refused.text
        assert "has no approved change requests attached" in refused.text
        # The gate claimed the release before finding nothing attached, then rolled back: the page reads it as it is.
        assert "What to do next: Get a change request approved" in refused.text
        assert 'href="/policy/changes?state=submitted"' in refused.text
        assert f'<a href="/policy/releases#release-{release_id}">Back to the releases board</a>' in refused.text
    assert row(fresh_engine, Release, release_id).state == ReleaseState.PLANNED

    refused = await post(olga, f"/policy/releases/{release_id}/deploy", olga_csrf, confirm="yes")
    assert refused.status_code == 409 and "search v2 was not marked deployed" in refused.text
    with unit_of_work(fresh_engine) as session:
        change_id = approved(session, v1).id
    refused = await post(olga, f"/policy/releases/{release_id}/deploy", olga_csrf)
    assert "What to do next: Attach an approved change request" in refused.text
    assert f'href="/policy/releases#release-{release_id}"' in refused.text
    with unit_of_work(fresh_engine) as session:
        releases.attach(session=session, release_id=release_id, change_id=change_id, actor="olga")
    refused = await post(olga, f"/policy/releases/{release_id}/deploy", olga_csrf)
    assert refused.status_code == 409 and "What to do next: Apply policy" in refused.text

    # A past hour is a 422 with the field named, and the same guidance.
    past = (floor_hour(utcnow()) - timedelta(hours=3)).strftime(HOUR)
    refused = await post(olga, f"/policy/releases/{release_id}/apply", olga_csrf, effective_from=past)
    assert refused.status_code == 422 and "<code>effective_from</code>" in refused.text
    assert "What to do next: Apply policy" in refused.text
    # A decision on a request that has moved on: its next step, not a bare conflict.
    refused = await post(olga, f"/policy/changes/{change_id}/withdraw", olga_csrf)
    assert refused.status_code == 409 and f"Change request #{change_id} was not withdrawn" in refused.text
    assert "What to do next: Apply policy" in refused.text and "409 · Conflict" not in refused.text


async def test_apply_and_mark_deployed_ask_to_confirm_first(browser, v1, fresh_engine):
    olga, olga_csrf = await browser("olga", "operator")
    release_id = planned(fresh_engine)
    with unit_of_work(fresh_engine) as session:
        change_id = approved(session, v1).id
        releases.attach(session=session, release_id=release_id, change_id=change_id, actor="olga")
    url = f"/policy/releases/{release_id}"
    now = floor_hour(utcnow()).strftime(HOUR)
    assert (await post(olga, f"{url}/apply", olga_csrf, effective_from="soon")).status_code == 422  # before confirming
    asked = await post(olga, f"{url}/apply", olga_csrf, effective_from=now)
    assert asked.status_code == 200 and "Apply search v2?" in asked.text
    assert f"#{change_id} “More GPUs for vision” becomes a new policy version, in effect from {now.replace('T', ' ')} UTC" in asked.text
    assert 'name="confirm" value="yes"' in asked.text and f'name="effective_from" value="{now}"' in asked.text
    assert f'href="/policy/releases#release-{release_id}">Cancel' in asked.text
    assert row(fresh_engine, Release, release_id).state == ReleaseState.PLANNED  # nothing happened yet
    assert (await post(olga, f"{url}/apply", olga_csrf, effective_from=now, confirm="yes")).status_code == 303
    assert row(fresh_engine, ChangeRequest, change_id).state == ChangeState.APPLIED

    asked = await post(olga, f"{url}/deploy", olga_csrf)
    assert asked.status_code == 200 and "Mark search v2 deployed?" in asked.text and "with version 2" in asked.text
    assert row(fresh_engine, Release, release_id).state == ReleaseState.APPLIED
    assert (await post(olga, f"{url}/deploy", olga_csrf, confirm="yes")).status_code == 303
    assert row(fresh_engine, Release, release_id).state == ReleaseState.DEPLOYED
    assert (await post(olga, f"{url}/rollback", olga_csrf, confirm="yes")).headers["location"] == (
        f"/policy/releases?done=rolled_back&release={release_id}#done")


async def test_a_success_message_needs_the_state_to_bear_it_out_and_bad_queries_are_422(browser, v1, fresh_engine):
    olga, _ = await browser("olga", "operator")
    release_id = planned(fresh_engine)
    board = await olga.get(f"/policy/releases?done=applied&release={release_id}")
    assert board.status_code == 200 and 'id="done"' not in board.text  # not applied: no false success
    assert 'id="done"' not in (await olga.get("/policy/releases?done=nonsense&release=1")).text
    assert 'id="done"' not in (await olga.get(f"/policy/releases?done=attached&release={release_id}&change=77")).text
    for query in ("release=abc", "release=0", "change=-1", f"change={2**63}"):
        assert (await olga.get(f"/policy/releases?{query}")).status_code == 422, query
    assert 'id="attach"' not in (await olga.get("/policy/releases?change=99")).text  # not an approved, free request


async def test_detach_is_a_dark_button_not_the_headers_white_one(browser, v1, fresh_engine):
    olga, _ = await browser("olga", "operator")
    release_id = planned(fresh_engine)
    with unit_of_work(fresh_engine) as session:
        releases.attach(session=session, release_id=release_id, change_id=approved(session, v1).id, actor="olga")
    article = release_article((await olga.get("/policy/releases")).text, release_id)
    assert re.search(r'<button type="submit" class="button-small">Detach</button>', article)
    assert "link-button" not in article
    css = (await olga.get("/static/app.css")).text
    rule = re.search(r"\.button-small \{([^}]*)\}", css)
    assert rule and "color: var(--ink)" in rule.group(1) and "background: var(--paper)" in rule.group(1)


async def test_the_first_page_offers_the_section_forms(browser, v1, fresh_engine):
    olga, olga_csrf = await browser("olga", "operator")
    page = (await olga.get("/policy/changes/new")).text
    offered = re.findall(r'<input type="radio" name="then" value="(\w*)"', page)
    assert offered == ["quotas", "priorities", "tenants", "pools", "isolation", "sla", "pricing", ""]
    assert re.search(r'name="then" value="" checked', page)  # Save draft alone still leads to the request's page
    created = await post(olga, "/policy/changes", olga_csrf, title="fewer GPUs", justification="etl", then="quotas")
    assert created.status_code == 303
    location = created.headers["location"]
    assert re.fullmatch(r"/policy/changes/\d+/sections/quotas", location)
    form = await olga.get(location)
    assert form.status_code == 200 and 'name="quotas[vision/mixed-a100].guaranteed_gpus"' in form.text
    change_id = int(location.split("/")[3])
    assert row(fresh_engine, ChangeRequest, change_id).base_version_id == v1.id  # a copy of the current version
    for then in ("", "nonsense"):  # anything but a section: the request's page, as before
        created = await post(olga, "/policy/changes", olga_csrf, title="t", justification="j", then=then)
        assert re.fullmatch(r"/policy/changes/\d+", created.headers["location"])


async def test_submitting_twice_says_the_request_waits_for_a_reviewer(browser, v1, fresh_engine):
    olga, olga_csrf = await browser("olga", "operator")
    with unit_of_work(fresh_engine) as session:
        change_id = draft(session, v1).id
    assert (await post(olga, f"/policy/changes/{change_id}/submit", olga_csrf)).status_code == 303
    again = await post(olga, f"/policy/changes/{change_id}/submit", olga_csrf)  # a second click, or Back and resend
    assert again.status_code == 409 and "409 · Conflict" not in again.text
    assert f"Change request #{change_id} was not submitted" in again.text and "only a draft can be submitted" in again.text
    assert "What to do next: Waiting for a reviewer" in again.text
    assert f'<a href="/policy/changes/{change_id}">Back to change request #{change_id}</a>' in again.text
