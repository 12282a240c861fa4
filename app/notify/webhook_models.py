"""Tables of the signed webhooks: subscriptions (admin-configured), one delivery per (event, subscription),
and every attempt of it.

Only admins configure subscriptions; they are finance integrations, so they receive tenant-scoped
events (a correction of one tenant's invoice) of every tenant: tenants never subscribe themselves.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from sqlalchemy import Column, Text, UniqueConstraint
from sqlmodel import Field, SQLModel

import app.core.models  # noqa: F401  (naming convention)


class WebhookSubscription(SQLModel, table=True):
    """A receiver URL, the event types it wants, and the Standard Webhooks secret that signs what it gets."""

    __tablename__ = "webhook_subscription"

    id: int | None = Field(default=None, primary_key=True)
    url: str = Field(max_length=2000)
    description: str = Field(default="", max_length=200)
    event_types: str  # space-separated, sorted (every one in app.core.events.EVENT_TYPES)
    secret: str  # "whsec_" + base64 of 32 random bytes: needed in the clear to sign, never served after creation
    previous_secret: str | None = None  # after a rotation, still signs (a second signature) until the time below
    previous_secret_until: datetime | None = None
    active: bool = True
    disabled_reason: str | None = None  # why the portal paused it (the receiver answered 410 Gone)
    created_at: datetime
    created_by: str
    updated_at: datetime

    @property
    def types(self) -> list[str]:
        return self.event_types.split()


class DeliveryStatus(StrEnum):
    PENDING = "pending"  # not tried yet, or queued again by "redeliver"
    DELIVERED = "delivered"  # the receiver answered 2xx
    FAILED = "failed"  # the last attempt failed; retried at next_attempt_at (None: the round of retries is over)


class WebhookPlanned(SQLModel, table=True):
    """An event whose deliveries exist (one per subscription that wanted it when it was planned)."""

    __tablename__ = "webhook_planned"

    event_id: str = Field(primary_key=True, foreign_key="event.id", ondelete="CASCADE")
    planned_at: datetime


class WebhookDelivery(SQLModel, table=True):
    """One event to one subscription: tried until the receiver answers 2xx or the round of retries is over."""

    __tablename__ = "webhook_delivery"
    __table_args__ = (UniqueConstraint("event_id", "subscription_id", name="uq_webhook_delivery_event_subscription"),)

    id: int | None = Field(default=None, primary_key=True)
    event_id: str = Field(foreign_key="event.id", ondelete="CASCADE", index=True)
    subscription_id: int = Field(foreign_key="webhook_subscription.id", ondelete="CASCADE", index=True)
    status: str = Field(default=DeliveryStatus.PENDING, index=True)
    attempts: int = 0  # every attempt ever
    round_attempts: int = 0  # attempts since first_attempt_at: the backoff's step (a redelivery starts a new round)
    created_at: datetime
    first_attempt_at: datetime | None = None
    next_attempt_at: datetime | None = Field(default=None, index=True)
    claimed_until: datetime | None = None  # a worker is sending it; another takes it only after this lease
    delivered_at: datetime | None = None
    last_status_code: int | None = None
    last_error: str | None = Field(default=None, sa_column=Column(Text, nullable=True))


class WebhookAttempt(SQLModel, table=True):
    """One HTTP request of a delivery: written when claimed, completed with the outcome (none: interrupted)."""

    __tablename__ = "webhook_attempt"

    id: int | None = Field(default=None, primary_key=True)
    delivery_id: int = Field(foreign_key="webhook_delivery.id", ondelete="CASCADE", index=True)
    number: int
    started_at: datetime
    duration_ms: int | None = None
    status_code: int | None = None
    error: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    response: str | None = Field(default=None, sa_column=Column(Text, nullable=True))  # the first bytes, as text
