"""Webhook subscription schemas: what admins send and get back at /api/v1/webhooks."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from app.api.schemas import Out
from app.core.events import EVENT_TYPES
from app.notify.webhook_subscriptions import MAX_DESCRIPTION, MAX_URL

EventType = Literal[EVENT_TYPES]  # type: ignore[valid-type]


class WebhookIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    url: str = Field(max_length=MAX_URL + 100, description="https:// receiver URL (plain http in development or with "
                                                           "CHARGEBACK_WEBHOOK_ALLOW_HTTP); no credentials, no fragment; its host "
                                                           "public unless CHARGEBACK_WEBHOOK_ALLOW permits it")
    event_types: list[EventType] = Field(max_length=50, description="the event types this receiver gets")
    description: str = Field(default="", max_length=MAX_DESCRIPTION + 100)
    active: bool = True


class WebhookPatch(BaseModel):
    """The fields to change; those left out stay as they are."""

    model_config = ConfigDict(extra="forbid")

    url: str | None = Field(default=None, max_length=MAX_URL + 100)
    event_types: list[EventType] | None = Field(default=None, max_length=50)
    description: str | None = Field(default=None, max_length=MAX_DESCRIPTION + 100)
    active: bool | None = None


class DeliveryCounts(Out):
    pending: int = 0
    delivered: int = 0
    failed: int = 0


class WebhookOut(Out):
    id: int
    url: str
    event_types: list[str]
    description: str
    active: bool
    disabled_reason: str | None = Field(description="why the portal paused it (the receiver answered 410 Gone)")
    previous_secret_until: datetime | None = Field(description="after a rotation: the old secret also signs until then")
    created_at: datetime
    created_by: str
    updated_at: datetime
    deliveries: DeliveryCounts


class WebhookCreated(WebhookOut):
    secret: str = Field(description="the signing secret ('whsec_' + base64): shown in this answer only")


class WebhookSecret(Out):
    id: int
    secret: str = Field(description="the new signing secret: shown in this answer only")
    previous_secret_until: datetime | None


class WebhookList(Out):
    items: list[WebhookOut]
    next_cursor: str | None = None


class AttemptOut(Out):
    number: int
    started_at: datetime
    duration_ms: int | None = Field(description="None: no outcome recorded (the worker stopped mid-attempt)")
    status_code: int | None = Field(description="the receiver's status; None: no HTTP answer (see error)")
    error: str | None
    response: str | None = Field(description="the first bytes of the receiver's answer")


class DeliveryOut(Out):
    id: int
    event_id: str = Field(description="sent as webhook-id: the same on every attempt and redelivery")
    event_type: str
    tenant: str | None
    event_created_at: datetime
    status: Literal["pending", "delivered", "failed"]
    attempts: int
    next_attempt_at: datetime | None = Field(description="None with status failed: retries are over (redeliver)")
    delivered_at: datetime | None
    last_status_code: int | None
    last_error: str | None
    attempt_log: list[AttemptOut] = Field(description="newest first")


class DeliveryList(Out):
    items: list[DeliveryOut]
    next_cursor: str | None = None
