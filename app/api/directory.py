"""Directory API (/api/v1): tenants and departments from the active policy, and the audit log.

A tenant member sees only its own tenants and the audit entries about them; anything else is
answered with the same 404 as an unknown name or id, so existence is not disclosed.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Path, Query
from pydantic import BaseModel, Field

from app.auth.deps import CurrentUser, Principal
from app.core.audit import AuditEntry, AuditPublic, readable_entries, readable_entry
from app.core.deps import SessionDep
from app.core.errors import NotFound
from app.http.pagination import DEFAULT_LIMIT, MAX_ID, CursorQuery, LimitQuery, Page, page_of, paginate
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


@router.get("/tenants", response_model=Page[TenantOut], response_model_by_alias=True)
def list_tenants(
    session: SessionDep,
    user: CurrentUser,
    department: Annotated[str | None, Query(description="Only this department's tenants")] = None,
    limit: LimitQuery = DEFAULT_LIMIT,
    cursor: CursorQuery = None,
) -> Page[TenantOut]:
    """Tenants of the policy in effect by name (department, class, namespaces); members see only theirs."""
    found = [t for t in _visible_tenants(session, user) if department is None or t.department == department]
    items, next_cursor = page_of(found, key=lambda t: (t.name,), types=[str], limit=limit, cursor=cursor)
    return Page[TenantOut](items=items, next_cursor=next_cursor)


@router.get("/tenants/{name}", response_model=TenantOut, response_model_by_alias=True)
def get_tenant(name: str, session: SessionDep, user: CurrentUser) -> TenantOut:
    """One tenant of the policy in effect (404 when unknown or not visible to the caller)."""
    for tenant in _visible_tenants(session, user):
        if tenant.name == name:
            return tenant
    raise NotFound(f"No tenant {name!r}")


@router.get("/departments")
def list_departments(
    session: SessionDep, user: CurrentUser, limit: LimitQuery = DEFAULT_LIMIT, cursor: CursorQuery = None
) -> Page[DepartmentOut]:
    """Departments of the policy in effect by name, with their tenants (members: only departments of their tenants)."""
    departments: dict[str, list[str]] = {}
    for tenant in _visible_tenants(session, user):
        departments.setdefault(tenant.department, []).append(tenant.name)
    found = [DepartmentOut(name=name, tenants=tenants) for name, tenants in sorted(departments.items())]
    items, next_cursor = page_of(found, key=lambda d: (d.name,), types=[str], limit=limit, cursor=cursor)
    return Page[DepartmentOut](items=items, next_cursor=next_cursor)


@router.get("/audit")
def list_audit(
    session: SessionDep,
    user: CurrentUser,
    action: Annotated[str | None, Query(description="Exact action, or a prefix ending in '.' (e.g. 'period.', 'change.')")] = None,
    entity: Annotated[str | None, Query(description="Entity kind, e.g. 'change_request', 'release', 'period'")] = None,
    entity_id: Annotated[str | None, Query(description="One entity's id (with `entity`: one request's or release's history)")] = None,
    actor: str | None = None,
    since: Annotated[datetime | None, Query(description="Only entries at or after this instant")] = None,
    until: Annotated[datetime | None, Query(description="Only entries before this instant")] = None,
    limit: LimitQuery = DEFAULT_LIMIT,
    cursor: CursorQuery = None,
) -> Page[AuditPublic]:
    """The audit log, newest first, cursor-paginated; tenant members see only entries about their tenants."""
    stmt = readable_entries(tenants=user.visible_tenants(), actor=actor, action=action, entity=entity,
                            entity_id=entity_id, since=since, until=until)
    rows, next_cursor = paginate(session, stmt, keys=[AuditEntry.id], limit=limit, cursor=cursor, descending=True)
    return Page[AuditPublic](items=[AuditPublic.of(e) for e in rows], next_cursor=next_cursor)


@router.get("/audit/{entry_id}")
def get_audit(entry_id: Annotated[int, Path(ge=1, le=MAX_ID)], session: SessionDep, user: CurrentUser) -> AuditPublic:
    """One audit entry (404 when unknown, or about a tenant the caller may not see)."""
    entry = readable_entry(session=session, entry_id=entry_id, tenants=user.visible_tenants())
    if entry is None:
        raise NotFound(f"No audit entry {entry_id}")
    return AuditPublic.of(entry)
