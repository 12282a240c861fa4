"""Review and release pages: the reviewer's queue, a change request's evidence (validation, diff, rendered
artifacts, impact) above its decisions (approve, reject, withdraw, rebase, comments), rendered artifacts with
diffs, and the releases board (plan, attach, apply policy, mark deployed once in effect, roll back).
Approve, reject, withdraw and roll back ask to confirm first: the POST without confirm=yes answers with a
confirm page (no JavaScript needed) whose button posts the same form again with confirm=yes.
Same services and roles as the JSON API; forms post with CSRF. Editing a change request lives in app/web/policy.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Form, Query, Request
from sqlmodel import Session
from starlette.responses import Response

from app.auth.deps import Operator, Reviewer, Staff
from app.auth.principal import Principal
from app.core.deps import SessionDep
from app.core.errors import Conflict, FieldError, Invalid
from app.core.timeutil import aware, utcnow
from app.http.htmx import redirect_after_post as _redirect
from app.http.pagination import MAX_ID
from app.http.pagination import IdPath as Id
from app.http.templating import render
from app.policy.service import get_version, load_document
from app.review import artifacts, changes, guide, impact, releases
from app.review.deps import BucketsDep, PeaksDep
from app.review.models import ChangeRequest, Release, ReleaseState

router = APIRouter(prefix="/policy", include_in_schema=False)

Text = Annotated[str, Form()]
REVIEW_ROLES = frozenset({"admin", "reviewer"})
OPERATE_ROLES = frozenset({"admin", "operator"})


def _when(value: str, path: str) -> datetime | None:
    """A datetime-local field (read as UTC) or ISO 8601 text; empty is None."""
    if not value.strip():
        return None
    try:
        return aware(datetime.fromisoformat(value.strip().replace("Z", "+00:00")))
    except ValueError:
        raise Invalid(f"{value!r} is not a date and time", [FieldError(path, "expected YYYY-MM-DDTHH:MM (UTC)")]) from None


def _required_when(value: str, path: str) -> datetime:
    found = _when(value, path)
    if found is None:
        raise Invalid("a date and time is required", [FieldError(path, "required")])
    return found


# ---- change requests: evidence and decisions ------------------------------------------------------


@router.get("/review")
def awaiting_page(request: Request, session: SessionDep, user: Staff) -> Response:
    """The reviewer's queue: submitted requests by others on which this user has not decided."""
    may_review = bool(user.roles & REVIEW_ROLES)
    queue = changes.awaiting_review(session=session, reviewer=user.name) if may_review else []
    return render(request, "policy/review.html", {"title": "Awaiting my review", "changes": queue,
                                                  "may_review": may_review})


@router.get("/changes/{change_id}")
def change_page(change_id: Id, request: Request, session: SessionDep, user: Staff, peaks: PeaksDep, buckets: BucketsDep,
                month: str | None = None) -> Response:
    change = changes.get_change(session=session, change_id=change_id)
    release_id = releases.release_of_change(session=session, change_id=change.id)
    release = releases.get_release(session=session, release_id=release_id) if release_id else None
    context = {
        "title": f"Change request #{change.id}",
        "change": change,
        "next_step": _change_step(session, change, user),
        "preview": impact.preview(session=session, change=change, measured_peaks=peaks, month=month,
                                  latency_buckets=buckets),
        "artifacts": artifacts.change_artifacts(session=session, change=change),
        "comments": changes.comments(session=session, change_id=change.id),
        "decisions": changes.decisions(session=session, change_id=change.id),
        "release_id": release_id,
        "release": release,
        "user": user,
        "is_author": user.name == change.author,
        "can_review": bool(user.roles & REVIEW_ROLES) and user.name != change.author,
        "field_paths": changes.common_paths(load_document(get_version(session=session, number=change.base_version_id))),
        "can_operate": bool(user.roles & OPERATE_ROLES),
    }
    return render(request, "policy/change.html", context)


def _change_step(session: Session, change: ChangeRequest, user: Principal) -> guide.Step:
    release_id = releases.release_of_change(session=session, change_id=change.id)
    release = releases.get_release(session=session, release_id=release_id) if release_id else None
    return guide.change_step(
        change, release, releases.attached(session=session, release_id=release.id) if release else [],
        viewer=user.name, may_review=bool(user.roles & REVIEW_ROLES), may_operate=bool(user.roles & OPERATE_ROLES),
        current_version_id=changes.current_version(session=session).id, now=utcnow(),
        free_approved=len(releases.free_approved(session=session)))


def _release_step(session: Session, release: Release) -> guide.Step:
    return guide.release_step(release, releases.attached(session=session, release_id=release.id),
                              current_version_id=changes.current_version(session=session).id, now=utcnow(),
                              free_approved=len(releases.free_approved(session=session)))


@contextmanager
def _guided_release(session: Session, release_id: int, what: str) -> Iterator[None]:
    """A refused release action (409, 422) as a page saying what was refused and the release's next step."""
    try:
        yield
    except (Conflict, Invalid) as exc:
        session.expire_all()  # a refused gate rolled back its savepoint: read the release as it is
        release = session.get(Release, release_id)
        if release is None:
            raise
        raise guide.refused(exc, what=what.format(name=release.name), step=_release_step(session, release),
                            back=(guide.release_href(release.id), "the releases board")) from exc


@contextmanager
def guided_change(session: Session, change_id: int, user: Principal, what: str) -> Iterator[None]:
    """A refused action on a change request (409) as a page with the request's next step (also used by
    app/web/policy.py for submit)."""
    try:
        yield
    except Conflict as exc:
        session.expire_all()
        change = session.get(ChangeRequest, change_id)
        if change is None:
            raise
        raise guide.refused(exc, what=what.format(id=change.id), step=_change_step(session, change, user),
                            back=(f"/policy/changes/{change.id}", f"change request #{change.id}")) from exc


@router.get("/changes/{change_id}/artifacts")
def change_artifacts_page(change_id: Id, request: Request, session: SessionDep, user: Staff) -> Response:
    change = changes.get_change(session=session, change_id=change_id)
    shown = artifacts.change_artifacts_or_422(session=session, change=change)
    return render(request, "policy/artifacts.html", {
        "title": f"Rendered artifacts of change request #{change.id}", "shown": shown,
        "back": (f"/policy/changes/{change.id}", f"change request #{change.id}"),
        "new_label": f"change request #{change.id}",
        "old_label": f"version {shown['against']} ({'active' if shown['against_active'] else 'its base'})"})


@router.get("/versions/{number}/artifacts")
def version_artifacts_page(number: Id, request: Request, session: SessionDep, user: Staff) -> Response:
    shown = artifacts.version_artifacts(session=session, number=number)
    return render(request, "policy/artifacts.html", {
        "title": f"Rendered artifacts of policy version {number}", "shown": shown,
        "back": (f"/policy/versions/{number}", f"version {number}"), "new_label": f"version {number}",
        "old_label": f"version {shown['against']}" if shown["against"] else None,
        "zip": f"/api/v1/policy/versions/{number}/artifacts.zip"})


def _confirm(request: Request, *, title: str, question: str, action: str, button: str, back: str,
             fields: dict[str, str] | None = None, comment: str | None = None, danger: bool = True) -> Response:
    """The confirm step of a decision (works without JavaScript): the same POST again with confirm=yes."""
    return render(request, "policy/confirm.html", {"title": title, "question": question, "action": action,
                                                   "button": button, "back": back, "fields": fields or {},
                                                   "comment": comment, "danger": danger})


def _confirmed(confirm: str) -> bool:
    return confirm == "yes"


def _change_question(change: ChangeRequest, verb: str) -> str:
    return f"{verb} change request #{change.id} “{change.title}” by {change.author}?"


# decision -> (button, what confirming means beyond the question, service, a danger button)
_DECISIONS = {
    "approve": ("Approve", "", changes.approve, False),
    "reject": ("Reject", " A rejected request is final: its author starts a new one.", changes.reject, True),
}


def _decide(request: Request, session: Session, user: Principal, change_id: int, decision: str, comment: str, confirm: str) -> Response:
    with guided_change(session, change_id, user, f"Change request #{{id}} was not {decision}d"):
        return _decide_guarded(request, session, user, change_id, decision, comment, confirm)


def _decide_guarded(request: Request, session: Session, user: Principal, change_id: int, decision: str, comment: str,
                    confirm: str) -> Response:
    label, consequence, act, danger = _DECISIONS[decision]
    if not _confirmed(confirm):
        change = changes.get_change(session=session, change_id=change_id)
        changes.check_decidable(change, user.name, decision)
        return _confirm(request, title=f"{label} #{change.id}?", question=_change_question(change, label) + consequence,
                        action=f"/policy/changes/{change.id}/{decision}", button=label, comment=comment,
                        back=f"/policy/changes/{change.id}", danger=danger)
    act(session=session, change_id=change_id, actor=user.name, comment=comment)
    return _redirect(request, f"/policy/changes/{change_id}")


@router.post("/changes/{change_id}/approve")
def change_approve(change_id: Id, request: Request, session: SessionDep, user: Reviewer, comment: Text = "",
                   confirm: Text = "") -> Response:
    return _decide(request, session, user, change_id, "approve", comment, confirm)


@router.post("/changes/{change_id}/reject")
def change_reject(change_id: Id, request: Request, session: SessionDep, user: Reviewer, comment: Text = "",
                  confirm: Text = "") -> Response:
    return _decide(request, session, user, change_id, "reject", comment, confirm)


@router.post("/changes/{change_id}/withdraw")
def change_withdraw(change_id: Id, request: Request, session: SessionDep, user: Operator, confirm: Text = "") -> Response:
    with guided_change(session, change_id, user, "Change request #{id} was not withdrawn"):
        return _withdraw(request, session, user, change_id, confirm)


def _withdraw(request: Request, session: Session, user: Principal, change_id: int, confirm: str) -> Response:
    if not _confirmed(confirm):
        change = changes.get_change(session=session, change_id=change_id)
        changes.check_withdrawable(session=session, change=change, actor=user.name)
        return _confirm(request, title=f"Withdraw #{change.id}?", question=_change_question(change, "Withdraw")
                        + " A withdrawn request cannot be submitted again.",
                        action=f"/policy/changes/{change.id}/withdraw", button="Withdraw",
                        back=f"/policy/changes/{change.id}")
    changes.withdraw(session=session, change_id=change_id, actor=user.name)
    return _redirect(request, f"/policy/changes/{change_id}")


@router.post("/changes/{change_id}/rebase")
def change_rebase(change_id: Id, request: Request, session: SessionDep, user: Operator) -> Response:
    result = changes.rebase(session=session, change_id=change_id, actor=user.name)
    if result.get("conflicts"):
        change = changes.get_change(session=session, change_id=change_id)
        return render(request, "policy/rebase.html", {"title": f"Rebase #{change_id}: conflicts", "change": change,
                                                      "result": result}, status_code=409)
    return _redirect(request, f"/policy/changes/{change_id}")


@router.post("/changes/{change_id}/comments")
def change_comment(change_id: Id, request: Request, session: SessionDep, user: Staff, body: Text = "") -> Response:
    changes.add_comment(session=session, change_id=change_id, actor=user.name, body=body)
    return _redirect(request, f"/policy/changes/{change_id}#comments")


# ---- releases -------------------------------------------------------------------------------------


def _done(event: str, release_id: int, change_id: int | None = None) -> str:
    """The board after a release action, scrolled to its success message (the release's next step is in it)."""
    query = f"done={event}&release={release_id}" + (f"&change={change_id}" if change_id else "")
    return f"/policy/releases?{query}#done"


def _message(session: Session, done: str, release_id: int | None, change_id: int | None) -> str | None:
    if done not in guide.DONE_EVENTS or release_id is None:
        return None
    release = session.get(Release, release_id)
    if release is None:
        return None
    change = session.get(ChangeRequest, change_id) if change_id else None
    if done == "attached" and (change is None or releases.release_of_change(session=session, change_id=change.id) != release.id):
        return None
    return guide.done_message(done, release, change)


@router.get("/releases")
def release_board(request: Request, session: SessionDep, user: Staff, done: str = "",
                  release: Annotated[int | None, Query(ge=1, le=MAX_ID)] = None,
                  change: Annotated[int | None, Query(ge=1, le=MAX_ID)] = None) -> Response:
    """The board; `?change=N` puts approved request N up for attaching, `?done=...` shows what an action did."""
    everything = releases.list_releases(session=session)
    free = releases.free_approved(session=session)
    columns = [(state, [r for r in everything if r.state == state]) for state in tuple(ReleaseState)]
    now = utcnow()
    attached = {r.id: releases.attached(session=session, release_id=r.id) for r in everything}
    current = changes.current_version(session=session).id
    context = {
        "title": "Releases",
        "columns": columns,
        "deploy_blockers": {r.id: releases.deploy_blocker(r, now=now) for r in everything},
        "attached": attached,
        "steps": {r.id: guide.release_step(r, attached[r.id], current_version_id=current, now=now, free_approved=len(free))
                  for r in everything},
        "free": free,
        "focus": next((c for c in free if c.id == change), None) if not done else None,
        "planned": [r for r in everything if r.state == ReleaseState.PLANNED],
        "message": _message(session, done, release, change),
        "can_operate": bool(user.roles & OPERATE_ROLES),
    }
    return render(request, "policy/releases.html", context)


@router.post("/releases")
def release_create(request: Request, session: SessionDep, user: Operator, name: Text = "", service: Text = "",
                   planned_at: Text = "", change_id: Text = "") -> Response:
    """Plan a release; with `change_id` (planned from a change request's next step) that request is attached too."""
    attach = _change_id(change_id) if change_id.strip() else None
    release = releases.create_release(session=session, actor=user.name, name=name, service=service,
                                      planned_at=_required_when(planned_at, "planned_at"))
    if attach is None:
        return _redirect(request, _done("planned", release.id))
    releases.attach(session=session, release_id=release.id, change_id=attach, actor=user.name)
    return _redirect(request, _done("attached", release.id, attach))


def _change_id(value: str) -> int:
    if not value.strip().isdigit() or not 1 <= int(value) <= MAX_ID:
        raise Invalid("choose an approved change request", [FieldError("change_id", "required")])
    return int(value)


@router.post("/releases/{release_id}/attach")
def release_attach(release_id: Id, request: Request, session: SessionDep, user: Operator, change_id: Text = "") -> Response:
    chosen = _change_id(change_id)
    with _guided_release(session, release_id, "Nothing was attached to {name}"):
        releases.attach(session=session, release_id=release_id, change_id=chosen, actor=user.name)
    return _redirect(request, _done("attached", release_id, chosen))


@router.post("/releases/{release_id}/detach/{change_id}")
def release_detach(release_id: Id, change_id: Id, request: Request, session: SessionDep, user: Operator) -> Response:
    with _guided_release(session, release_id, "Nothing was detached from {name}"):
        releases.detach(session=session, release_id=release_id, change_id=change_id, actor=user.name)
    return _redirect(request, _done("detached", release_id, change_id))


@router.post("/releases/{release_id}/apply")
def release_apply(release_id: Id, request: Request, session: SessionDep, user: Operator, effective_from: Text = "",
                  confirm: Text = "") -> Response:
    """Apply policy: without confirm=yes, the confirm page naming the requests and the hour (or why it would be refused)."""
    with _guided_release(session, release_id, "{name} was not applied"):
        when = _required_when(effective_from, "effective_from")  # a typo is reported now, not after confirming
        release = releases.get_release(session=session, release_id=release_id)
        if not _confirmed(confirm):
            applying = releases.check_appliable(session=session, release=release, effective_from=when)
            listed = "; ".join(f"#{c.id} “{c.title}”" for c in applying)
            return _confirm(request, title=f"Apply {release.name}?",
                            question=(f"Apply policy for release {release.name} ({release.service})? "
                                      + (f"Change requests {listed} become" if len(applying) != 1
                                         else f"Change request {listed} becomes") + " a new policy version, in "
                                      f"effect from {when.strftime('%Y-%m-%d %H:%M')} UTC, with its Kubernetes, Kueue, "
                                      "mig-parted and alert-rule files rendered. Undoing it takes a rollback."),
                            action=f"/policy/releases/{release.id}/apply", button="Apply policy",
                            fields={"effective_from": effective_from}, back=guide.release_href(release.id), danger=False)
        releases.apply_release(session=session, release_id=release_id, actor=user.name, effective_from=when)
    return _redirect(request, _done("applied", release_id))


@router.post("/releases/{release_id}/deploy")
def release_deploy(release_id: Id, request: Request, session: SessionDep, user: Operator, confirm: Text = "") -> Response:
    """Mark deployed: without confirm=yes, the confirm page (or why it would be refused: not applied, not yet in effect)."""
    with _guided_release(session, release_id, "{name} was not marked deployed"):
        release = releases.get_release(session=session, release_id=release_id)
        if not _confirmed(confirm):
            blocker = releases.deploy_blocker(release, now=utcnow())
            if blocker is not None:
                raise Conflict(blocker)
            return _confirm(request, title=f"Mark {release.name} deployed?",
                            question=(f"Mark release {release.name} ({release.service}) deployed with version "
                                      f"{release.applied_version_id}? Do this once {release.service} runs with it; "
                                      "afterwards the release can only be rolled back."),
                            action=f"/policy/releases/{release.id}/deploy", button="Mark deployed",
                            back=guide.release_href(release.id), danger=False)
        releases.deploy_release(session=session, release_id=release_id, actor=user.name)
    return _redirect(request, _done("deployed", release_id))


@router.post("/releases/{release_id}/rollback")
def release_rollback(release_id: Id, request: Request, session: SessionDep, user: Operator, effective_from: Text = "",
                     confirm: Text = "") -> Response:
    with _guided_release(session, release_id, "{name} was not rolled back"):
        return _rollback(request, session, user, release_id, effective_from, confirm)


def _rollback(request: Request, session: Session, user: Principal, release_id: int, effective_from: str,
              confirm: str) -> Response:
    if not _confirmed(confirm):
        release = releases.get_release(session=session, release_id=release_id)
        releases.check_rollbackable(session=session, release=release)
        _when(effective_from, "effective_from")  # a typo is reported now, not after confirming
        return _confirm(request, title=f"Roll back {release.name}?",
                        question=(f"Roll back release {release.name} ({release.service})? A new policy version equal to "
                                  f"version {release.previous_version_id} takes effect "
                                  f"{'from ' + effective_from + ' UTC' if effective_from.strip() else 'this hour'}, "
                                  f"replacing version {release.applied_version_id}."),
                        action=f"/policy/releases/{release.id}/rollback", button="Roll back",
                        fields={"effective_from": effective_from}, back=guide.release_href(release.id))
    releases.rollback_release(session=session, release_id=release_id, actor=user.name,
                              effective_from=_when(effective_from, "effective_from"))
    return _redirect(request, _done("rolled_back", release_id))
