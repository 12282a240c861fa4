"""The event outbox: recorded in the caller's transaction, idempotent by key, oldest first."""

from __future__ import annotations

import re
from datetime import datetime

import pytest
from sqlmodel import Session

from app.core.db import unit_of_work
from app.core.events import Event, emit, events_after
from app.metrics.worker import run_tasks


def test_an_event_with_a_used_key_is_not_recorded_twice(session):
    first = emit(session=session, type="budget.threshold", payload={"tenant": "vision", "percent": 80},
                 tenant="vision", key="budget:vision:2026-11:80")
    again = emit(session=session, type="budget.threshold", payload={"tenant": "vision", "percent": 80},
                 tenant="vision", key="budget:vision:2026-11:80")
    assert first is not None and again is None
    assert re.fullmatch(r"evt_[a-z2-7]{26}", first.id)
    assert first.data == {"percent": 80, "tenant": "vision"}
    other = emit(session=session, type="budget.threshold", payload={"percent": 100}, key="budget:vision:2026-11:100")
    assert [e.id for e in events_after(session=session, after=None) if e.id in {first.id, other.id}] == [first.id, other.id]


def test_an_unknown_type_is_refused(session):
    with pytest.raises(ValueError, match="unknown event type"):
        emit(session=session, type="period.exploded", payload={})


def test_an_event_rolls_back_with_its_change(fresh_engine):
    with pytest.raises(RuntimeError), unit_of_work(fresh_engine) as session:
        emit(session=session, type="ingestion.gap", payload={"hour": "2026-11-01T00:00:00Z"})
        raise RuntimeError("the change failed")
    with Session(fresh_engine) as session:
        assert events_after(session=session, after=None) == []
        assert session.get(Event, "evt_none") is None


def test_one_failing_worker_task_does_not_stop_the_next(fresh_engine):
    ran = []

    def broken(engine, clock):
        raise OSError("receiver down")

    def fine(engine, clock):
        ran.append(clock())

    now = datetime(2026, 11, 30, 12)
    run_tasks([broken, fine], engine=fresh_engine, clock=lambda: now)
    assert ran == [now]
