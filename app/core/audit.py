"""The append-only audit log: every state change, who made it, when, before and after."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from sqlalchemy import Column, Text
from sqlmodel import Field, Session, SQLModel

import app.core.models  # noqa: F401  (naming convention)
from app.core.timeutil import utcnow


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
