"""The next step of the policy flow, as pure functions: one worked case per branch a page relies on."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from app.review.guide import change_step, done_message, release_step
from app.review.models import ChangeRequest, ChangeState, Release, ReleaseState

NOW = datetime(2026, 12, 8, 10, tzinfo=UTC)


def change(state: str, *, id: int = 7, base: int = 3, author: str = "olga") -> ChangeRequest:
    return ChangeRequest(id=id, title="More GPUs", justification="j", author=author, state=state, base_version_id=base,
                         document="", created_at=NOW, updated_at=NOW)


def release(state: str = ReleaseState.PLANNED, **fields) -> Release:
    return Release(id=4, name="search v2", service="search-chat", planned_at=NOW, state=state, created_by="olga",
                   created_at=NOW, **fields)


def step_for(c: ChangeRequest, r: Release | None = None, attached=(), *, viewer="olga", review=False, operate=True,
             current=3):
    return change_step(c, r, list(attached), viewer=viewer, may_review=review, may_operate=operate,
                       current_version_id=current, now=NOW, free_approved=1)


def test_each_state_of_a_change_request_has_its_next_step():
    assert step_for(change(ChangeState.DRAFT)).action == "/policy/changes/7/submit"
    assert step_for(change(ChangeState.DRAFT), viewer="rita").action is None
    assert step_for(change(ChangeState.SUBMITTED), viewer="rita", review=True).href == "/policy/changes/7#decision"
    assert step_for(change(ChangeState.SUBMITTED), review=True).title == "Waiting for a reviewer"  # never the author
    assert step_for(change(ChangeState.APPROVED)).href == "/policy/releases?change=7#attach"
    assert step_for(change(ChangeState.APPROVED), operate=False).title == "Waiting for an operator"
    stale = step_for(change(ChangeState.APPROVED, base=2))
    assert stale.title == "Rebase onto the current version" and stale.href == "/policy/changes/7#rebase"
    attached = change(ChangeState.APPROVED)
    assert step_for(attached, release(), [attached]).title == "Apply policy"
    assert step_for(change(ChangeState.REJECTED)).done and step_for(change(ChangeState.WITHDRAWN)).href == "/policy/changes/new"


def test_a_release_steps_from_attach_to_deployed():
    r = release()
    assert release_step(r, [], current_version_id=3, now=NOW, free_approved=2).title == "Attach an approved change request"
    assert release_step(r, [], current_version_id=3, now=NOW, free_approved=0).href == "/policy/changes?state=submitted"
    stale = release_step(r, [change(ChangeState.APPROVED, base=2)], current_version_id=3, now=NOW, free_approved=0)
    assert stale.title == "Rebase change request #7" and stale.href == "/policy/changes/7"
    later = release(ReleaseState.APPLIED, applied_version_id=4, effective_from=NOW + timedelta(hours=2))
    waiting = release_step(later, [], current_version_id=4, now=NOW, free_approved=0)
    assert waiting.title == "Mark deployed once the version is in effect" and "2026-12-08 12:00 UTC" in waiting.detail
    due = release(ReleaseState.APPLIED, applied_version_id=4, effective_from=NOW)
    assert release_step(due, [], current_version_id=4, now=NOW, free_approved=0).title == "Mark deployed"
    deployed = release(ReleaseState.DEPLOYED, applied_version_id=4, deployed_by="olga", deployed_at=NOW)
    assert release_step(deployed, [], current_version_id=4, now=NOW, free_approved=0).done


def test_a_success_message_only_when_the_state_bears_it_out():
    assert done_message("applied", release()) is None
    assert done_message("deployed", release(ReleaseState.APPLIED, applied_version_id=4)) is None
    applied = release(ReleaseState.APPLIED, applied_version_id=4, effective_from=NOW)
    assert done_message("applied", applied).startswith("Release search v2 (search-chat) applied: version 4")
    assert done_message("anything", applied) is None
