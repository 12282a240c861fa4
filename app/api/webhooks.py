"""Webhook subscriptions API (/api/v1/webhooks): admins manage the receivers of the signed event deliveries."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from fastapi import APIRouter, FastAPI, Header, Response
from pydantic import BaseModel, ConfigDict, Field, create_model

from app.api.schemas.webhooks import (
    AttemptOut,
    DeliveryCounts,
    DeliveryList,
    DeliveryOut,
    WebhookCreated,
    WebhookIn,
    WebhookList,
    WebhookOut,
    WebhookPatch,
    WebhookSecret,
)
from app.auth.deps import Admin
from app.core.deps import SessionDep
from app.core.event_payloads import PAYLOADS
from app.core.events import EVENT_TYPES
from app.core.timeutil import utcnow
from app.http.pagination import DEFAULT_LIMIT, CursorQuery, IdPath, LimitQuery, decode_cursor, encode_cursor, page_of
from app.notify import webhook_subscriptions as subs
from app.notify.webhook_deliver import redeliver
from app.notify.webhook_models import WebhookSubscription
from app.notify.webhook_read import DeliveryView, deliveries_of, delivery_counts, get_delivery

router = APIRouter(tags=["webhooks"])


def _out(sub: WebhookSubscription, counts: dict[int, dict[str, int]]) -> dict:
    return {"id": sub.id, "url": sub.url, "event_types": sub.types, "description": sub.description,
            "active": sub.active, "disabled_reason": sub.disabled_reason,
            "previous_secret_until": sub.previous_secret_until if sub.previous_secret else None,
            "created_at": sub.created_at, "created_by": sub.created_by, "updated_at": sub.updated_at,
            "deliveries": DeliveryCounts(**counts.get(sub.id or 0, {}))}


def _delivery(view: DeliveryView) -> DeliveryOut:
    d = view.delivery
    return DeliveryOut(
        id=d.id, event_id=d.event_id, event_type=view.event_type, tenant=view.tenant,
        event_created_at=view.event_created_at, status=d.status, attempts=d.attempts,
        next_attempt_at=d.next_attempt_at, delivered_at=d.delivered_at, last_status_code=d.last_status_code,
        last_error=d.last_error,
        attempt_log=[AttemptOut(number=a.number, started_at=a.started_at, duration_ms=a.duration_ms,
                                status_code=a.status_code, error=a.error, response=a.response) for a in view.attempts])


@router.get("/webhooks")
def list_webhooks(
    session: SessionDep, user: Admin, limit: LimitQuery = DEFAULT_LIMIT, cursor: CursorQuery = None
) -> WebhookList:
    """Every subscription by id (never its secret), with its deliveries counted by status."""
    counts = delivery_counts(session=session)
    found, next_cursor = page_of(subs.list_subscriptions(session=session), key=lambda s: (s.id,), types=[int],
                                 limit=limit, cursor=cursor)
    return WebhookList(items=[WebhookOut(**_out(s, counts)) for s in found], next_cursor=next_cursor)


@router.post("/webhooks", status_code=201)
def create_webhook(body: WebhookIn, session: SessionDep, user: Admin) -> WebhookCreated:
    """A new subscription; the answer holds its signing secret, shown this once. 422 names the bad field."""
    sub, secret = subs.create_subscription(session=session, actor=user.name, url=body.url,
                                           event_types=list(body.event_types), description=body.description,
                                           active=body.active, prefix="body.")
    return WebhookCreated(**_out(sub, {}), secret=secret)


@router.get("/webhooks/{webhook_id}")
def get_webhook(webhook_id: IdPath, session: SessionDep, user: Admin) -> WebhookOut:
    sub = subs.get_subscription(session=session, subscription_id=webhook_id)
    return WebhookOut(**_out(sub, delivery_counts(session=session)))


@router.patch("/webhooks/{webhook_id}")
def update_webhook(webhook_id: IdPath, body: WebhookPatch, session: SessionDep, user: Admin) -> WebhookOut:
    """Change the URL, the event types, the description, or pause and resume (`active`)."""
    changes = subs.Changes(url=body.url, description=body.description, active=body.active,
                           event_types=None if body.event_types is None else list(body.event_types))
    sub = subs.update_subscription(session=session, subscription_id=webhook_id, actor=user.name, changes=changes,
                                   prefix="body.")
    return WebhookOut(**_out(sub, delivery_counts(session=session)))


@router.delete("/webhooks/{webhook_id}", status_code=204)
def delete_webhook(webhook_id: IdPath, session: SessionDep, user: Admin) -> Response:
    """Delete the subscription with its deliveries (the audit log keeps what it was)."""
    subs.delete_subscription(session=session, subscription_id=webhook_id, actor=user.name)
    return Response(status_code=204)


@router.post("/webhooks/{webhook_id}/secret")
def rotate_webhook_secret(webhook_id: IdPath, session: SessionDep, user: Admin) -> WebhookSecret:
    """A new signing secret, shown this once; the old one keeps signing too until `previous_secret_until`."""
    sub, secret = subs.rotate_secret(session=session, subscription_id=webhook_id, actor=user.name)
    return WebhookSecret(id=sub.id, secret=secret, previous_secret_until=sub.previous_secret_until)


@router.get("/webhooks/{webhook_id}/deliveries")
def list_deliveries(
    webhook_id: IdPath, session: SessionDep, user: Admin, limit: LimitQuery = DEFAULT_LIMIT, cursor: CursorQuery = None
) -> DeliveryList:
    """The subscription's deliveries, newest first, each with its newest attempts."""
    subs.get_subscription(session=session, subscription_id=webhook_id)
    (before,) = decode_cursor(cursor, [int]) if cursor else (None,)
    found = deliveries_of(session=session, subscription_id=webhook_id, limit=limit + 1, before=before)
    next_cursor = encode_cursor([found[limit - 1].delivery.id]) if len(found) > limit else None
    return DeliveryList(items=[_delivery(v) for v in found[:limit]], next_cursor=next_cursor)


@router.post("/webhooks/{webhook_id}/deliveries/{delivery_id}/redeliver", status_code=202)
def redeliver_delivery(webhook_id: IdPath, delivery_id: IdPath, session: SessionDep, user: Admin) -> DeliveryOut:
    """Queue the same event (same webhook-id) for the worker's next round; 409 while an attempt is under way."""
    redeliver(session=session, subscription_id=webhook_id, delivery_id=delivery_id, now=utcnow())
    return _delivery(get_delivery(session=session, delivery_id=delivery_id))


class _Envelope(BaseModel):
    model_config = ConfigDict(extra="forbid")


def document_events(app: FastAPI) -> None:
    """Describe each event type in the OpenAPI document's `webhooks` section: the request a receiver gets."""
    for event_type in EVENT_TYPES:
        data_model: Any = PAYLOADS.get(event_type, dict[str, Any])
        name = "".join(part.capitalize() for part in event_type.split(".")) + "Event"
        envelope = create_model(
            name, __base__=_Envelope,
            id=(str, Field(description="the event id, also sent as webhook-id: deduplicate by it")),
            type=(Literal[event_type], ...),  # type: ignore[valid-type]
            timestamp=(datetime, Field(description="when the event happened (not when it is delivered)")),
            tenant=(str | None, Field(description="the tenant it concerns, for tenant-scoped events")),
            data=(data_model, ...),
        )
        doc = (PAYLOADS[event_type].__doc__ or "") if event_type in PAYLOADS else "Sent by the budgets feature."

        def receiver(body, webhook_id: str = Header(description="the event id"),
                     webhook_timestamp: int = Header(description="Unix seconds of this attempt"),
                     webhook_signature: str = Header(description="'v1,' + base64 HMAC-SHA256 of "
                                                                 "'{webhook-id}.{webhook-timestamp}.{body}'; "
                                                                 "space-separated during a rotation")) -> None:
            """The receiver answers 2xx once it has the event; anything else is retried."""

        receiver.__annotations__["body"] = envelope  # a class made here: no name a string annotation could find
        app.webhooks.post(event_type, summary=doc.strip().splitlines()[0], status_code=204, operation_id=name,
                          tags=["webhooks"])(receiver)
