"""Directory API (/api/v1): tenants and departments from the active policy, and the audit log.

A tenant member sees only its own tenants and the audit entries about them; anything else is
answered with the same 404 as an unknown name or id, so existence is not disclosed.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Path, Query
from pydantic import BaseModel, Field
from sqlmodel import select

from app.api.schemas.audit import AuditOut
from app.auth.deps import CurrentUser, Principal
from app.core.audit import AuditEntry
from app.core.deps import SessionDep
from app.core.errors import FieldError, Invalid, NotFound
from app.core.timeutil import aware
from app.http.pagination import MAX_ID, CursorQuery, LimitQuery, Page, paginate
from app.policy.document import PolicyDocument
from app.policy.service import active_version, load_document

router = APIRouter(tags=["directory"])


class TenantOut(BaseModel):
    name: str
    department: str
    class_: str = Field(serialization_alias="class", alias="class")
    namespaces: list[str]

    model_config = {"populate_by_name": True}


class DepartmentOut(BaseModel):
    name: str
    tenants: list[str]


def _document(session) -> PolicyDocument | None:
    version = active_version(session=session)
    return None if version is None else load_document(version)


def _visible_tenants(session, user: Principal) -> list[TenantOut]:
    doc = _document(session)
    if doc is None:
        return []
    visible = user.visible_tenants()
    return [
        TenantOut(name=t.name, department=t.department, class_=t.klass,
                  namespaces=list(t.namespaces))
        for t in sorted(doc.tenants, key=lambda t: t.name)
        if visible is None or t.name in visible
    ]


@router.get("/tenants", response_model=list[TenantOut], response_model_by_alias=True)
def list_tenants(session: SessionDep, user: CurrentUser) -> list[TenantOut]:
    """Tenants of the policy in effect (name, department, class, namespaces); members see only theirs."""
    return _visible_tenants(session, user)


@router.get("/tenants/{name}", response_model=TenantOut, response_model_by_alias=True)
def get_tenant(name: str, session: SessionDep, user: CurrentUser) -> TenantOut:
    """One tenant of the policy in effect (404 when unknown or not visible to the caller)."""
    for tenant in _visible_tenants(session, user):
        if tenant.name == name:
            return tenant
    raise NotFound(f"No tenant {name!r}")


@router.get("/departments")
def list_departments(session: SessionDep, user: CurrentUser) -> list[DepartmentOut]:
    """Departments of the policy in effect with their tenants (members: only departments of their tenants)."""
    departments: dict[str, list[str]] = {}
    for tenant in _visible_tenants(session, user):
        departments.setdefault(tenant.department, []).append(tenant.name)
    return [DepartmentOut(name=name, tenants=tenants) for name, tenants in sorted(departments.items())]


def _text_filters(**fields: str | None) -> None:
    # PostgreSQL cannot store or compare NUL in text: name the field instead of failing in the driver.
    bad = [FieldError(path, "must not contain a NUL character") for path, v in fields.items() if v and "\x00" in v]
    if bad:
        raise Invalid("A filter is not valid", bad)


def _audit_out(entry: AuditEntry) -> AuditOut:
    return AuditOut(
        id=entry.id or 0, at=aware(entry.at), actor=entry.actor, action=entry.action, entity=entry.entity,
        entity_id=entry.entity_id, tenant=entry.tenant,
        before=None if entry.before is None else json.loads(entry.before),
        after=None if entry.after is None else json.loads(entry.after),
    )


@router.get("/audit")
def list_audit(
    session: SessionDep,
    user: CurrentUser,
    action: Annotated[str | None, Query(description="Exact action, or a prefix ending in '.' (e.g. 'period.')")] = None,
    entity: str | None = None,
    actor: str | None = None,
    since: Annotated[datetime | None, Query(description="Only entries at or after this instant")] = None,
    limit: LimitQuery = 50,
    cursor: CursorQuery = None,
) -> Page[AuditOut]:
    """The audit log, newest first, cursor-paginated; tenant members see only entries about their tenants."""
    _text_filters(**{"query.action": action, "query.entity": entity, "query.actor": actor})
    stmt = select(AuditEntry)
    if action:
        stmt = stmt.where(AuditEntry.action.startswith(action) if action.endswith(".") else AuditEntry.action == action)
    if entity:
        stmt = stmt.where(AuditEntry.entity == entity)
    if actor:
        stmt = stmt.where(AuditEntry.actor == actor)
    if since:
        stmt = stmt.where(AuditEntry.at >= aware(since))
    visible = user.visible_tenants()
    if visible is not None:
        stmt = stmt.where(AuditEntry.tenant.in_(sorted(visible)))
    rows, next_cursor = paginate(session, stmt, keys=[AuditEntry.id], limit=limit, cursor=cursor, descending=True)
    return Page[AuditOut](items=[_audit_out(e) for e in rows], next_cursor=next_cursor)


@router.get("/audit/{entry_id}")
def get_audit(entry_id: Annotated[int, Path(ge=1, le=MAX_ID)], session: SessionDep, user: CurrentUser) -> AuditOut:
    """One audit entry (404 when unknown, or about a tenant the caller may not see)."""
    entry = session.get(AuditEntry, entry_id)
    if entry is None or not (user.visible_tenants() is None or entry.tenant in user.visible_tenants()):
        raise NotFound(f"No audit entry {entry_id}")
    return _audit_out(entry)
