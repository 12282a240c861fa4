"""Ground truth of a simulated day: the phenomena ingestion must get right all occur, and the
source's signals are far enough from every threshold that Prometheus's extrapolation cannot flip them."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest

from app.metrics.attribution import attribute_hour, split_hours
from tests.support.simulator import DAY

END = DAY + timedelta(days=1)


@pytest.fixture(scope="module")
def truth(sim):
    return sim.truth(DAY, END)


@pytest.fixture(scope="module")
def batch(sim):
    return sim.source().fetch(start=DAY, end=END, policy=sim.policy())


def test_a_day_has_dark_time_breaches_unallocated_use_and_time_slicing(sim, truth):
    for pool in ("mixed-a100", "h100"):
        dark = sum(v for (_, p), v in truth.dark_minutes.items() if p == pool)
        assert 60 < dark < 1380, pool  # inference is idle part of the day, not all of it
    assert sum(v for (_, p), v in truth.dark_minutes.items() if p == "dev") == 0  # no SLA, no reservation
    assert truth.breaches
    assert any(shares for shares in truth.breach_colocated.values())
    assert all(set(shares) <= {"vision", "nlp", "etl"} for shares in truth.breach_colocated.values())
    unallocated = sum(v for (_, _, tenant, klass, _), v in truth.usage.items() if tenant == klass == "unallocated")
    assert unallocated > 0
    classes = {(tenant, klass) for (_, _, tenant, klass, _) in truth.usage}
    assert {("search", "inference"), ("vision", "training"), ("etl", "preprocessing")} <= classes
    assert any(dark for (*_, dark) in truth.usage) and any(not dark for (*_, dark) in truth.usage)
    assert set(truth.capacity.values()) == {16, 8}
    # Time-slicing: an etl job and a notebook share the 4090's GPU 0 in some minutes; the pods
    # split the GPU, so the pool's GPU-seconds are its occupied minutes, not its pod-minutes.
    day = int(DAY.timestamp()) // 86400
    dev = [u for u in sim.topology.units if u.pool == "dev"]
    occupancy = sim.workload.occupancy(day)
    shared = next(u for u in dev if u.role.kind == "shared")
    assert any(len(pods) == 2 for pods in occupancy[shared.index])
    occupied = sum(60 for u in dev for pods in occupancy[u.index] if pods)
    pod_minutes = sum(60 * len(pods) for u in dev for pods in occupancy[u.index])
    used = sum(v for (_, pool, *_), v in truth.usage.items() if pool == "dev")
    assert used == occupied < pod_minutes


def test_mig_instances_count_as_sevenths(sim, truth):
    rows = [v for (_, _, tenant, _, _), v in truth.usage.items() if tenant == "search"]
    # search-chat's replicas hold 3g.40gb instances all day: 8 x 3/7 GPU x 86400 s (each row is
    # rounded to 1e-6 on its own).
    assert abs(sum(rows) - Decimal(8 * 3 * 86400) / 7) <= Decimal("0.000001") * len(rows)
    assert {v % 1 for v in rows} - {Decimal(0)}  # sevenths, not whole seconds


def test_signals_are_bimodal(batch, sim):
    threshold = 180 / 3
    for service in batch.services.values():
        values = list(service.requests_in_window.values())
        assert all(v <= 9 or v >= 4 * threshold for v in values)  # idle, or far above the line
        assert any(v <= 9 for v in values) and any(v >= 4 * threshold for v in values)
        p99 = list(service.p99_s.values())
        assert all(v <= 0.3 or 0.5 < v <= 0.8 for v in p99)
        # On vLLM's buckets P99 is either in the first bucket or in the slow one, never straddling a red line.
        assert set(service.p99_bucket.values()) <= {(Decimal(0), Decimal("0.3")), (Decimal("0.5"), Decimal("0.8"))}


def test_attributing_the_source_reproduces_the_truth(sim, truth, batch):
    """app.metrics.attribution over the simulator's own batch gives exactly the ground truth."""
    policy = sim.policy()
    for hour, part in split_hours(batch).items():
        rollup = attribute_hour(part, hour=hour, policy=policy, scrape_interval_s=sim.scrape_interval_s)
        assert {(hour, u.pool, u.tenant, u.klass, u.dark): u.gpu_seconds for u in rollup.usage} == \
            {k: v for k, v in truth.usage.items() if k[0] == hour}
        assert {p.pool: (p.gpus, p.dark_minutes) for p in rollup.pools} == \
            {p: (truth.capacity[(hour, p)], truth.dark_minutes[(hour, p)]) for (h, p) in truth.capacity if h == hour}
        assert {(b.service, b.minute_end): dict(b.colocated) for b in rollup.breaches} == \
            {k: v for k, v in truth.breach_colocated.items() if hour < k[1] <= hour + 3600}
