"""The append-only audit log: every state change, who made it, when, before and after."""

from __future__ import annotations

import json
from collections.abc import Collection
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict
from sqlalchemy import Column, Text
from sqlalchemy.sql import Select
from sqlmodel import Field, Session, SQLModel, select

import app.core.models  # noqa: F401  (naming convention)
from app.core.errors import FieldError, Invalid
from app.core.timeutil import aware, utcnow


class AuditEntry(SQLModel, table=True):
    __tablename__ = "audit_log"

    id: int | None = Field(default=None, primary_key=True)
    at: datetime = Field(index=True)
    actor: str
    action: str = Field(index=True)
    entity: str
    entity_id: str = Field(index=True)
    tenant: str | None = Field(default=None, index=True)  # set when the entry concerns one tenant only
    before: str | None = Field(default=None, sa_column=Column(Text))
    after: str | None = Field(default=None, sa_column=Column(Text))


def record(
    *,
    session: Session,
    actor: str,
    action: str,
    entity: str,
    entity_id: str,
    before: Any = None,
    after: Any = None,
    tenant: str | None = None,
) -> AuditEntry:
    """Append one audit entry (flushed, committed by the caller's unit of work)."""
    entry = AuditEntry(
        at=utcnow(),
        actor=actor,
        action=action,
        entity=entity,
        entity_id=str(entity_id),
        tenant=tenant,
        before=None if before is None else json.dumps(before, sort_keys=True, default=str),
        after=None if after is None else json.dumps(after, sort_keys=True, default=str),
    )
    session.add(entry)
    session.flush()
    return entry


class AuditPublic(BaseModel):
    """One audit entry as the API shows it: before/after decoded back to JSON values."""

    model_config = ConfigDict(extra="forbid")  # the answer holds these fields and no others

    id: int
    at: datetime
    actor: str
    action: str
    entity: str
    entity_id: str
    tenant: str | None
    before: Any = None
    after: Any = None

    @classmethod
    def of(cls, entry: AuditEntry) -> AuditPublic:
        """The public form of a stored entry (times UTC-aware)."""
        return cls(
            id=entry.id or 0, at=aware(entry.at), actor=entry.actor, action=entry.action, entity=entry.entity,
            entity_id=entry.entity_id, tenant=entry.tenant,
            before=None if entry.before is None else json.loads(entry.before),
            after=None if entry.after is None else json.loads(entry.after),
        )


def readable_entries(
    *,
    tenants: Collection[str] | None,
    actor: str | None = None,
    action: str | None = None,
    entity: str | None = None,
    entity_id: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
) -> Select:
    """The audit entries a reader may see (`tenants` None: all), filtered; `action` ending in "." is a prefix.

    Unordered: the caller pages it by `AuditEntry.id`, newest first.
    """
    filters = {"query.actor": actor, "query.action": action, "query.entity": entity, "query.entity_id": entity_id}
    # PostgreSQL cannot store or compare NUL in text: name the field instead of failing in the driver.
    bad = [FieldError(path, "must not contain a NUL character") for path, v in filters.items() if v and "\x00" in v]
    if bad:
        raise Invalid("A filter is not valid", bad)
    stmt = select(AuditEntry)
    if actor:
        stmt = stmt.where(AuditEntry.actor == actor)
    if action:
        prefix = action.endswith(".")
        stmt = stmt.where(AuditEntry.action.startswith(action, autoescape=True) if prefix else AuditEntry.action == action)
    if entity:
        stmt = stmt.where(AuditEntry.entity == entity)
    if entity_id:
        stmt = stmt.where(AuditEntry.entity_id == entity_id)
    if since:
        stmt = stmt.where(AuditEntry.at >= aware(since))
    if until:
        stmt = stmt.where(AuditEntry.at < aware(until))
    if tenants is not None:
        stmt = stmt.where(AuditEntry.tenant.in_(sorted(tenants)))
    return stmt


def readable_entry(*, session: Session, entry_id: int, tenants: Collection[str] | None) -> AuditEntry | None:
    """One audit entry if a reader seeing `tenants` (None: all) may see it, else None."""
    entry = session.get(AuditEntry, entry_id)
    if entry is None or not (tenants is None or entry.tenant in tenants):
        return None
    return entry
