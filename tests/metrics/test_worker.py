"""The worker: finished hours only, catch-up, gap retries, and one ingester per hour when two run at once."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlmodel import Session, select

from app.core.db import unit_of_work
from app.core.settings import Settings
from app.core.timeutil import from_epoch
from app.metrics.ingestion_health import ingestion_health
from app.metrics.models import IngestHour, UsageRollup
from app.metrics.prometheus_source import PrometheusSource
from app.metrics.worker import pending_hours, run_worker
from tests.support import scenario
from tests.support.ingest import SlowSource, add_policy
from tests.support.threads import at_once

H = scenario.H
SETTINGS = Settings(scrape_interval_s=30, ingest_delay_s=120)


def committed_policy(engine):
    with unit_of_work(engine) as session:
        add_policy(session)


def test_pending_hours_are_finished_untried_or_due_gaps(session, policy_id):
    now = from_epoch(H + 3 * 3600 + 100)  # H+2h ended 100 s ago: within the 120 s delay, not finished
    assert pending_hours(session, now=now, delay_s=120, backfill_start=from_epoch(H)) == [from_epoch(H), from_epoch(H + 3600)]
    session.add(IngestHour(hour=from_epoch(H), status="ok"))
    session.add(IngestHour(hour=from_epoch(H + 3600), status="gap", next_retry_at=now + timedelta(minutes=1)))
    session.flush()
    assert pending_hours(session, now=now, delay_s=120) == []  # resumes from the first recorded hour
    assert pending_hours(session, now=now + timedelta(minutes=1), delay_s=120) == [from_epoch(H + 3600), from_epoch(H + 7200)]
    assert pending_hours(session, now=now, delay_s=0, backfill_start=from_epoch(H)) == [from_epoch(H + 7200)]


def test_two_workers_at_once_ingest_each_hour_exactly_once(fresh_engine, scenario_prometheus):
    committed_policy(fresh_engine)
    now = from_epoch(H + 3 * 3600 + 300)
    results = []
    assert at_once(lambda: results.append(run_worker(
        engine=fresh_engine, settings=SETTINGS, once=True, backfill_start=from_epoch(H), batch_hours=1, now=lambda: now,
        source=SlowSource(scenario_prometheus.url, scrape_interval_s=30)))) == []
    a, b = results
    hours = [from_epoch(H + k * 3600) for k in range(3)]
    assert sorted(a.ingested + b.ingested) == hours  # each hour once, by one of them
    assert not set(a.ingested) & set(b.ingested)
    with Session(fresh_engine) as session:
        rows = session.exec(select(IngestHour).order_by(IngestHour.hour)).all()
        assert [(r.status, r.attempts) for r in rows] == [("ok", 1)] * 3
        assert len(session.exec(select(UsageRollup).where(UsageRollup.hour == hours[0])).all()) == len(scenario.EXPECTED_USAGE)
        health = ingestion_health(session=session, now=now)
    assert health.gap_count == 0 and health.ok_count == 3
    assert health.lag_seconds == 300 and health.last_duration_s > 0


@pytest.mark.prometheus  # starts its own server in the test body
def test_worker_catches_up_and_retries_gaps_after_an_outage(fresh_engine, tmp_path):
    from tests.support.prometheus import PrometheusServer

    committed_policy(fresh_engine)
    server = PrometheusServer.backfilled(tmp_path / "prom", scenario.text(3))
    source = PrometheusSource(server.url, scrape_interval_s=30, timeout_s=5, retries=0)
    clock = [from_epoch(H + 3600 + 200)]  # only H is finished
    kwargs = dict(engine=fresh_engine, settings=SETTINGS, once=True, backfill_start=from_epoch(H), source=source,
                  now=lambda: clock[0])
    try:
        server.start()
        assert run_worker(**kwargs).ingested == [from_epoch(H)]
        server.stop()
        clock[0] = from_epoch(H + 3 * 3600 + 200)  # downtime: two more hours finished, Prometheus is down
        down = run_worker(**kwargs)
        assert down.ingested == [] and down.gaps == [from_epoch(H + 3600), from_epoch(H + 7200)]
        server.start()
        assert run_worker(**kwargs).ingested == []  # gaps wait for their retry time
        clock[0] += timedelta(minutes=2)
        assert run_worker(**kwargs).ingested == [from_epoch(H + 3600), from_epoch(H + 7200)]
    finally:
        server.stop()
    with Session(fresh_engine) as session:
        assert ingestion_health(session=session, now=clock[0]).gap_count == 0
