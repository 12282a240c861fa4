"""The event outbox: a domain change records an event in the transaction that makes the change.

Webhooks, e-mail and any later consumer read events from this table and deliver them from the
worker, never from the request. Because the event row commits (or rolls back) with the change
itself, there is no event for a change that did not happen and no change without its event.

`Event.id` ("evt_" + 26 base32 characters) is stable across redeliveries, so receivers deduplicate
by it. `key`, when given, makes an emission idempotent: a second `emit` with the same key (a
threshold crossed again the same month, a close retried) records nothing.
"""

from __future__ import annotations

import base64
import json
import secrets
from datetime import datetime
from typing import Any

from pydantic import BaseModel
from sqlalchemy import Column, Text
from sqlalchemy.exc import IntegrityError
from sqlmodel import Field, Session, SQLModel, select

import app.core.models  # noqa: F401  (naming convention)
from app.core.timeutil import utcnow

EVENT_TYPES = (
    "period.rated",
    "period.finalized",
    "correction.created",
    "policy.applied",
    "ingestion.gap",
    "budget.threshold",
)


class Event(SQLModel, table=True):
    __tablename__ = "event"

    id: str = Field(primary_key=True)
    type: str = Field(index=True)
    created_at: datetime = Field(index=True)
    tenant: str | None = Field(default=None, index=True)  # set when the event concerns one tenant only
    key: str | None = Field(default=None, unique=True)  # idempotency: one event per key, ever
    payload: str = Field(sa_column=Column(Text, nullable=False))  # JSON object

    @property
    def data(self) -> dict[str, Any]:
        return json.loads(self.payload)


def new_event_id() -> str:
    """A random, URL-safe event id: 'evt_' and 26 base32 characters (128 bits)."""
    return "evt_" + base64.b32encode(secrets.token_bytes(16)).decode().rstrip("=").lower()


def emit(*, session: Session, type: str, payload: dict[str, Any] | BaseModel, tenant: str | None = None,
         key: str | None = None) -> Event | None:
    """Record an event in the caller's transaction (flushed, not committed); None if `key` was already used.

    `payload` is the event's documented model (app/core/event_payloads.py) or a plain JSON-able dict.
    """
    if type not in EVENT_TYPES:
        raise ValueError(f"unknown event type {type!r}")
    if isinstance(payload, BaseModel):
        payload = payload.model_dump(mode="json")
    if key is not None and session.exec(select(Event.id).where(Event.key == key)).first() is not None:
        return None
    event = Event(id=new_event_id(), type=type, created_at=utcnow(), tenant=tenant, key=key,
                  payload=json.dumps(payload, sort_keys=True, default=str))
    try:
        with session.begin_nested():  # a concurrent emitter of the same key wins; ours is dropped
            session.add(event)
            session.flush()
    except IntegrityError:
        return None
    return event


def events_after(*, session: Session, after: datetime | None, types: tuple[str, ...] = EVENT_TYPES,
                 limit: int = 500) -> list[Event]:
    """Events of `types` recorded after `after` (all when None), oldest first."""
    statement = select(Event).where(Event.type.in_(types))  # type: ignore[attr-defined]
    if after is not None:
        statement = statement.where(Event.created_at > after)
    return list(session.exec(statement.order_by(Event.created_at, Event.id).limit(limit)))
