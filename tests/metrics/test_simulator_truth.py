"""Ingestion equals the simulator's ground truth exactly: fed directly, and through a real backfilled Prometheus."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlmodel import Session, select

from app.core.timeutil import epoch
from app.metrics.ingest import ingest_hours
from app.metrics.models import BreachMinuteRollup, BreachShare, PoolHourRollup, UsageRollup
from app.metrics.prometheus_source import PrometheusSource
from app.metrics.simulator import Simulator
from tests.support.ingest import add_policy
from tests.support.prometheus import PrometheusServer

START = datetime(2026, 11, 20, tzinfo=UTC)  # 00:00 UTC: the Asia/Shanghai peak (breaches) starts at 01:00
PROM_HOURS = 6
DIRECT_HOURS = 24


@pytest.fixture(scope="module")
def sim() -> Simulator:
    return Simulator(seed=42, gpus=32, scrape_interval_s=30)


@pytest.fixture(scope="module")
def sim_prometheus(sim, tmp_path_factory):
    with PrometheusServer.from_simulator(tmp_path_factory.mktemp("prom-sim"), sim, START,
                                         START + timedelta(hours=PROM_HOURS)) as server:
        yield server


def stored(session: Session, start: datetime, end: datetime) -> dict:
    """The rollups of [start, end) in GroundTruth's shape."""
    usage = {(epoch(u.hour), u.pool, u.tenant, u.klass, u.dark): u.gpu_seconds
             for u in session.exec(select(UsageRollup).where(UsageRollup.hour >= start, UsageRollup.hour < end))}
    pools = session.exec(select(PoolHourRollup).where(PoolHourRollup.hour >= start, PoolHourRollup.hour < end)).all()
    breaches, colocated = set(), {}
    for b in session.exec(select(BreachMinuteRollup).where(BreachMinuteRollup.hour >= start, BreachMinuteRollup.hour < end)):
        key = (b.service, epoch(b.minute_end))
        breaches.add(key)
        colocated[key] = {s.tenant: s.gpu_seconds for s in session.exec(select(BreachShare).where(BreachShare.breach_id == b.id))}
    return {
        "usage": usage,
        "capacity": {(epoch(p.hour), p.pool): p.gpus for p in pools},
        "capacity_s": {(epoch(p.hour), p.pool): p.capacity_gpu_seconds for p in pools},
        "dark_minutes": {(epoch(p.hour), p.pool): p.dark_minutes for p in pools},
        "breaches": breaches,
        "breach_colocated": colocated,
    }


def assert_equals_truth(got: dict, truth) -> None:
    assert got["usage"] == truth.usage
    assert got["capacity"] == truth.capacity
    assert got["capacity_s"] == {k: n * 3600 for k, n in truth.capacity.items()}
    assert got["dark_minutes"] == truth.dark_minutes
    assert got["breaches"] == truth.breaches
    assert got["breach_colocated"] == truth.breach_colocated


def assert_truth_is_interesting(truth) -> None:
    """The window exercises every case: dark and busy, MIG and whole GPUs, unallocated, breaches with training."""
    keys = truth.usage.keys()
    assert {k[4] for k in keys} == {True, False}
    assert {"inference", "training", "preprocessing", "unallocated"} <= {k[3] for k in keys}
    assert truth.breaches and any(truth.breach_colocated.values())
    assert any(0 < n < 60 for n in truth.dark_minutes.values())


def test_simulator_fed_directly_equals_truth(session, sim):
    end = START + timedelta(hours=DIRECT_HOURS)
    add_policy(session, sim.policy(), effective_epoch=epoch(START) - 86400)
    report = ingest_hours(session=session, source=sim.source(), start=START, end=end, scrape_interval_s=30)
    assert len(report.ok) == DIRECT_HOURS and not report.gaps
    truth = sim.truth(START, end)
    assert_truth_is_interesting(truth)
    assert_equals_truth(stored(session, START, end), truth)


def test_prometheus_with_backfilled_simulator_history_equals_truth(session, sim, sim_prometheus):
    end = START + timedelta(hours=PROM_HOURS)
    add_policy(session, sim.policy(), effective_epoch=epoch(START) - 86400)
    source = PrometheusSource(sim_prometheus.url, scrape_interval_s=30, timeout_s=30)
    report = ingest_hours(session=session, source=source, start=START, end=end, scrape_interval_s=30)
    assert len(report.ok) == PROM_HOURS and not report.gaps
    truth = sim.truth(START, end)
    assert_truth_is_interesting(truth)
    assert_equals_truth(stored(session, START, end), truth)


def test_a_15_s_fleet_with_the_interval_inferred_equals_truth(session, tmp_path):
    """The charts' 15 s scrape, no CHARGEBACK_SCRAPE_INTERVAL_S: samples count 15 GPU-seconds each, not 30."""
    sim15 = Simulator(seed=42, gpus=32, scrape_interval_s=15)
    hours = 3
    end = START + timedelta(hours=hours)
    add_policy(session, sim15.policy(), effective_epoch=epoch(START) - 86400)
    with PrometheusServer.from_simulator(tmp_path, sim15, START, end) as server:
        report = ingest_hours(session=session, source=PrometheusSource(server.url, timeout_s=30), start=START, end=end)
    assert len(report.ok) == hours and not report.gaps
    truth = sim15.truth(START, end)
    assert any(k[4] for k in truth.usage) and truth.breaches
    assert_equals_truth(stored(session, START, end), truth)
