"""The read side of webhooks for the admin page and the API: deliveries with their event and attempts."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import func
from sqlmodel import Session, select

from app.core.errors import NotFound
from app.core.events import Event
from app.notify.webhook_models import WebhookAttempt, WebhookDelivery


@dataclass
class DeliveryView:
    delivery: WebhookDelivery
    event_type: str
    event_created_at: datetime
    tenant: str | None
    attempts: list[WebhookAttempt] = field(default_factory=list)  # newest first


def _views(session: Session, rows: list[tuple[WebhookDelivery, Event]], attempts_each: int) -> list[DeliveryView]:
    views = [DeliveryView(d, e.type, e.created_at, e.tenant) for d, e in rows]
    ids = [v.delivery.id for v in views]
    if ids:
        by_delivery: dict[int, list[WebhookAttempt]] = defaultdict(list)
        for attempt in session.exec(select(WebhookAttempt).where(WebhookAttempt.delivery_id.in_(ids))  # type: ignore[attr-defined]
                                    .order_by(WebhookAttempt.id.desc())):  # type: ignore[union-attr]
            if len(by_delivery[attempt.delivery_id]) < attempts_each:
                by_delivery[attempt.delivery_id].append(attempt)
        for view in views:
            view.attempts = by_delivery.get(view.delivery.id, [])  # type: ignore[arg-type]
    return views


def deliveries_of(*, session: Session, subscription_id: int, limit: int = 50, before: int | None = None,
                  attempts_each: int = 10) -> list[DeliveryView]:
    """A subscription's newest deliveries (older than delivery `before`, if given), each with its newest attempts."""
    stmt = (select(WebhookDelivery, Event).join(Event, Event.id == WebhookDelivery.event_id)
            .where(WebhookDelivery.subscription_id == subscription_id))
    if before is not None:
        stmt = stmt.where(WebhookDelivery.id < before)
    rows = session.exec(stmt.order_by(WebhookDelivery.id.desc()).limit(limit)).all()  # type: ignore[union-attr]
    return _views(session, list(rows), attempts_each)


def get_delivery(*, session: Session, delivery_id: int, attempts_each: int = 100) -> DeliveryView:
    row = session.exec(select(WebhookDelivery, Event).join(Event, Event.id == WebhookDelivery.event_id)
                       .where(WebhookDelivery.id == delivery_id)).first()
    if row is None:
        raise NotFound(f"No webhook delivery {delivery_id}")
    return _views(session, [tuple(row)], attempts_each)[0]  # type: ignore[list-item]


def delivery_counts(*, session: Session) -> dict[int, dict[str, int]]:
    """subscription id -> status -> deliveries."""
    out: dict[int, dict[str, int]] = defaultdict(dict)
    rows = session.exec(select(WebhookDelivery.subscription_id, WebhookDelivery.status, func.count())
                        .group_by(WebhookDelivery.subscription_id, WebhookDelivery.status))
    for sub_id, status, count in rows:
        out[sub_id][status] = count
    return dict(out)
