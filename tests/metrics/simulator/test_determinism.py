"""Determinism and random access in time: every view is a pure function of (seed, gpus, time)."""

from __future__ import annotations

from datetime import timedelta

from app.metrics.simulator import Simulator
from tests.support.simulator import DAY

H = timedelta(hours=1)


def test_same_seed_same_exposition_and_backfill(sim, tmp_path):
    other = Simulator(seed=42, gpus=32)
    at = DAY + timedelta(hours=3, minutes=7, seconds=13)
    assert other.exposition(at) == sim.exposition(at)
    a, b = tmp_path / "a.om", tmp_path / "b.om"
    assert sim.write_openmetrics(a, DAY, DAY + H) == other.write_openmetrics(b, DAY, DAY + H) > 0
    assert a.read_bytes() == b.read_bytes()


def test_different_seed_differs(sim):
    at = DAY + timedelta(hours=3)
    assert Simulator(seed=7, gpus=32).exposition(at) != sim.exposition(at)


def test_truth_is_additive_over_windows(sim):
    whole = sim.truth(DAY, DAY + 6 * H)
    first, second = sim.truth(DAY, DAY + 2 * H), sim.truth(DAY + 2 * H, DAY + 6 * H)
    assert whole.usage == {**first.usage, **second.usage}
    assert whole.capacity == {**first.capacity, **second.capacity}
    assert whole.dark_minutes == {**first.dark_minutes, **second.dark_minutes}
    assert whole.breaches == first.breaches | second.breaches
    assert whole.breach_colocated == {**first.breach_colocated, **second.breach_colocated}


def test_source_is_additive_over_windows(sim):
    policy = sim.policy()
    whole = sim.source().fetch(start=DAY, end=DAY + 3 * H, policy=policy)
    parts = [sim.source().fetch(start=DAY + i * H, end=DAY + (i + 1) * H, policy=policy) for i in range(3)]

    def samples(batches):
        out = {}
        for batch in batches:
            for s in batch.occupancy:
                out.setdefault((s.labels, s.metric), {}).update(s.samples)
        return out

    assert samples([whole]) == samples(parts)
    for name, service in whole.services.items():
        merged = {}
        for part in parts:
            merged.update(part.services[name].requests_in_window)
        assert service.requests_in_window == merged
    energy = {(e.uuid, t): v for e in whole.energy for t, v in e.energy_mj.items()}
    assert energy == {(e.uuid, t): v for p in parts for e in p.energy for t, v in e.energy_mj.items()}


def test_backfill_agrees_with_exposition_at_every_instant(sim, tmp_path):
    """The backfill carries counters forward; the exposition computes them in closed form."""
    path = tmp_path / "one.om"
    sim.write_openmetrics(path, DAY + 5 * H, DAY + 6 * H, metrics=["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
                                                                    "vllm:request_success_total"])
    by_time: dict[int, set[str]] = {}
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            series, value, t = line.rsplit(" ", 2)
            by_time.setdefault(int(t), set()).add(f"{series} {value}")
    for t in (min(by_time), min(by_time) + 30 * 37, max(by_time)):
        live = {line for line in sim.exposition(DAY.fromtimestamp(t, DAY.tzinfo)).splitlines()
                if line.startswith(("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "vllm:request_success_total"))}
        # The exposition spells unmapped devices with empty pod labels; the backfill omits them.
        live = {line.replace(',container="",namespace="",pod=""', "") for line in live}
        assert live == by_time[t]
