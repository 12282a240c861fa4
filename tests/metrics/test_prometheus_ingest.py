"""Ingestion from a real Prometheus backfilled with the hand-written scenario (tests/metrics/scenario.py)."""

from __future__ import annotations

from decimal import Decimal

from app.core.timeutil import from_epoch
from app.metrics.ingest import ingest_hours
from app.metrics.prometheus_source import PrometheusSource
from tests.support import scenario
from tests.support.ingest import HOUR, snapshot, status
from tests.support.policies import A100, RTX4090, mixed_policy

H = scenario.H


def ingest(session, prometheus, hours=1, **kwargs):
    source = PrometheusSource(prometheus.url, scrape_interval_s=30, timeout_s=10, **kwargs)
    return ingest_hours(session=session, source=source, start=from_epoch(H), end=from_epoch(H) + hours * HOUR,
                        scrape_interval_s=30)


def test_first_hour_matches_the_hand_computed_rollup(session, policy_id, scenario_prometheus):
    report = ingest(session, scenario_prometheus)
    assert report.ok == [from_epoch(H)] and report.gaps == []
    got = snapshot(session, H)
    # MIG 3/7, GPU_UTIL preferred on the datacenter GPU, both host label spellings, time-slicing,
    # `unallocated`, `unpooled`, the workload_class override, dark from the minute ending H+33.
    assert {k: v[0] for k, v in got["usage"].items()} == scenario.EXPECTED_USAGE
    assert {v[3] for v in got["usage"].values()} == {policy_id}
    assert {p: (v[0], v[2]) for p, v in got["pools"].items()} == scenario.EXPECTED_POOLS
    assert got["pools"]["mixed-a100"][1] == Decimal(4 * 3600)
    assert got["models"][("mixed-a100", A100)] == scenario.EXPECTED_A100_ENERGY
    assert got["models"][("rtx", RTX4090)] == (1, 0, Decimal(0))
    assert sorted(m for _, m in got["breaches"]) == scenario.EXPECTED_BREACH_MINUTES
    for p99, pool, shares in got["breaches"].values():
        assert (p99, pool, shares) == (scenario.EXPECTED_P99_MS, "mixed-a100", scenario.EXPECTED_COLOCATED)
    # Efficiency inputs: search's GPU_UTIL of 50 % over its 120 samples, split 64 busy / 56 dark.
    assert got["usage"][("mixed-a100", "search", "inference", False)][1:3] == (32.0, 64)
    assert got["usage"][("mixed-a100", "search", "inference", True)][1:3] == (28.0, 56)
    row = status(session, H)
    assert (row.status, row.policy_version_id, row.attempts) == ("ok", policy_id, 1)


def test_same_hour_twice_gives_identical_rollups(session, policy_id, scenario_prometheus):
    ingest(session, scenario_prometheus)
    first = snapshot(session, H)
    ingest(session, scenario_prometheus)
    assert snapshot(session, H) == first
    assert status(session, H).attempts == 2


def test_multi_hour_fetch_equals_hour_by_hour_and_chunking(session, policy_id, scenario_prometheus):
    ingest(session, scenario_prometheus, hours=3)
    batched = [snapshot(session, H + k * 3600) for k in range(3)]
    assert batched[0]["usage"] and batched[2]["usage"]
    # One-hour chunks (the 11,000-point chunking path) and host shards give the same rows.
    ingest(session, scenario_prometheus, hours=3, max_chunk_hours=1,
           host_shards=("gpu-a100-.*", "gpu-4090-.*|stray-.*"))
    assert [snapshot(session, H + k * 3600) for k in range(3)] == batched


def test_query_ranges_stay_under_prometheus_point_limit(scenario_prometheus):
    log = []
    source = PrometheusSource(scenario_prometheus.url, scrape_interval_s=30, log=log, max_chunk_hours=10_000)
    source.fetch(start=from_epoch(H), end=from_epoch(H + 200 * 3600), policy=mixed_policy())
    assert source.max_chunk_hours == 183
    assert max((q.end - q.start) // q.step + 1 for q in log) <= 11_000
    assert len({q.start for q in log}) > 1  # 200 h were split into chunks
