"""Prometheus stopped mid-ingest: no partial hour, a gap with backoff, filled once Prometheus is back."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlmodel import select

from app.core.timeutil import from_epoch
from app.metrics.ingest import ingest_hours, retry_delay
from app.metrics.models import BreachMinuteRollup, IngestHour, PoolHourRollup, UsageRollup
from app.metrics.prometheus_source import PrometheusSource
from tests.support import scenario
from tests.support.ingest import HOUR, snapshot, status
from tests.support.policies import mixed_policy
from tests.support.prometheus import PrometheusServer

H = scenario.H


class StoppingSource(PrometheusSource):
    """A real PrometheusSource whose Prometheus is shut down just before its n-th query."""

    def __init__(self, server: PrometheusServer, stop_before_query: int):
        super().__init__(server.url, scrape_interval_s=30, timeout_s=5, retries=0)
        self.server, self.stop_before, self.issued = server, stop_before_query, 0

    def _get(self, query, start, end, step):
        self.issued += 1
        if self.issued == self.stop_before:
            self.server.stop()
        return super()._get(query, start, end, step)


@pytest.fixture
def prometheus(tmp_path):
    server = PrometheusServer.backfilled(tmp_path / "prom", scenario.text(3))
    with server:
        yield server


def rows_for(session, hour_epoch):
    hour = from_epoch(hour_epoch)
    return [len(session.exec(select(t).where(t.hour == hour)).all()) for t in (UsageRollup, PoolHourRollup, BreachMinuteRollup)]


def test_stopped_mid_hour_stores_nothing_of_it_then_fills(session, policy_id, prometheus):
    now = from_epoch(H + 5 * 3600)
    log = []  # the queries of one hour's fetch (occupancy, energy, presence, SLA signals)
    PrometheusSource(prometheus.url, scrape_interval_s=30, timeout_s=10, log=log).fetch(
        start=from_epoch(H), end=from_epoch(H) + HOUR, policy=mixed_policy())  # the policy_id fixture's
    # Killed between the queries of the second hour's fetch (3 queries into it).
    source = StoppingSource(prometheus, stop_before_query=len(log) + 3)
    report = ingest_hours(session=session, source=source, start=from_epoch(H), end=from_epoch(H) + 3 * HOUR,
                          scrape_interval_s=30, hours_per_fetch=1, now=now)
    assert report.ok == [from_epoch(H)]
    assert report.gaps == [from_epoch(H + 3600), from_epoch(H + 7200)]
    assert rows_for(session, H)[0] > 0
    assert rows_for(session, H + 3600) == [0, 0, 0] and rows_for(session, H + 7200) == [0, 0, 0]
    gap = status(session, H + 3600)
    assert (gap.status, gap.attempts, gap.policy_version_id) == ("gap", 1, None)
    assert gap.next_retry_at == now + retry_delay(1) and "did not answer" in gap.last_error
    third = status(session, H + 7200)  # asked in its turn (ingestion carries on past a gap), not skipped
    assert (third.status, third.attempts) == ("gap", 1) and "did not answer" in third.last_error

    prometheus.start()
    source = PrometheusSource(prometheus.url, scrape_interval_s=30, timeout_s=10)
    report = ingest_hours(session=session, source=source, start=from_epoch(H), end=from_epoch(H) + 3 * HOUR,
                          scrape_interval_s=30, now=now + timedelta(minutes=5))
    assert report.gaps == [] and len(report.ok) == 3
    filled = [snapshot(session, H + k * 3600) for k in range(3)]
    assert all(s["usage"] and s["pools"] for s in filled)
    row = status(session, H + 3600)
    assert (row.status, row.attempts, row.next_retry_at, row.last_error, row.policy_version_id) == ("ok", 2, None, "", policy_id)
    # The filled hours are exactly what an undisturbed ingestion gives.
    ingest_hours(session=session, source=source, start=from_epoch(H), end=from_epoch(H) + 3 * HOUR, scrape_interval_s=30)
    assert [snapshot(session, H + k * 3600) for k in range(3)] == filled


def test_outage_on_an_ok_hour_keeps_its_rollups(session, policy_id, prometheus):
    source = PrometheusSource(prometheus.url, scrape_interval_s=30, timeout_s=5, retries=0)
    ingest_hours(session=session, source=source, start=from_epoch(H), end=from_epoch(H) + HOUR, scrape_interval_s=30)
    before = snapshot(session, H)
    prometheus.stop()
    report = ingest_hours(session=session, source=source, start=from_epoch(H), end=from_epoch(H) + 2 * HOUR,
                          scrape_interval_s=30)
    assert report.kept == [from_epoch(H)] and report.gaps == [from_epoch(H + 3600)]
    assert snapshot(session, H) == before and status(session, H).status == "ok"


def test_gap_backoff_grows_exponentially_and_is_capped():
    assert [retry_delay(n).total_seconds() for n in (1, 2, 3, 4)] == [60, 120, 240, 480]
    assert retry_delay(50) == timedelta(hours=6)


def test_an_hour_before_any_policy_is_a_gap_not_zero_use(session, prometheus):
    source = PrometheusSource(prometheus.url, scrape_interval_s=30)
    report = ingest_hours(session=session, source=source, start=from_epoch(H), end=from_epoch(H) + HOUR, scrape_interval_s=30)
    assert report.gaps == [from_epoch(H)] and rows_for(session, H) == [0, 0, 0]
    assert "no policy" in session.get(IngestHour, ("default", from_epoch(H))).last_error
