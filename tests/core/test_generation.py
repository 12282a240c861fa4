"""The data generation: one increment per transaction that writes a watched table, visible with the data, never otherwise."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from sqlalchemy import insert
from sqlmodel import Session

from app.auth.models import LoginAttempt
from app.core import generation
from app.core.db import unit_of_work
from app.metrics.models import IngestHour, IngestStatus

HOUR = datetime(2026, 11, 2, 5, tzinfo=UTC)


def committed(engine) -> int:
    with Session(engine) as session:
        return generation.current(session)


def test_each_transaction_writing_watched_rows_moves_the_generation_once(fresh_engine):
    start = committed(fresh_engine)
    with unit_of_work(fresh_engine) as session:  # the unit of work, flushed twice
        session.add(IngestHour(hour=HOUR, status=IngestStatus.GAP))
        session.flush()
        session.get(IngestHour, ("default", HOUR)).attempts = 3
        session.flush()
    assert committed(fresh_engine) == start + 1
    with unit_of_work(fresh_engine) as session:  # a bulk statement, never flushed through the unit of work
        session.execute(insert(IngestHour), [{"hour": HOUR.replace(hour=6), "status": IngestStatus.OK}])
    assert committed(fresh_engine) == start + 2
    with unit_of_work(fresh_engine) as session:  # not a derived-data table: sign-ins do not empty caches
        session.add(LoginAttempt(username="eve", ip="10.0.0.9", at=HOUR, ok=False))
    assert committed(fresh_engine) == start + 2


def test_the_new_generation_is_seen_with_the_data_and_not_before(fresh_engine):
    start = committed(fresh_engine)
    writer = Session(fresh_engine)
    with writer.begin_nested():  # a savepoint (ingestion writes each hour in one) does not count yet
        writer.add(IngestHour(hour=HOUR, status=IngestStatus.OK))
    writer.flush()
    assert committed(fresh_engine) == start  # another process still reads the old data and the old number
    writer.commit()
    writer.close()
    assert committed(fresh_engine) == start + 1


def test_a_rolled_back_write_leaves_no_increment_behind(fresh_engine):
    start = committed(fresh_engine)
    with pytest.raises(RuntimeError), unit_of_work(fresh_engine) as session:
        session.add(IngestHour(hour=HOUR, status=IngestStatus.OK))
        session.flush()
        raise RuntimeError("the ingestion failed")
    session = Session(fresh_engine)
    session.add(IngestHour(hour=HOUR, status=IngestStatus.OK))
    session.flush()
    session.rollback()
    session.add(LoginAttempt(username="eve", ip="10.0.0.9", at=HOUR, ok=False))  # same session, next transaction
    session.commit()
    session.close()
    assert committed(fresh_engine) == start


def test_a_transaction_with_its_own_writes_gets_a_cache_key_no_other_request_shares(fresh_engine):
    with Session(fresh_engine) as reader:
        assert generation.cache_key(reader) == generation.cache_key(reader) == generation.current(reader)
    with unit_of_work(fresh_engine) as session:
        session.add(IngestHour(hour=HOUR, status=IngestStatus.OK))  # not flushed yet: reading the key flushes it
        first, second = generation.cache_key(session), generation.cache_key(session)
        assert first != second and first != generation.current(session)
