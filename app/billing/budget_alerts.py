"""The worker task that raises `budget.threshold`: each budget's thresholds against this month's cost and forecast.

After every ingestion round each budget is evaluated for the current month (and, during the first
day of a month, the month just ended, whose last hours arrive after it ends: actual basis only). A
threshold crossed raises one event per (budget, amount, threshold, month, basis): the actual and the
forecast crossing of one threshold are separate events, because they say different things (the money
is spent; the money will be spent if the month goes on as usual) and arrive at different times. The
event key holds all five, so `emit` records each once, whichever worker gets there first and however
often it is evaluated again; a forecast that later falls back below a threshold does not withdraw its
event. Changing a budget's amount arms its thresholds afresh for the month (a new key), since "80 %"
of a new amount is a new fact.

Several workers run this at once. On PostgreSQL one of them evaluates at a time (a transaction-level
advisory lock taken with try: the others skip the round, the one holding it computes the same
answer); on SQLite the forecast is computed first and the write lock taken only to emit. In both, the
event key's unique constraint is what makes an emission once: a second emit of a key records nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta

from sqlalchemy import text
from sqlalchemy.engine import Engine
from sqlmodel import Session, select

from app.billing.budget_models import Budget, BudgetScope
from app.billing.budgets import ACTUAL, BudgetStatus, Crossing, statuses
from app.billing.month_forecast import current_month
from app.billing.period import parse_period
from app.core.db import is_postgres, sqlite_write_lock, unit_of_work
from app.core.event_payloads import BudgetThreshold
from app.core.events import Event, emit
from app.core.timeutil import aware, utcnow

log = logging.getLogger(__name__)
# Advisory lock ("CB" + 0x20): one budget evaluator at a time on PostgreSQL.
BUDGET_LOCK = 0x43420020
LATE_HOURS = timedelta(days=1)  # how long after a month ends its last hours are still looked at


def event_key(status: BudgetStatus, crossing: Crossing) -> str:
    """The idempotency key: once per (budget, amount, threshold, month, basis), ever."""
    assert status.budget is not None
    return (f"budget.threshold:{status.scope}:{status.name}:{status.month}:{status.budget.amount}:"
            f"{crossing.threshold}:{crossing.basis}")


def payload(status: BudgetStatus, crossing: Crossing) -> BudgetThreshold:
    """What the event says (documented in app/core/event_payloads.py; read by mail_compose `_budget_text` and webhooks)."""
    assert status.budget is not None and status.forecast is not None
    return BudgetThreshold(
        month=status.month, threshold_percent=crossing.threshold, basis=crossing.basis, amount=str(crossing.value),
        budget=str(status.budget.amount), currency=status.currency,
        tenant=status.name if status.scope == BudgetScope.TENANT else None, department=status.department,
        actual=str(status.forecast.actual), forecast=str(status.forecast.month_end), as_of=status.as_of,
    )


def months_to_check(now: datetime) -> list[tuple[str, bool]]:
    """(month, forecast too?): this month, and the previous one during the first day after it ended."""
    month = current_month(now)
    out = [(month, True)]
    start = parse_period(month).start
    if aware(now) - start < LATE_HOURS:
        before = current_month(start - timedelta(hours=1))
        out.insert(0, (before, False))
    return out


def due(session: Session, now: datetime) -> list[tuple[BudgetStatus, Crossing]]:
    """Every threshold crossing of every budget in the months to check (no writes)."""
    if session.exec(select(Budget.id).limit(1)).first() is None:
        return []  # no budget: nothing to forecast for
    found = []
    for month, with_forecast in months_to_check(now):
        for status in statuses(session=session, viewer=None, now=now, month=month):
            if status.error:
                log.warning("budgets of %s not evaluated: %s", month, status.error)
                break
            for crossing in status.crossed:
                if with_forecast or crossing.basis == ACTUAL:
                    found.append((status, crossing))
    return found


def _emit_all(session: Session, found: list[tuple[BudgetStatus, Crossing]]) -> list[Event]:
    events = []
    for status, crossing in found:
        event = emit(session=session, type="budget.threshold", payload=payload(status, crossing),
                     tenant=status.name if status.scope == BudgetScope.TENANT else None,
                     key=event_key(status, crossing))
        if event is not None:
            events.append(event)
    return events


def budget_task(engine: Engine, clock: Callable[[], datetime] = utcnow) -> list[Event]:
    """The worker task: raise the `budget.threshold` events not raised yet; returns those this call recorded."""
    with unit_of_work(engine) as session:
        if is_postgres(session):
            if not session.execute(text("SELECT pg_try_advisory_xact_lock(:k)"), {"k": BUDGET_LOCK}).scalar():
                return []  # another worker is evaluating the same budgets right now
            return _emit_all(session, due(session, clock()))
    with Session(engine) as session:  # SQLite: read without holding the write lock ...
        found = due(session, clock())
    if not found:
        return []
    with unit_of_work(engine) as session:  # ... then take it to emit; keys already used record nothing
        sqlite_write_lock(session)
        return _emit_all(session, found)
