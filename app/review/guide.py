"""The next step of the policy flow (SPEC section 7): draft -> submitted -> approved -> attached to a release ->
applied -> deployed, and where each step is taken.

Pure functions over rows the pages already load, so the change page, the releases board and the page of a
refused action name the same next step. A step either links somewhere (`href`) or is a form post (`action`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from app.core.errors import AppError
from app.core.timeutil import aware
from app.review.models import ChangeRequest, ChangeState, Release, ReleaseState

BOARD = "/policy/releases"


@dataclass(frozen=True)
class Step:
    """What to do next: a one-line title, why or who, and where (a link, or a form post with its button)."""

    title: str
    detail: str = ""
    href: str | None = None
    label: str | None = None
    action: str | None = None  # a POST (with CSRF) instead of a link
    done: bool = False  # the flow has ended (deployed, rolled back, rejected, withdrawn)


@dataclass
class Refused(AppError):
    """A refused step of the flow, as its page shows it: what was refused (the title), why, and what to do next."""

    step: Step | None = None
    back: tuple[str, str] | None = None  # (href, label) of the page the action was taken from


def refused(error: AppError, *, what: str, step: Step, back: tuple[str, str] | None = None) -> Refused:
    """`error` (same status, detail and field errors) titled with what was refused and carrying the next step."""
    return Refused(detail=error.detail, status=error.status, title=what, errors=error.errors, step=step, back=back)


def release_href(release_id: int) -> str:
    """A release on the board (each release is an article with this anchor)."""
    return f"{BOARD}#release-{release_id}"


def _when(value: datetime | None) -> str:
    return aware(value).strftime("%Y-%m-%d %H:%M UTC") if value is not None else "–"


def release_step(release: Release, attached: list[ChangeRequest], *, current_version_id: int, now: datetime,
                 free_approved: int) -> Step:
    """The next step of a release, given its attached requests, the current version and how many approved
    requests wait for a release."""
    here = release_href(release.id)
    if release.state == ReleaseState.PLANNED:
        if not attached:
            if free_approved:
                return Step("Attach an approved change request",
                            f"Nothing is attached to {release.name} yet, so there is no policy to apply; "
                            f"{free_approved} approved request{'s wait' if free_approved != 1 else ' waits'} for a release.",
                            here, f"Attach to {release.name}")
            return Step("Get a change request approved",
                        f"Nothing is attached to {release.name} and no approved request is free to attach: "
                        "a reviewer approves a submitted request first.", "/policy/changes?state=submitted",
                        "Submitted change requests")
        stale = [c for c in attached if c.base_version_id != current_version_id]
        if stale:
            c = stale[0]
            return Step(f"Rebase change request #{c.id}",
                        f"#{c.id} is based on version {c.base_version_id} but version {current_version_id} is current: "
                        "its author rebases it on its page, then the release can be applied.",
                        f"/policy/changes/{c.id}", f"Change request #{c.id}")
        ids = ", ".join(f"#{c.id}" for c in attached)
        return Step("Apply policy", f"{ids} become{'s' if len(attached) == 1 else ''} the active policy version from "
                    "the hour you choose, with their artifacts rendered.", here, f"Apply {release.name}")
    if release.state == ReleaseState.APPLIED:
        effective = aware(release.effective_from) if release.effective_from is not None else None
        if effective is not None and effective > now:
            return Step("Mark deployed once the version is in effect",
                        f"Version {release.applied_version_id} takes effect at {_when(effective)}; the rollout is "
                        "marked deployed from then.", here, f"{release.name} on the board")
        return Step("Mark deployed", f"Version {release.applied_version_id} is in effect since {_when(effective)}: "
                    f"once {release.service} runs with it, mark the release deployed.", here, f"Mark {release.name} deployed")
    if release.state == ReleaseState.DEPLOYED:
        return Step("Done: deployed", f"{release.name} was marked deployed by {release.deployed_by} at "
                    f"{_when(release.deployed_at)} with version {release.applied_version_id}.",
                    f"/policy/versions/{release.applied_version_id}", f"Version {release.applied_version_id}", done=True)
    return Step("Done: rolled back", f"{release.name} was rolled back as version {release.rollback_version_id}.",
                f"/policy/versions/{release.rollback_version_id}", f"Version {release.rollback_version_id}", done=True)


def change_step(change: ChangeRequest, release: Release | None, attached: list[ChangeRequest], *, viewer: str,
                may_review: bool, may_operate: bool, current_version_id: int, now: datetime, free_approved: int) -> Step:
    """The next step of a change request for `viewer`; once attached, its release's next step."""
    mine = viewer == change.author
    page = f"/policy/changes/{change.id}"
    stale = change.base_version_id != current_version_id
    if change.state in (ChangeState.DRAFT, ChangeState.SUBMITTED, ChangeState.APPROVED) and stale and release is None:
        return Step("Rebase onto the current version",
                    f"The request is based on version {change.base_version_id}; version {current_version_id} is current. "
                    + ("Rebase it (the button above)." if mine else f"Its author, {change.author}, rebases it."),
                    f"{page}#rebase" if mine else None, "Rebase" if mine else None)
    if change.state == ChangeState.DRAFT:
        if mine:
            return Step("Submit for review", "Edit the draft with the section forms or the YAML editor, then send it to "
                        "a reviewer; errors block submitting.", action=f"{page}/submit", label="Submit for review")
        return Step("Waiting for its author", f"{change.author} is still editing this draft and submits it for review.")
    if change.state == ChangeState.SUBMITTED:
        if may_review and not mine:
            return Step("Review it", "Read the evidence below, then approve or reject (each asks to confirm).",
                        f"{page}#decision", "Approve or reject")
        return Step("Waiting for a reviewer", "A reviewer other than its author approves or rejects it (four eyes).",
                    "/policy/review" if may_review else None, "Awaiting review" if may_review else None)
    if change.state == ChangeState.APPROVED and release is None:
        if may_operate:
            return Step("Attach it to a release", "Approved requests take effect through a release: attach it to a "
                        "planned release (or plan one), then apply policy.", f"{BOARD}?change={change.id}#attach",
                        "Attach to a release")
        return Step("Waiting for an operator", "An operator attaches it to a release and applies policy.", BOARD, "Releases")
    if change.state in (ChangeState.APPROVED, ChangeState.APPLIED) and release is not None:
        step = release_step(release, attached, current_version_id=current_version_id, now=now, free_approved=free_approved)
        if may_operate or step.done:
            return step
        return Step(step.title, f"{step.detail} An operator does this.", step.href, step.label, done=step.done)
    if change.state == ChangeState.APPLIED:  # applied before releases kept their requests (imported history)
        return Step("Done: applied", f"It is part of version {change.applied_version_id}.",
                    f"/policy/versions/{change.applied_version_id}", f"Version {change.applied_version_id}", done=True)
    final = "rejected" if change.state == ChangeState.REJECTED else "withdrawn"
    return Step(f"Done: {final}", f"A {final} request is final; a new change request starts from the current version.",
                "/policy/changes/new" if may_operate else None, "New change request" if may_operate else None, done=True)


DONE_EVENTS = ("planned", "attached", "detached", "applied", "deployed", "rolled_back")


def done_message(event: str, release: Release, change: ChangeRequest | None = None) -> str | None:
    """The success message after `event` on `release`, with the next step; None when the release's state does not
    bear the event out (an old or edited link shows nothing rather than a false success)."""
    name = f"Release {release.name} ({release.service})"
    if event == "planned" and release.state == ReleaseState.PLANNED:
        return f"{name} planned. Next: attach approved change requests to it."
    if event == "attached" and change is not None and release.state == ReleaseState.PLANNED:
        return f"Change request #{change.id} “{change.title}” attached to {release.name}. Next: apply policy."
    if event == "detached" and change is not None:
        return f"Change request #{change.id} detached from {release.name}; it is approved and free to attach again."
    if event == "applied" and release.applied_version_id is not None:
        return (f"{name} applied: version {release.applied_version_id} is the policy from "
                f"{_when(release.effective_from)}, its artifacts rendered. Next: mark it deployed once it is in effect.")
    if event == "deployed" and release.state == ReleaseState.DEPLOYED:
        return f"{name} marked deployed with version {release.applied_version_id}."
    if event == "rolled_back" and release.rollback_version_id is not None:
        return f"{name} rolled back: version {release.rollback_version_id} restores version {release.previous_version_id}."
    return None
