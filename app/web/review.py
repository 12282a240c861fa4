"""Review and release pages: a change request's evidence and decisions (approve, reject, withdraw, rebase,
comments) and the releases board (plan, attach, apply policy, mark deployed, roll back).
Same services and roles as the JSON API; forms post with CSRF. Editing a change request lives in app/web/policy.py.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Form, Request
from starlette.responses import Response

from app.auth.deps import Operator, Reviewer, Staff
from app.core.deps import SessionDep
from app.core.errors import FieldError, Invalid
from app.core.timeutil import aware
from app.http.htmx import redirect_after_post as _redirect
from app.http.pagination import MAX_ID
from app.http.pagination import IdPath as Id
from app.http.templating import render
from app.policy.service import get_version, load_document
from app.review import changes, impact, releases
from app.review.deps import BucketsDep, PeaksDep
from app.review.models import ChangeState, ReleaseState

router = APIRouter(prefix="/policy", include_in_schema=False)

Text = Annotated[str, Form()]


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


@router.get("/changes/{change_id}")
def change_page(change_id: Id, request: Request, session: SessionDep, user: Staff, peaks: PeaksDep, buckets: BucketsDep,
                month: str | None = None) -> Response:
    change = changes.get_change(session=session, change_id=change_id)
    release_id = releases.release_of_change(session=session, change_id=change.id)
    context = {
        "title": f"Change request #{change.id}",
        "change": change,
        "preview": impact.preview(session=session, change=change, measured_peaks=peaks, month=month,
                                           latency_buckets=buckets),
        "comments": changes.comments(session=session, change_id=change.id),
        "decisions": changes.decisions(session=session, change_id=change.id),
        "release_id": release_id,
        "user": user,
        "is_author": user.name == change.author,
        "can_review": bool(user.roles & {"admin", "reviewer"}) and user.name != change.author,
        "field_paths": changes.common_paths(load_document(get_version(session=session, number=change.base_version_id))),
        "can_operate": bool(user.roles & {"admin", "operator"}),
    }
    return render(request, "policy/change.html", context)


@router.post("/changes/{change_id}/approve")
def change_approve(change_id: Id, request: Request, session: SessionDep, user: Reviewer, comment: Text = "") -> Response:
    changes.approve(session=session, change_id=change_id, actor=user.name, comment=comment)
    return _redirect(request, f"/policy/changes/{change_id}")


@router.post("/changes/{change_id}/reject")
def change_reject(change_id: Id, request: Request, session: SessionDep, user: Reviewer, comment: Text = "") -> Response:
    changes.reject(session=session, change_id=change_id, actor=user.name, comment=comment)
    return _redirect(request, f"/policy/changes/{change_id}")


@router.post("/changes/{change_id}/withdraw")
def change_withdraw(change_id: Id, request: Request, session: SessionDep, user: Operator) -> Response:
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


@router.get("/releases")
def release_board(request: Request, session: SessionDep, user: Staff) -> Response:
    everything = releases.list_releases(session=session)
    taken = releases.attached_change_ids(session=session)
    free = [c for c in changes.list_changes(session=session, state=ChangeState.APPROVED) if c.id not in taken]
    columns = [(state, [r for r in everything if r.state == state]) for state in tuple(ReleaseState)]
    context = {
        "title": "Releases",
        "columns": columns,
        "attached": {r.id: releases.attached(session=session, release_id=r.id) for r in everything},
        "free": free,
        "can_operate": bool(user.roles & {"admin", "operator"}),
    }
    return render(request, "policy/releases.html", context)


@router.post("/releases")
def release_create(request: Request, session: SessionDep, user: Operator, name: Text = "", service: Text = "",
                   planned_at: Text = "") -> Response:
    releases.create_release(session=session, actor=user.name, name=name, service=service,
                            planned_at=_required_when(planned_at, "planned_at"))
    return _redirect(request, "/policy/releases")


@router.post("/releases/{release_id}/attach")
def release_attach(release_id: Id, request: Request, session: SessionDep, user: Operator, change_id: Text = "") -> Response:
    if not change_id.strip().isdigit() or not 1 <= int(change_id) <= MAX_ID:
        raise Invalid("choose an approved change request", [FieldError("change_id", "required")])
    releases.attach(session=session, release_id=release_id, change_id=int(change_id), actor=user.name)
    return _redirect(request, "/policy/releases")


@router.post("/releases/{release_id}/detach/{change_id}")
def release_detach(release_id: Id, change_id: Id, request: Request, session: SessionDep, user: Operator) -> Response:
    releases.detach(session=session, release_id=release_id, change_id=change_id, actor=user.name)
    return _redirect(request, "/policy/releases")


@router.post("/releases/{release_id}/apply")
def release_apply(release_id: Id, request: Request, session: SessionDep, user: Operator, effective_from: Text = "") -> Response:
    releases.apply_release(session=session, release_id=release_id, actor=user.name,
                           effective_from=_required_when(effective_from, "effective_from"))
    return _redirect(request, "/policy/releases")


@router.post("/releases/{release_id}/deploy")
def release_deploy(release_id: Id, request: Request, session: SessionDep, user: Operator) -> Response:
    releases.deploy_release(session=session, release_id=release_id, actor=user.name)
    return _redirect(request, "/policy/releases")


@router.post("/releases/{release_id}/rollback")
def release_rollback(release_id: Id, request: Request, session: SessionDep, user: Operator, effective_from: Text = "") -> Response:
    releases.rollback_release(session=session, release_id=release_id, actor=user.name,
                              effective_from=_when(effective_from, "effective_from"))
    return _redirect(request, "/policy/releases")
