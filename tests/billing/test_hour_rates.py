"""Stored pool-hour rates (app/billing/hour_rates.py): stored once, deleted by the database whenever their
rollup rows change (whoever writes them), stored again by the next rating, equal to the reference throughout."""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from decimal import Decimal

import pytest
from sqlalchemy import delete, func, select, text, update
from sqlmodel import Session

from app.billing import rating_sql
from app.billing.hour_rates import ADVISORY_LOCK, Stored, hour_rates_task, missing, store_missing
from app.billing.loader import load_hours
from app.billing.models import InferenceHourRate, PoolHourRate, SlaHourRate
from app.billing.pricing import MissingPrice
from app.billing.rating import rate_period
from app.billing.rating_sql import rate_stored
from app.metrics.models import BreachMinuteRollup, BreachShare, PoolHourModel, PoolHourRollup, UsageRollup
from tests.billing.conftest import OCT1
from tests.support.billing import POOL, add_hour, store_policy
from tests.support.clock import frozen

HOURS = [OCT1 + timedelta(hours=i) for i in range(3)]
START, END = OCT1, OCT1 + timedelta(days=31)


def _reference(session):
    return rate_period(load_hours(session=session, start=START, end=END), period_start=int(START.timestamp()),
                       period_end=int(END.timestamp()))


def _sql_only(session, monkeypatch):
    with monkeypatch.context() as m:
        m.setattr(rating_sql, "rate_period", lambda *a, **k: pytest.fail("the stored-rate path fell back to the reference"))
        return rate_stored(session=session, start=START, end=END)


def _stored(session, hour=None) -> int:
    q = select(func.count()).select_from(PoolHourRate)
    if hour is not None:
        q = q.where(PoolHourRate.hour == hour)
    return session.execute(q).scalar_one()


def _three_hours(session) -> int:
    v = store_policy(session)
    for hour in HOURS:
        add_hour(session, hour=hour, version=v.id)
    return v.id


def test_rates_are_stored_by_the_first_rating_and_reused_by_the_next(session, monkeypatch):
    _three_hours(session)
    assert missing(session) and _stored(session) == 0
    first = _sql_only(session, monkeypatch)
    assert first == _reference(session)
    assert _stored(session) == 3 and not missing(session)
    assert session.execute(select(func.count()).select_from(InferenceHourRate)).scalar_one() > 0
    assert store_missing(session) == Stored(0, 0)  # nothing left to store
    assert _sql_only(session, monkeypatch) == first


CHANGES = {
    "a usage row added": lambda s, v: s.add(UsageRollup(hour=HOURS[1], pool=POOL, tenant="newcomer", klass="unallocated", dark=False,
                                                         gpu_seconds=Decimal(700), policy_version_id=v)),
    "a usage row updated": lambda s, v: s.execute(update(UsageRollup).where(UsageRollup.hour == HOURS[1],
                                                                            UsageRollup.tenant == "etl")
                                                  .values(gpu_seconds=Decimal("999.5"))),
    "a usage row deleted": lambda s, v: s.execute(delete(UsageRollup).where(UsageRollup.hour == HOURS[1],
                                                                            UsageRollup.tenant == "search")),
    "the pool's GPUs changed": lambda s, v: s.execute(update(PoolHourRollup).where(PoolHourRollup.hour == HOURS[1])
                                                      .values(gpus=3, capacity_gpu_seconds=Decimal(3 * 3600))),
    "a breach minute added": lambda s, v: s.add(BreachMinuteRollup(hour=HOURS[1], service="search-chat", service_tenant="search",
                                                                  pool=POOL, minute_end=HOURS[1] + timedelta(minutes=30),
                                                                  p99_ms=Decimal(500))),
    "a breach share changed": lambda s, v: s.execute(update(BreachShare).where(BreachShare.breach_id.in_(
        select(BreachMinuteRollup.id).where(BreachMinuteRollup.hour == HOURS[1]))).values(tenant="etl")),
    "the model's energy changed": lambda s, v: s.execute(update(PoolHourModel).where(PoolHourModel.hour == HOURS[1])
                                                         .values(measured_gpus=2, measured_kwh=Decimal("1.25"))),
}


@pytest.mark.parametrize("change", list(CHANGES))
def test_a_rollup_write_deletes_its_stored_rate_and_the_next_rating_rates_the_new_rows(session, monkeypatch, change):
    version = _three_hours(session)
    before = _sql_only(session, monkeypatch)
    CHANGES[change](session, version)
    session.flush()
    # the database removed that pool-hour's stored figures, and only those
    assert _stored(session, HOURS[1]) == 0 and _stored(session) == 2
    for table in (InferenceHourRate, SlaHourRate):
        assert session.execute(select(func.count()).select_from(table).where(table.hour == HOURS[1])).scalar_one() == 0
    after = _sql_only(session, monkeypatch)
    assert after == _reference(session)
    assert after != before
    assert _stored(session) == 3


def test_an_hour_the_reference_cannot_price_is_not_stored_and_the_rating_names_it(session):
    v = store_policy(session)
    add_hour(session, hour=HOURS[0], version=v.id)
    add_hour(session, hour=HOURS[1], version=v.id, model="NVIDIA B200")  # no price in the policy
    assert store_missing(session) == Stored(stored=1, refused=1)
    with pytest.raises(MissingPrice) as reference:
        _reference(session)
    with pytest.raises(MissingPrice) as stored:
        rate_stored(session=session, start=START, end=END)
    assert stored.value.errors == reference.value.errors
    assert _stored(session) == 1  # the refused hour stays missing until its rows are fixed


def _committed_hours(engine) -> None:
    with Session(engine) as s:
        v = store_policy(s)
        for hour in HOURS:
            add_hour(s, hour=hour, version=v.id)
        s.commit()


def test_the_worker_task_stores_the_hours_just_ingested_once(fresh_engine):
    _committed_hours(fresh_engine)
    now = HOURS[-1] + timedelta(hours=2)
    assert hour_rates_task(fresh_engine, frozen(now)) == Stored(stored=3, refused=0)
    assert hour_rates_task(fresh_engine, frozen(now)) == Stored()
    with Session(fresh_engine) as s:
        assert _stored(s) == 3 and not missing(s)
        assert store_missing(s, start=START, end=END) == Stored()  # the month's rating has nothing to store


def test_a_worker_skips_the_round_while_another_holds_the_rates_lock(pg_engine):
    _committed_hours(pg_engine)
    with pg_engine.connect() as other, other.begin():
        assert other.execute(select(func.pg_try_advisory_xact_lock(ADVISORY_LOCK))).scalar()
        assert hour_rates_task(pg_engine, frozen(HOURS[-1] + timedelta(hours=2))) == Stored()
    assert hour_rates_task(pg_engine, frozen(HOURS[-1] + timedelta(hours=2))).stored == 3


def test_a_reingestion_during_a_fill_waits_for_it_and_removes_what_it_stored(pg_engine):
    """PostgreSQL: a fill reads its pool-hours FOR SHARE; a re-ingestion deleting them waits for the fill to
    commit, then its triggers delete the rates the fill stored (never a stored rate older than its rows)."""
    _committed_hours(pg_engine)
    filler = Session(pg_engine)
    assert store_missing(filler).stored == 3  # not committed yet: its row locks are held
    pid = filler.execute(text("SELECT pg_backend_pid()")).scalar()
    done = threading.Event()

    def reingest() -> None:
        with Session(pg_engine) as s:
            s.execute(delete(PoolHourRollup).where(PoolHourRollup.hour == HOURS[1]))
            s.commit()
        done.set()

    worker = threading.Thread(target=reingest)
    worker.start()
    # Wait for the state: the re-ingestion blocked by the filler. Each poll is its own transaction
    # (autocommit): PostgreSQL freezes pg_stat_activity for the rest of a transaction at its first read.
    with pg_engine.connect().execution_options(isolation_level="AUTOCOMMIT") as watch:
        while not watch.execute(text("SELECT count(*) FROM pg_stat_activity WHERE :pid = ANY(pg_blocking_pids(pid))"),
                                {"pid": pid}).scalar():
            assert not done.is_set(), "the re-ingestion did not wait for the fill"
            time.sleep(0.01)  # state-free: the loop above polls pg_stat_activity for the blocked re-ingestion
    filler.commit()
    filler.close()
    worker.join()
    with Session(pg_engine) as s:
        assert _stored(s) == 2 and _stored(s, HOURS[1]) == 0
