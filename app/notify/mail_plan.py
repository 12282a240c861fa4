"""Planning e-mail from the event outbox: one mail_send row per message an event calls for.

`period.finalized` calls for each invoiced tenant's invoice (to its contacts) and the monthly report
(to finance); `budget.threshold` for one alert (a tenant's to its contacts, a department's to finance).
An event is planned once (mail_planned), under a lock, so two workers never plan it twice; the
unique (event, kind, audience) key is the backstop. Recipients are resolved when the message is
sent, so contacts added after a failed attempt receive the retry.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from datetime import datetime

from sqlmodel import Session, select

from app.billing.invoices import load_view
from app.billing.models import BillingPeriod
from app.core.events import Event
from app.core.settings import Settings
from app.core.timeutil import utcnow
from app.notify.mail_models import FINANCE, MailKind, MailPlanned, MailSend, MailStatus
from app.notify.outbox import try_plan_lock, unplanned_events

log = logging.getLogger(__name__)
MAIL_EVENTS = ("period.finalized", "budget.threshold")
DISABLED = "mail disabled: CHARGEBACK_SMTP_HOST is not set"
# Advisory lock ("CB" + 0x14): one planner at a time on PostgreSQL.
PLAN_LOCK = 0x43420014


def message_id(*, event_id: str, kind: str, audience: str, mail_from: str) -> str:
    """A Message-ID fixed by the event, kind and audience: a re-send is recognisably the same message."""
    domain = mail_from.rpartition("@")[2].strip(" >") or "chargeback.invalid"
    who = hashlib.sha256(audience.encode()).hexdigest()[:16] if audience else "finance"
    return f"<{event_id}.{kind}.{who}@{domain}>"


def _messages(session: Session, event: Event) -> list[tuple[str, str, str | None]]:
    """(kind, audience, period) of each message the event calls for."""
    data = event.data
    if event.type == "budget.threshold":
        return [(MailKind.BUDGET.value, data.get("tenant") or FINANCE, data.get("month"))]
    month = data["period"]
    period = session.exec(select(BillingPeriod).where(BillingPeriod.month == month)).first()
    tenants = load_view(session=session, period=period).tenants if period is not None else []
    return [(MailKind.INVOICE.value, t, month) for t in tenants] + [(MailKind.REPORT.value, FINANCE, month)]


def plan(*, session: Session, settings: Settings, clock: Callable[[], datetime] = utcnow,
         limit: int = 100) -> list[MailSend]:
    """Record the messages of events not planned yet (flush, never commit); [] if another planner is at it."""
    if not try_plan_lock(session, PLAN_LOCK):
        return []
    now = clock()  # once the lock is held: no message dated before its event
    events = unplanned_events(session, planned=MailPlanned, types=MAIL_EVENTS, limit=limit)
    rows = []
    for event in events:
        try:
            messages = _messages(session, event)
        except Exception:  # one unreadable event must not hold up the others' mail; it is tried again next round
            log.exception("cannot plan the e-mail of event %s", event.id)
            continue
        for kind, audience, period in messages:
            row = MailSend(
                event_id=event.id, kind=kind, audience=audience, period=period, created_at=now,
                message_id=message_id(event_id=event.id, kind=kind, audience=audience, mail_from=settings.mail_from),
            )
            if settings.smtp_host:
                row.next_attempt_at = now
            else:
                row.status, row.last_error = MailStatus.SKIPPED, DISABLED
            session.add(row)
            rows.append(row)
        session.add(MailPlanned(event_id=event.id, planned_at=now))
    session.flush()
    return rows
