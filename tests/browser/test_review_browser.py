"""Review and release in headless chromium: a reviewer finds a submitted change in "awaiting my review" (and the
nav count), sees the rendered-artifact diff above the decision buttons, confirms and approves; reject, withdraw
and roll back each stop at a confirm step first. Screenshots go to artifacts/screenshots/review-*.png."""

from __future__ import annotations

from datetime import timedelta

import pytest
from playwright.sync_api import expect

from app.core.db import unit_of_work
from app.core.timeutil import floor_hour, utcnow
from app.policy.service import latest_version
from app.review import changes, releases
from app.review.models import ChangeRequest, ChangeState, Release, ReleaseState
from tests.support.browser import SHOTS, ask, submit
from tests.support.review import edited, set_p99

pytestmark = pytest.mark.browser


def shot(page, name: str) -> None:
    page.screenshot(path=str(SHOTS / f"review-{name}.png"), full_page=True)


def trim_vision(data: dict) -> None:
    data["quotas"][0]["guaranteed_gpus"] -= 1


@pytest.fixture(scope="module")
def scene(engine) -> dict:
    """A release applied this hour (to roll back), then two submitted requests by olga and one draft."""
    with unit_of_work(engine) as session:
        v1 = latest_version(session=session)
        tighter = changes.create_change(session=session, actor="olga", title="Tighter search red line",
                                        justification="users notice 300 ms", document=edited(v1, set_p99(250)))
        changes.submit(session=session, change_id=tighter.id, actor="olga")
        changes.approve(session=session, change_id=tighter.id, actor="rex")
        release = releases.create_release(session=session, actor="olga", name="search-chat 2.5", service="search-chat",
                                          planned_at=floor_hour(utcnow()))
        releases.attach(session=session, release_id=release.id, change_id=tighter.id, actor="olga")
        v2 = releases.apply_release(session=session, release_id=release.id, actor="olga", effective_from=floor_hour(utcnow()))
        made = {}
        for key, title in (("approve", "Trim the vision guarantee"), ("reject", "Trim it again"), ("withdraw", "Draft trim")):
            change = changes.create_change(session=session, actor="olga", title=title, justification="etl needs GPUs",
                                           document=edited(v2, trim_vision))
            if key != "withdraw":
                changes.submit(session=session, change_id=change.id, actor="olga")
            made[key] = change.id
        return {**made, "release": release.id, "version": v2.id}


def state(engine, model, ident) -> str:
    with unit_of_work(engine) as session:
        return session.get(model, ident).state


def test_reviewer_finds_the_change_sees_the_artifact_diff_first_confirms_and_approves(portal, sessions, console, scene,
                                                                                       engine):
    base = portal["base"]
    rex = sessions("rex")
    rex.goto(f"{base}/")
    badge = rex.locator(".site-nav a[href='/policy'] .nav-badge")
    expect(badge).to_have_text("2 awaiting your review")  # the visible count plus its words for screen readers
    rex.click(".site-nav a[href='/policy']")
    rex.click("nav.tabs a:has-text('Awaiting my review (2)')")
    rex.wait_for_url(f"{base}/policy/review")
    expect(rex.locator("main table")).to_contain_text("Trim the vision guarantee")
    shot(rex, "awaiting")
    rex.click("main a:has-text('Trim the vision guarantee')")
    rex.wait_for_url(f"{base}/policy/changes/{scene['approve']}")

    diff = rex.locator("#artifacts .diff-add").first
    approve = rex.locator("#decision button:has-text('Approve')")
    expect(diff).to_be_visible()
    assert diff.bounding_box()["y"] < approve.bounding_box()["y"]  # the evidence comes before the decision
    assert rex.locator("#impact").bounding_box()["y"] < approve.bounding_box()["y"]
    shot(rex, "change")

    rex.fill("#review-comment", "etl needs it; vision borrows in dark time.")
    ask(rex, "#decision button:has-text('Approve')", shows="Approve change request")
    assert state(engine, ChangeRequest, scene["approve"]) == ChangeState.SUBMITTED  # nothing happened yet
    expect(rex.locator("#confirm-comment")).to_have_value("etl needs it; vision borrows in dark time.")
    shot(rex, "confirm-approve")
    submit(rex, "main form button:has-text('Approve')", shows="approved")
    assert state(engine, ChangeRequest, scene["approve"]) == ChangeState.APPROVED
    expect(rex.locator(".site-nav a[href='/policy'] .nav-badge")).to_have_text("1 awaiting your review")
    assert not console.problems, console.problems


def test_reject_withdraw_and_rollback_stop_at_a_confirm_step(portal, sessions, console, scene, engine):
    base = portal["base"]
    rex = sessions("rex")
    rex.goto(f"{base}/policy/changes/{scene['reject']}")
    ask(rex, "#decision button:has-text('Reject')", shows="Reject change request")
    rex.click("main a:has-text('Cancel')")  # cancelling leaves it as it was
    rex.wait_for_url(f"{base}/policy/changes/{scene['reject']}")
    assert state(engine, ChangeRequest, scene["reject"]) == ChangeState.SUBMITTED
    ask(rex, "#decision button:has-text('Reject')", shows="Reject change request")
    submit(rex, "main form button:has-text('Reject')", shows="rejected")
    assert state(engine, ChangeRequest, scene["reject"]) == ChangeState.REJECTED

    olga = sessions("olga")
    olga.goto(f"{base}/policy/changes/{scene['withdraw']}")
    ask(olga, "#decision button:has-text('Withdraw')", shows="Withdraw change request")
    assert state(engine, ChangeRequest, scene["withdraw"]) == ChangeState.DRAFT
    submit(olga, "main form button:has-text('Withdraw')", shows="withdrawn")
    assert state(engine, ChangeRequest, scene["withdraw"]) == ChangeState.WITHDRAWN

    olga.goto(f"{base}/policy/releases")
    release = olga.locator("article", has_text="search-chat 2.5")
    expect(release.locator("button:has-text('Mark deployed')")).to_be_enabled()  # in effect since this hour
    shot(olga, "releases")
    ask(olga, "article:has-text('search-chat 2.5') button:has-text('Roll back')", shows="Roll back release search-chat 2.5")
    shot(olga, "confirm-rollback")
    assert state(engine, Release, scene["release"]) == ReleaseState.APPLIED
    submit(olga, "main form button:has-text('Roll back')", shows="Rolled back as")
    assert state(engine, Release, scene["release"]) == ReleaseState.ROLLED_BACK

    # A release whose version takes effect in two hours: "Mark deployed" waits, and says why.
    with unit_of_work(engine) as session:
        current = latest_version(session=session)
        later = changes.create_change(session=session, actor="olga", title="Later trim", justification="next shift",
                                      document=edited(current, trim_vision))
        changes.submit(session=session, change_id=later.id, actor="olga")
        changes.approve(session=session, change_id=later.id, actor="rex")
        pending = releases.create_release(session=session, actor="olga", name="vision 3.1", service="vision-train",
                                          planned_at=floor_hour(utcnow()))
        releases.attach(session=session, release_id=pending.id, change_id=later.id, actor="olga")
        releases.apply_release(session=session, release_id=pending.id, actor="olga",
                               effective_from=floor_hour(utcnow()) + timedelta(hours=2))
    olga.goto(f"{base}/policy/releases")
    waiting = olga.locator("article", has_text="vision 3.1")
    expect(waiting.locator("button:has-text('Mark deployed')")).to_be_disabled()
    expect(waiting).to_contain_text("Not yet: version")
    shot(olga, "releases-waiting")

    olga.goto(f"{base}/policy/versions/{scene['version']}/artifacts")
    expect(olga.locator("main")).to_contain_text("against version")
    shot(olga, "artifacts")
    assert not console.problems, console.problems
