"""The worker and several clusters: claims per (cluster, hour), each hour of each cluster ingested once, and a cluster
that cannot be read never holds the others back."""

from __future__ import annotations

from sqlmodel import Session, select

from app.core.clusters import DEFAULT_CLUSTER
from app.core.db import unit_of_work
from app.core.settings import Settings
from app.core.timeutil import from_epoch
from app.metrics.models import IngestHour, PoolHourRollup, UsageRollup
from app.metrics.prometheus_source import PrometheusSource
from app.metrics.worker import LOCK_CLASS, lock_key, pending_hours, run_worker
from tests.support import scenario
from tests.support.ingest import SlowSource, add_policy
from tests.support.prometheus import free_port
from tests.support.threads import at_once

H = scenario.H
SETTINGS = Settings(scrape_interval_s=30, ingest_delay_s=120)
HOURS = [from_epoch(H + k * 3600) for k in range(3)]


def test_lock_keys_are_per_cluster_and_the_default_keeps_its_own():
    hour = HOURS[0]
    assert lock_key(DEFAULT_CLUSTER, hour) == (LOCK_CLASS, H // 3600)  # as before clusters: old and new workers agree
    keys = {lock_key(c, hour) for c in (DEFAULT_CLUSTER, "east", "west")}
    assert len(keys) == 3 and all(-(2**31) <= space < 2**31 for space, _ in keys)
    assert lock_key("east", hour) == lock_key("east", hour)


def test_two_workers_ingest_each_hour_of_each_cluster_once(fresh_engine, scenario_prometheus):
    with unit_of_work(fresh_engine) as session:
        add_policy(session)  # its pools are the default cluster's: cluster `b` reads the same nodes as unpooled
    now = from_epoch(H + 3 * 3600 + 300)
    results = []

    def worker():
        sources = {c: SlowSource(scenario_prometheus.url, scrape_interval_s=30) for c in (DEFAULT_CLUSTER, "b")}
        results.append(run_worker(engine=fresh_engine, settings=SETTINGS, once=True, backfill_start=HOURS[0],
                                  batch_hours=1, now=lambda: now, sources=sources))

    assert at_once(worker) == []
    a, b = results
    for cluster in (DEFAULT_CLUSTER, "b"):
        assert sorted(a.of(cluster).ingested + b.of(cluster).ingested) == HOURS, cluster
        assert not set(a.of(cluster).ingested) & set(b.of(cluster).ingested)
    with Session(fresh_engine) as session:
        rows = session.exec(select(IngestHour).order_by(IngestHour.cluster, IngestHour.hour)).all()
        assert [(r.cluster, r.status, r.attempts) for r in rows] == (
            [("b", "ok", 1)] * 3 + [(DEFAULT_CLUSTER, "ok", 1)] * 3)
        pools = {(p.cluster, p.pool) for p in session.exec(select(PoolHourRollup).where(PoolHourRollup.hour == HOURS[0]))}
        assert {p for c, p in pools if c == "b"} == {"unpooled"}  # no pool of b names these nodes
        assert {"mixed-a100", "rtx"} <= {p for c, p in pools if c == DEFAULT_CLUSTER}
        # b's GPUs are the same hardware here, seen as b's own unpooled pool: the same use, counted apart.
        def used(cluster: str) -> object:
            return sum(u.gpu_seconds for u in session.exec(
                select(UsageRollup).where(UsageRollup.cluster == cluster, UsageRollup.hour == HOURS[0])))
        assert used("b") == used(DEFAULT_CLUSTER) > 0


def test_a_cluster_that_cannot_be_read_does_not_hold_the_others(fresh_engine, scenario_prometheus):
    with unit_of_work(fresh_engine) as session:
        add_policy(session)
    now = from_epoch(H + 3 * 3600 + 300)
    dead = PrometheusSource(f"http://127.0.0.1:{free_port()}", scrape_interval_s=30, timeout_s=2, retries=0)
    sources = {"down": dead, DEFAULT_CLUSTER: PrometheusSource(scenario_prometheus.url, scrape_interval_s=30)}
    report = run_worker(engine=fresh_engine, settings=SETTINGS, once=True, backfill_start=HOURS[0], batch_hours=1,
                        now=lambda: now, sources=sources)
    assert report.of(DEFAULT_CLUSTER).ingested == HOURS and report.of(DEFAULT_CLUSTER).gaps == []
    # One attempt at the down cluster per round: its first hour is a gap, the rest wait for the next round.
    assert report.of("down").gaps == HOURS[:1] and report.of("down").ingested == []
    with Session(fresh_engine) as session:
        gap = session.get(IngestHour, ("down", HOURS[0]))
        assert gap.status == "gap" and "did not answer" in gap.last_error
        assert session.get(IngestHour, ("down", HOURS[1])) is None
        assert pending_hours(session, now=now, delay_s=120, cluster="down") == HOURS[1:]  # the gap waits for its retry
        assert pending_hours(session, now=now, delay_s=120) == []
