"""The worker's reconciliation task: each day once ingested, again after a re-ingestion, a day with hours never
ingested once a day has passed, a day another worker holds skipped; real Prometheus, both databases."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import text
from sqlmodel import select

from app.core.db import is_postgres, unit_of_work
from app.core.settings import get_settings
from app.metrics.ingest import ingest_hours
from app.metrics.prometheus_source import PrometheusSource
from app.metrics.reconcile.models import ReconcileHour
from app.metrics.reconcile.source import ReconcileSource
from app.metrics.reconcile.store import check_states
from app.metrics.reconcile.task import DAY, reconcile_task
from tests.support import reconcile as field
from tests.support.clock import frozen
from tests.support.ingest import add_policy
from tests.support.prometheus import PrometheusServer

pytestmark = pytest.mark.prometheus
DAY0 = field.at(0)


@pytest.fixture(scope="module")
def prom(tmp_path_factory):
    with PrometheusServer.backfilled(tmp_path_factory.mktemp("reconcile-worker"), field.text()) as server:
        yield server


def ingest(engine, prom, start, end) -> None:
    with unit_of_work(engine) as session:
        ingest_hours(session=session, source=PrometheusSource(prom.url, timeout_s=30), start=start, end=end)
        field.as_spec_says(session)


def run(engine, prom, now):
    return reconcile_task(engine, frozen(now), settings=get_settings(), sources={"default": ReconcileSource(prom.url)})


def states(engine, start, end) -> dict:
    with unit_of_work(engine) as session:
        return check_states(session, cluster="default", start=start, end=end)


def test_each_day_is_checked_once_ingested_and_again_when_an_hour_is_ingested_again(fresh_engine, prom):
    with unit_of_work(fresh_engine) as session:
        add_policy(session, field.policy(), effective_epoch=field.F - 86400)
    ingest(fresh_engine, prom, DAY0, DAY0 + timedelta(hours=20))
    now = DAY0 + DAY + timedelta(minutes=10)
    assert run(fresh_engine, prom, now).checked == {}  # hours 20-23 not ingested yet, the day not a day past its end

    ingest(fresh_engine, prom, DAY0 + timedelta(hours=20), DAY0 + DAY)
    assert run(fresh_engine, prom, now).checked == {"default": [DAY0]}
    assert all(checked for _, checked in states(fresh_engine, DAY0, DAY0 + DAY).values())
    with unit_of_work(fresh_engine) as session:
        assert session.get(ReconcileHour, ("default", field.at(1))).verdict == "agrees"
    assert run(fresh_engine, prom, now).checked == {}  # nothing new

    ingest(fresh_engine, prom, field.at(1), field.at(2))  # hour 1 again: its verdict is stale
    assert [h for h, (_, checked) in states(fresh_engine, DAY0, DAY0 + DAY).items() if not checked] == [field.at(1)]
    assert run(fresh_engine, prom, now).checked == {"default": [DAY0]}
    assert all(checked for _, checked in states(fresh_engine, DAY0, DAY0 + DAY).values())

    # The next day was never ingested: checked once a day has passed since its end (the source has nothing either).
    assert run(fresh_engine, prom, DAY0 + 2 * DAY + timedelta(hours=3)).checked == {}
    assert run(fresh_engine, prom, DAY0 + 3 * DAY + timedelta(minutes=10)).checked == {"default": [DAY0 + DAY]}
    with unit_of_work(fresh_engine) as session:
        day1 = session.exec(select(ReconcileHour.verdict).where(ReconcileHour.hour >= DAY0 + DAY)).all()
    assert day1 == ["missing"] * 24


def test_a_day_another_worker_is_checking_is_skipped(pg_engine, prom):
    assert is_postgres(pg_engine)
    with unit_of_work(pg_engine) as session:
        add_policy(session, field.policy(), effective_epoch=field.F - 86400)
    ingest(pg_engine, prom, DAY0, DAY0 + DAY)
    now = DAY0 + DAY + timedelta(minutes=10)
    import zlib

    space = zlib.crc32(b"chargeback-reconcile:default")
    space = space - (1 << 32) if space >= 1 << 31 else space
    with pg_engine.connect() as other:
        other.execute(text("SELECT pg_advisory_lock(:c, :k)"), {"c": space, "k": field.F // 86400})
        assert run(pg_engine, prom, now).checked == {}
        other.execute(text("SELECT pg_advisory_unlock(:c, :k)"), {"c": space, "k": field.F // 86400})
    assert run(pg_engine, prom, now).checked == {"default": [DAY0]}
