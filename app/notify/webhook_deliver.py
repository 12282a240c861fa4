"""Delivering events to webhook subscriptions from the worker: plan, claim, POST signed, record the attempt.

Planning gives each new event one delivery row per active subscription that wants its type (and
existed when it happened), once, under a lock (app/notify/outbox.py, shared with e-mail). Each
delivery is claimed in a short transaction of its own that counts the attempt, writes the attempt's
row and sets a lease, all dated when the claim is taken; the POST happens outside any transaction; a
second transaction records the outcome, its retry dated from when the attempt ended. A worker killed between the receiver's answer and that record leaves the claim: once the
lease has passed the delivery is sent again with the same `webhook-id` (the event id), so delivery is
at least once and receivers deduplicate by that header.

Several requests are in flight at once (`webhook_concurrency`), and one subscription holds at most
half of them, so a receiver that hangs until the deadline never holds up the others; one that does
not answer at all is left alone for the rest of the round (its deliveries wait, uncounted).
Failures are retried on the Standard Webhooks schedule (5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 14 h,
...) with 10 % jitter, for `webhook_retry_hours` from the first attempt, a receiver's Retry-After
honoured; a 410 Gone pauses the subscription. "Redeliver" starts a new round for the same event id.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from sqlalchemy import update
from sqlalchemy.engine import Engine
from sqlmodel import Session, select

from app.core.db import sqlite_write_lock, unit_of_work
from app.core.errors import Conflict, NotFound
from app.core.events import EVENT_TYPES, Event
from app.core.masking import configured_secrets, mask
from app.core.settings import Settings, get_settings
from app.core.timeutil import aware, utcnow
from app.notify.outbox import Backoff, claim_first, due, try_plan_lock, unplanned_events
from app.notify.webhook_http import Outcome, post
from app.notify.webhook_models import (
    DeliveryStatus,
    WebhookAttempt,
    WebhookDelivery,
    WebhookPlanned,
    WebhookSubscription,
)
from app.notify.webhook_sign import headers
from app.notify.webhook_subscriptions import secrets_in_use

log = logging.getLogger(__name__)
# Advisory lock ("CB" + 0x19): one planner at a time on PostgreSQL.
PLAN_LOCK = 0x43420019
# Standard Webhooks' example schedule: the delay before attempt 2, 3, ... (attempt 1 is immediate).
SCHEDULE = (timedelta(seconds=5), timedelta(minutes=5), timedelta(minutes=30), timedelta(hours=2), timedelta(hours=5),
            timedelta(hours=10), timedelta(hours=14), timedelta(hours=20), timedelta(hours=24))
RESPONSE_CHARS = 256  # of the receiver's answer, kept with each attempt (an excerpt)
RETRYABLE = (DeliveryStatus.PENDING, DeliveryStatus.FAILED)


def backoff(settings: Settings) -> Backoff:
    return Backoff(delays=SCHEDULE, window=timedelta(hours=settings.webhook_retry_hours), repeat_last=False,
                   jitter=0.1)


def lease(settings: Settings) -> timedelta:
    """How long a claim holds: twice the deadline that bounds every attempt, and some."""
    return timedelta(seconds=2 * settings.webhook_deadline_s + 5)


def body_of(event: Event) -> bytes:
    """The request body: the event in the Standard Webhooks shape (type, timestamp, data), minified, stable."""
    envelope = {"id": event.id, "type": event.type, "timestamp": _iso(aware(event.created_at)), "tenant": event.tenant,
                "data": event.data}
    return json.dumps(envelope, separators=(",", ":"), ensure_ascii=False).encode()


def _iso(when: datetime) -> str:
    return when.isoformat().replace("+00:00", "Z")


def plan(*, session: Session, clock: Callable[[], datetime] = utcnow, limit: int = 500) -> list[WebhookDelivery]:
    """Record the deliveries of events not planned yet (flush, never commit); [] if another planner is at it."""
    if not try_plan_lock(session, PLAN_LOCK):
        return []
    now = clock()  # once the lock is held: no delivery dated before its event
    events = unplanned_events(session, planned=WebhookPlanned, types=EVENT_TYPES, limit=limit)
    if not events:
        return []
    subscriptions = list(session.exec(select(WebhookSubscription).where(WebhookSubscription.active)))
    rows = []
    for event in events:
        for sub in subscriptions:
            # A subscription gets the events that happened once it existed: no backlog of old months.
            if event.type in sub.types and aware(sub.created_at) <= aware(event.created_at):
                row = WebhookDelivery(event_id=event.id, subscription_id=sub.id, created_at=now, next_attempt_at=now)
                session.add(row)
                rows.append(row)
        session.add(WebhookPlanned(event_id=event.id, planned_at=now))
    session.flush()
    return rows


@dataclass(frozen=True)
class Claimed:
    """A delivery this worker holds: everything the POST needs, and what recording its outcome needs."""

    delivery_id: int
    attempt_id: int
    subscription_id: int
    url: str
    event_id: str
    body: bytes
    secrets: tuple[str, ...]
    round_attempts: int
    first_attempt_at: datetime


def claim_next(*, engine: Engine, settings: Settings, clock: Callable[[], datetime] = utcnow,
               exclude: set[int] = frozenset()) -> Claimed | None:
    """Claim the next due delivery of an active subscription not in `exclude` (committed); None when none is due.

    One SELECT (the delivery locked, its subscription and event joined), one UPDATE, one INSERT: the
    bookkeeping a delivery costs on top of its request is a few round trips.
    """
    with unit_of_work(engine) as session:
        sqlite_write_lock(session)
        now = clock()  # once SQLite's lock is held: the lease runs from when the claim is taken
        statement = (
            due(WebhookDelivery, now, statuses=RETRYABLE, also=(WebhookSubscription, Event))
            .join(WebhookSubscription, WebhookSubscription.id == WebhookDelivery.subscription_id)
            .join(Event, Event.id == WebhookDelivery.event_id)
            .where(WebhookSubscription.active)
        )
        if exclude:
            statement = statement.where(WebhookDelivery.subscription_id.not_in(exclude))  # type: ignore[attr-defined]
        found = claim_first(session, statement, WebhookDelivery)
        if found is None:
            return None
        row, sub, event = found
        assert row.id is not None and sub.id is not None
        row.attempts += 1
        row.round_attempts += 1
        row.first_attempt_at = row.first_attempt_at or now
        row.claimed_until = now + lease(settings)
        attempt = WebhookAttempt(delivery_id=row.id, number=row.attempts, started_at=now)
        session.add_all([row, attempt])
        session.flush()
        assert attempt.id is not None
        return Claimed(delivery_id=row.id, attempt_id=attempt.id, subscription_id=sub.id, url=sub.url,
                       event_id=event.id, body=body_of(event), secrets=tuple(secrets_in_use(sub, now=now)),
                       round_attempts=row.round_attempts, first_attempt_at=row.first_attempt_at)


def send(claimed: Claimed, *, settings: Settings) -> Outcome:
    """POST the claimed delivery, signed now (the timestamp is the attempt's, as receivers check it), if the
    outbound policy permits its host now; the answer's excerpt and the error come back with every secret masked."""
    signed = headers(list(claimed.secrets), msg_id=claimed.event_id, timestamp=int(time.time()), body=claimed.body)
    outcome = post(claimed.url, claimed.body, signed, connect_timeout_s=settings.webhook_connect_timeout_s,
                   read_timeout_s=settings.webhook_read_timeout_s, deadline_s=settings.webhook_deadline_s,
                   allow=settings.webhook_allow_list(), ca_file=settings.webhook_ca_file)
    secrets = [*claimed.secrets, *configured_secrets(settings)]
    return replace(outcome, response=mask(outcome.response, secrets),
                   error=None if outcome.error is None else mask(outcome.error, secrets))


def record_outcome(*, engine: Engine, settings: Settings, claimed: Claimed, outcome: Outcome,
                   clock: Callable[[], datetime] = utcnow) -> WebhookDelivery:
    """Complete the attempt's row and the delivery: delivered, or failed and scheduled (or given up)."""
    now = clock()  # the attempt has just ended: the retry's delay counts from here
    values: dict = {"claimed_until": None, "last_status_code": outcome.status}
    if outcome.ok:
        values |= {"status": DeliveryStatus.DELIVERED, "delivered_at": now, "next_attempt_at": None, "last_error": None}
    else:
        retry_after = None if outcome.retry_after_s is None else now + timedelta(seconds=outcome.retry_after_s)
        values |= {"status": DeliveryStatus.FAILED, "last_error": outcome.error or f"HTTP {outcome.status}",
                   "next_attempt_at": None if outcome.status == 410 else backoff(settings).next_attempt(
                       failures=claimed.round_attempts, first_attempt_at=claimed.first_attempt_at, now=now,
                       not_before=retry_after)}
    with unit_of_work(engine) as session:
        sqlite_write_lock(session)
        session.execute(update(WebhookAttempt).where(WebhookAttempt.id == claimed.attempt_id).values(
            duration_ms=outcome.duration_ms, status_code=outcome.status, error=outcome.error,
            response=outcome.response[:RESPONSE_CHARS] or None))
        row = session.scalars(update(WebhookDelivery).where(WebhookDelivery.id == claimed.delivery_id)
                              .values(**values).returning(WebhookDelivery)).one()
        if outcome.status == 410:  # Standard Webhooks: the receiver wants no more; pause the subscription
            session.execute(update(WebhookSubscription).where(
                WebhookSubscription.id == claimed.subscription_id, WebhookSubscription.active).values(
                active=False, disabled_reason=f"the receiver answered 410 Gone at {_iso(now)[:16]}Z"))
        return row


def deliver_due(*, engine: Engine, settings: Settings, clock: Callable[[], datetime] = utcnow,
                limit: int = 500) -> list[WebhookDelivery]:
    """Send due deliveries (at most `limit`) with `webhook_concurrency` requests in flight; each outcome is
    committed as it comes."""
    lock = threading.Lock()
    in_flight: Counter[int] = Counter()
    unreachable: set[int] = set()  # no HTTP answer this round: its other deliveries wait for the next
    per_subscription = max(1, settings.webhook_concurrency // 2)
    done: list[WebhookDelivery] = []
    budget = [limit]

    def sender() -> None:
        while True:
            with lock:  # claims are serialized within this worker (short transactions); the POSTs run in parallel
                if budget[0] <= 0:
                    return
                busy = {s for s, n in in_flight.items() if n >= per_subscription}
                try:
                    claimed = claim_next(engine=engine, settings=settings, clock=clock, exclude=unreachable | busy)
                except Exception:
                    log.exception("cannot claim a webhook delivery")
                    return
                if claimed is None:
                    return
                budget[0] -= 1
                in_flight[claimed.subscription_id] += 1
            outcome = send(claimed, settings=settings)
            if not outcome.ok:
                log.warning("webhook %s to %s: %s", claimed.event_id, claimed.url,
                            outcome.error or f"HTTP {outcome.status}")
            try:
                row = record_outcome(engine=engine, settings=settings, claimed=claimed, outcome=outcome, clock=clock)
            except Exception:  # the claim lapses and the delivery is sent again: at least once
                log.exception("cannot record the outcome of webhook delivery %s", claimed.delivery_id)
                row = None
            with lock:
                in_flight[claimed.subscription_id] -= 1
                if outcome.status is None:
                    unreachable.add(claimed.subscription_id)
                if row is not None:
                    done.append(row)

    threads = [threading.Thread(target=sender, name=f"webhook-{n}", daemon=True)
               for n in range(max(1, settings.webhook_concurrency))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return done


def webhook_task(engine: Engine, clock: Callable[[], datetime] = utcnow, *,
                 settings: Settings | None = None) -> list[WebhookDelivery]:
    """The worker task: plan deliveries of new events, then send what is due."""
    settings = settings or get_settings()
    with unit_of_work(engine) as session:
        plan(session=session, clock=clock)
    return deliver_due(engine=engine, settings=settings, clock=clock)


def redeliver(*, session: Session, subscription_id: int, delivery_id: int, now: datetime) -> WebhookDelivery:
    """Queue the delivery again (same event id) for the worker's next round, with a new round of retries."""
    row = session.get(WebhookDelivery, delivery_id)
    if row is None or row.subscription_id != subscription_id:
        raise NotFound(f"No webhook delivery {delivery_id} of subscription {subscription_id}")
    if row.claimed_until is not None and aware(row.claimed_until) > now:
        raise Conflict(f"Webhook delivery {delivery_id} is being sent right now; redeliver it once this attempt ends")
    sub = session.get(WebhookSubscription, row.subscription_id)
    if sub is not None and not sub.active:
        raise Conflict(f"Webhook subscription {sub.id} is paused; activate it to deliver again")
    row.status, row.next_attempt_at, row.first_attempt_at, row.round_attempts = DeliveryStatus.PENDING, now, None, 0
    session.add(row)
    session.flush()
    return row

