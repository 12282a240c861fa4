"""Policy pages: the active version, history with diffs, change requests (YAML editor validated as you type),
review, the releases board and the audit log. Same services and roles as the JSON API; forms post with CSRF.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Form, Request
from starlette.responses import RedirectResponse, Response

from app.auth.deps import Operator, Reviewer, Staff
from app.core.audit import AuditEntry, readable_entries
from app.core.deps import SessionDep
from app.core.errors import FieldError, Invalid
from app.core.timeutil import aware
from app.http.htmx import is_htmx
from app.http.pagination import MAX_ID, paginate
from app.http.pagination import IdPath as Id
from app.http.templating import render
from app.policy.parsing import check_document
from app.policy.service import (
    active_version,
    dump_yaml,
    get_version,
    latest_version,
    list_versions,
    load_document,
    previous_version,
)
from app.review import changes, impact, releases
from app.review.deps import BucketsDep, PeaksDep
from app.review.models import ChangeState, ReleaseState

router = APIRouter(prefix="/policy", include_in_schema=False)

Text = Annotated[str, Form()]

def _redirect(request: Request, url: str) -> Response:
    """After a POST: a 303 for a plain form, HX-Redirect for htmx (which would follow a 3xx inside the XHR)."""
    if is_htmx(request):
        return Response(status_code=204, headers={"HX-Redirect": url})
    return RedirectResponse(url, status_code=303)


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


# ---- versions ---------------------------------------------------------------------------------------


@router.get("")
def policy_home(request: Request, session: SessionDep, user: Staff) -> Response:
    version = active_version(session=session) or latest_version(session=session)
    head = latest_version(session=session)
    context = {
        "title": "Policy",
        "version": version,
        "scheduled": head if head is not None and version is not None and head.id != version.id else None,
        "yaml": dump_yaml(load_document(version)) if version else "",
        "open_changes": [c for c in changes.list_changes(session=session)
                         if c.state in (ChangeState.DRAFT, ChangeState.SUBMITTED, ChangeState.APPROVED)],
        "can_operate": bool(user.roles & {"admin", "operator"}),
    }
    return render(request, "policy/home.html", context)


@router.get("/versions")
def history(request: Request, session: SessionDep, user: Staff) -> Response:
    from app.policy.diff import diff

    versions = list_versions(session=session)
    active = active_version(session=session)
    rows = []
    for i, v in enumerate(versions):
        previous = versions[i - 1] if i else None
        changed = diff(load_document(previous).to_data(), load_document(v).to_data()) if previous else []
        rows.append({"version": v, "diff": changed})
    return render(request, "policy/history.html", {"title": "Policy history", "rows": list(reversed(rows)),
                                                   "active_id": active.id if active else None})


@router.get("/versions/{number}")
def version_page(number: Id, request: Request, session: SessionDep, user: Staff) -> Response:
    from app.policy.diff import diff

    version = get_version(session=session, number=number)
    previous = previous_version(session=session, number=number)
    changed = diff(load_document(previous).to_data(), load_document(version).to_data()) if previous else []
    files, _ = releases.artifacts_for(session=session, version_id=number)
    context = {"title": f"Policy version {number}", "version": version, "previous": previous, "diff": changed,
               "yaml": dump_yaml(load_document(version)), "files": sorted(files)}
    return render(request, "policy/version.html", context)


# ---- change requests ------------------------------------------------------------------------------


@router.get("/changes")
def change_list(request: Request, session: SessionDep, user: Staff, state: str | None = None) -> Response:
    return render(request, "policy/changes.html", {"title": "Change requests", "state": state or "",
                                                   "states": tuple(ChangeState),
                                                   "changes": changes.list_changes(session=session, state=state or None)})


@router.get("/changes/new")
def change_new(request: Request, session: SessionDep, user: Operator) -> Response:
    base = changes.current_version(session=session)
    context = {"title": "New change request", "change": None, "base": base, "form_title": "",
               "justification": "", "document": dump_yaml(load_document(base))}
    return render(request, "policy/change_form.html", context)


@router.post("/changes")
def change_create(request: Request, session: SessionDep, user: Operator, title: Text = "",
                  justification: Text = "", document: Text = "") -> Response:
    change = changes.create_change(session=session, actor=user.name, title=title, justification=justification,
                                   document=document or None)
    return _redirect(request, f"/policy/changes/{change.id}")


@router.post("/validate")
def validate_fragment(request: Request, user: Staff, peaks: PeaksDep, buckets: BucketsDep, document: Text = "") -> Response:
    """The editor's live check: always 200, with an errors-and-warnings fragment."""
    if len(document) > changes.MAX_DOCUMENT_CHARS:
        findings, parsed = [FieldError("document", f"at most {changes.MAX_DOCUMENT_CHARS} characters")], False
    else:
        doc, findings = check_document(document, measured_peak_mib=peaks, latency_buckets=buckets)
        parsed = doc is not None
    return render(request, "policy/_validation.html", {"findings": findings, "parsed": parsed}, block=None)


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


@router.get("/changes/{change_id}/edit")
def change_edit(change_id: Id, request: Request, session: SessionDep, user: Operator) -> Response:
    change = changes.get_change(session=session, change_id=change_id)
    if change.state != ChangeState.DRAFT:
        return _redirect(request, f"/policy/changes/{change.id}")
    base = get_version(session=session, number=change.base_version_id)
    context = {"title": f"Edit change request #{change.id}", "change": change, "base": base,
               "form_title": change.title, "justification": change.justification, "document": change.document}
    return render(request, "policy/change_form.html", context)


@router.post("/changes/{change_id}")
def change_update(change_id: Id, request: Request, session: SessionDep, user: Operator, title: Text = "",
                  justification: Text = "", document: Text = "") -> Response:
    changes.update_change(session=session, change_id=change_id, actor=user.name, title=title,
                          justification=justification, document=document)
    return _redirect(request, f"/policy/changes/{change_id}")


@router.post("/changes/{change_id}/fields")
def change_set_field(change_id: Id, request: Request, session: SessionDep, user: Operator, path: Text = "",
                     value: Text = "") -> Response:
    changes.set_field(session=session, change_id=change_id, actor=user.name, path=path, value=value)
    return _redirect(request, f"/policy/changes/{change_id}")


@router.post("/changes/{change_id}/submit")
def change_submit(change_id: Id, request: Request, session: SessionDep, user: Operator, peaks: PeaksDep) -> Response:
    changes.submit(session=session, change_id=change_id, actor=user.name, measured_peaks=peaks)
    return _redirect(request, f"/policy/changes/{change_id}")


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


# ---- audit ----------------------------------------------------------------------------------------


@router.get("/audit")
def audit_page(request: Request, session: SessionDep, user: Staff, actor: str = "", action: str = "",
               entity: str = "", entity_id: str = "", cursor: str = "") -> Response:
    stmt = readable_entries(tenants=user.visible_tenants(), actor=actor or None, action=action or None,
                            entity=entity or None, entity_id=entity_id or None)
    rows, next_cursor = paginate(session, stmt, keys=[AuditEntry.id], limit=50, cursor=cursor or None, descending=True)
    filters = {"actor": actor, "action": action, "entity": entity, "entity_id": entity_id}
    return render(request, "policy/audit.html", {"title": "Audit log", "rows": rows, "next_cursor": next_cursor,
                                                 "filters": filters})
