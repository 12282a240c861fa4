"""What every delivery of the event outbox shares (e-mail, webhooks): planning each event once, claiming
due rows so several workers never act on one row at once, and when to try again after a failure.

A delivery table has `status`, `next_attempt_at` (due from then; None: not scheduled) and
`claimed_until` (a worker is at it; another takes it only after this lease). Claiming happens in a
short transaction of its own: PostgreSQL `FOR UPDATE SKIP LOCKED` (two workers take different rows),
SQLite the database write lock taken at BEGIN (the second worker waits, then sees the first's claim).
Every time here (due, lease, next attempt) is read from the clock when the claim or the outcome is
written, never a time carried over from the start of a round.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import or_, text
from sqlmodel import Session, select

from app.core.db import is_postgres, sqlite_write_lock
from app.core.events import Event
from app.core.timeutil import aware


@dataclass(frozen=True)
class Backoff:
    """When to try again after the n-th failure: `delays[n-1]` later (the last one repeats with
    `repeat_last`, else the schedule ends), plus up to `jitter` of it at random, never later than
    `window` after the first attempt of the round."""

    delays: tuple[timedelta, ...]
    window: timedelta
    repeat_last: bool = True
    jitter: float = 0.0

    def next_attempt(self, *, failures: int, first_attempt_at: datetime, now: datetime,
                     not_before: datetime | None = None) -> datetime | None:
        """The time of the next attempt, or None when the round of retries is over.

        `not_before` (a receiver's Retry-After) postpones it, by at most the schedule's longest delay.
        """
        index = max(failures, 1) - 1
        if index >= len(self.delays) and not self.repeat_last:
            return None
        delay = self.delays[min(index, len(self.delays) - 1)]
        if self.jitter:
            delay += delay * random.uniform(0, self.jitter)
        at = now + delay
        if not_before is not None:
            at = max(at, min(aware(not_before), now + max(self.delays)))
        return at if at <= aware(first_attempt_at) + self.window else None


def due(model: Any, now: datetime, *, statuses: Sequence[str], also: Sequence[Any] = ()):
    """SELECT the rows of `model` in `statuses` whose attempt is due and that no live claim holds, oldest due first
    (with the entities `also`, which the caller joins)."""
    return (
        select(model, *also)
        .where(model.status.in_(statuses), model.next_attempt_at <= now,
               or_(model.claimed_until.is_(None), model.claimed_until <= now))
        .order_by(model.next_attempt_at, model.id)
    )


def claim_first(session: Session, statement, model: Any):
    """The first row of `statement` (rows of `model`) that no other transaction is claiming, locked until commit.

    On SQLite the caller has taken `sqlite_write_lock` first, and read the clock for `statement` and the lease after it:
    the wait for another worker's commit must not shorten the lease.
    """
    if is_postgres(session):
        return session.exec(statement.limit(1).with_for_update(skip_locked=True, of=model)).first()
    return session.exec(statement.limit(1)).first()


def try_plan_lock(session: Session, key: int) -> bool:
    """Take planning lock `key` for this transaction; False when another planner holds it (PostgreSQL)."""
    if is_postgres(session):
        return bool(session.execute(text("SELECT pg_try_advisory_xact_lock(:k)"), {"k": key}).scalar())
    sqlite_write_lock(session)
    return True


def unplanned_events(session: Session, *, planned: Any, types: Sequence[str], limit: int) -> list[Event]:
    """Events of `types` that have no row in `planned` (a table keyed by `event_id`) yet, oldest first."""
    done = select(planned.event_id)
    return list(session.exec(
        select(Event).where(Event.type.in_(types), Event.id.not_in(done))  # type: ignore[attr-defined]
        .order_by(Event.created_at, Event.id).limit(limit)
    ).all())
