"""Policy pages: the active version, history with diffs, change requests (create, edit with the YAML editor
validated as you type, submit) and the audit log. Review and release pages live in app/web/review.py.
Same services and roles as the JSON API; forms post with CSRF.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Form, Request
from starlette.responses import Response

from app.auth.deps import Operator, Staff
from app.core.audit import AuditEntry, readable_entries
from app.core.deps import SessionDep
from app.core.errors import FieldError, Invalid, NotFound
from app.http.htmx import is_htmx
from app.http.htmx import redirect_after_post as _redirect
from app.http.pagination import IdPath as Id
from app.http.pagination import paginate
from app.http.templating import render, templates
from app.policy.parsing import check_document
from app.policy.service import (
    active_version,
    dump_value,
    dump_yaml,
    get_version,
    latest_version,
    list_versions,
    load_document,
    previous_version,
)
from app.review import changes, releases
from app.review.deps import BucketsDep, PeaksDep
from app.review.models import ChangeState
from app.web import policy_forms
from app.web.review import guided_change

router = APIRouter(prefix="/policy", include_in_schema=False)
templates.env.filters["policy_value"] = dump_value  # diff cells as the YAML editor writes them: 0.6, not "0.6"
templates.env.globals["policy_sections"] = policy_forms.SECTIONS  # the structured editor's forms, linked from every draft page

Text = Annotated[str, Form()]


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
        changed = diff(load_document(previous).to_values(), load_document(v).to_values()) if previous else []
        rows.append({"version": v, "diff": changed})
    return render(request, "policy/history.html", {"title": "Policy history", "rows": list(reversed(rows)),
                                                   "active_id": active.id if active else None})


@router.get("/versions/{number}")
def version_page(number: Id, request: Request, session: SessionDep, user: Staff) -> Response:
    from app.policy.diff import diff

    version = get_version(session=session, number=number)
    previous = previous_version(session=session, number=number)
    changed = diff(load_document(previous).to_values(), load_document(version).to_values()) if previous else []
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
                  justification: Text = "", document: Text = "", then: Text = "") -> Response:
    """Create a draft; `then` names a section form to continue in (offered on the first page), else its page."""
    change = changes.create_change(session=session, actor=user.name, title=title, justification=justification,
                                   document=document or None)
    if then in policy_forms.SECTIONS:
        return _redirect(request, f"/policy/changes/{change.id}/sections/{then}")
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
    """Set one field by path; a bad path or value comes back as the form with the error beside it and the input kept."""
    try:
        changes.set_field(session=session, change_id=change_id, actor=user.name, path=path, value=value)
    except Invalid as exc:
        change = changes.get_change(session=session, change_id=change_id)
        base = load_document(get_version(session=session, number=change.base_version_id))
        errors = {"path" if e.path == "path" else "value": e.message for e in exc.errors}
        context = {"title": f"Set a field of #{change.id}", "change": change, "field_paths": changes.common_paths(base),
                   "path": path, "value": value, "problem": exc.detail, "field_errors": errors}
        return render(request, "policy/set_field.html", context, status_code=422, block="set_field")
    return _redirect(request, f"/policy/changes/{change_id}")


# ---- structured editing: one form per section of the document -------------------------------------


async def _posted(request: Request) -> list[tuple[str, str]]:
    form = await request.form()  # already parsed (and cached) by the CSRF check
    return [(k, v) for k, v in form.multi_items() if isinstance(v, str)]


Posted = Annotated[list[tuple[str, str]], Depends(_posted)]
_CONTROL = {"csrf_token", "_add", "_remove"}


def _section_name(section: str) -> str:
    if section not in policy_forms.SECTIONS:
        raise NotFound(f"no policy form {section!r}: one of {', '.join(policy_forms.SECTIONS)}")
    return section


def _draft_document(session, change_id: int) -> tuple:
    change = changes.get_change(session=session, change_id=change_id)
    doc, findings = changes.validation(change)
    return change, doc, findings


@router.get("/changes/{change_id}/sections/{section}")
def section_form(change_id: Id, section: str, request: Request, session: SessionDep, user: Operator,
                 saved: int = 0) -> Response:
    """A section of the draft as a form (quotas, tiers, tenants, pools, isolation, SLAs, pricing)."""
    name = _section_name(section)
    change, doc, findings = _draft_document(session, change_id)
    if change.state != ChangeState.DRAFT or user.name != change.author:
        return _redirect(request, f"/policy/changes/{change.id}")
    if doc is None:  # only the YAML editor can mend a document that does not parse
        return _redirect(request, f"/policy/changes/{change.id}/edit")
    use = policy_forms.use_last_month(session=session) if name == "quotas" else None
    form = policy_forms.build(name, doc, findings=findings, use=use)
    return render(request, "policy/section_form.html", _section_context(change, form, saved=bool(saved)), block="section")


@router.post("/changes/{change_id}/sections/{section}")
def section_save(change_id: Id, section: str, request: Request, session: SessionDep, user: Operator, posted: Posted,
                 peaks: PeaksDep) -> Response:
    """Apply the form to the draft: saved and back to the form, or the form again with errors beside the fields."""
    name = _section_name(section)
    values = {k: v for k, v in posted if k not in _CONTROL}
    removed = [v for k, v in posted if k == "_remove"]
    add = next((v for k, v in posted if k == "_add"), "")
    change, doc, _ = _draft_document(session, change_id)
    if doc is None:
        raise Invalid("the draft's document does not parse; fix it in the YAML editor first", [FieldError("document", "does not parse")])
    use = policy_forms.use_last_month(session=session) if name == "quotas" else None
    if add:  # "add a row": the same form with the input kept and one more row, nothing saved
        form = policy_forms.build(name, doc, posted=values, removed=removed, add=add, use=use)
        return render(request, "policy/section_form.html", _section_context(change, form), block="section")
    result = changes.edit_fields(session=session, change_id=change_id, actor=user.name, values=values, removed=removed,
                                 measured_peaks=peaks)
    if result.saved:
        return _redirect(request, f"/policy/changes/{change_id}/sections/{name}?saved=1")
    form = policy_forms.build(name, doc, posted=values, removed=removed, findings=result.findings, use=use)
    # 422 for a form post; htmx swaps the form in place, and a 200 keeps it from logging the answer as a failure.
    return render(request, "policy/section_form.html", _section_context(change, form),
                  status_code=200 if is_htmx(request) else 422, block="section")


def _section_context(change, form: policy_forms.Section, *, saved: bool = False) -> dict:
    return {"title": f"#{change.id} {form.title}", "change": change, "form": form, "saved": saved}


@router.post("/changes/{change_id}/submit")
def change_submit(change_id: Id, request: Request, session: SessionDep, user: Operator, peaks: PeaksDep) -> Response:
    with guided_change(session, change_id, user, "Change request #{id} was not submitted"):
        changes.submit(session=session, change_id=change_id, actor=user.name, measured_peaks=peaks)
    return _redirect(request, f"/policy/changes/{change_id}")


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
