"""Engine independence: the same TSDB blocks read through Prometheus 2.x and VictoriaMetrics single-node
(every sample of the blocks imported through its /api/v1/import, see tests/support/victoria.py) give identical
GPU-seconds, dark minutes, breach minutes and energy, and both equal the simulator's ground truth."""

from __future__ import annotations

from datetime import timedelta

import pytest

from app.core.timeutil import from_epoch
from app.metrics.attribution import attribute_hour, split_hours
from app.metrics.ingest import ingest_hours
from app.metrics.prometheus_source import PrometheusSource
from app.metrics.simulator import Simulator
from tests.support.ingest import add_policy, snapshot
from tests.support.prometheus import PrometheusServer
from tests.support.simulator import DAY
from tests.support.victoria import VictoriaMetricsServer

pytestmark = pytest.mark.prometheus
# 00:00-03:00 UTC: the morning ramp (dark -> busy, a rollout's quiet spell) and a breach episode.
START, END = DAY, DAY + timedelta(hours=3)


@pytest.fixture(scope="module")
def sim() -> Simulator:
    return Simulator(seed=42, gpus=32, scrape_interval_s=30)


@pytest.fixture(scope="module")
def engines(sim, tmp_path_factory):
    """(Prometheus URL, VictoriaMetrics URL) holding the same history (an hour before START for the look-backs)."""
    root = tmp_path_factory.mktemp("engines")
    (root / "prom").mkdir()
    prom = PrometheusServer.from_simulator(root / "prom", sim, START - timedelta(hours=1), END)
    with VictoriaMetricsServer(root / "vm") as vm:
        vm.load_prometheus_blocks(prom.data)  # promtool's blocks, before Prometheus ever opens them
        with prom:
            yield prom.url, vm.url


def rollups(sim, url: str) -> dict:
    batch = PrometheusSource(url, scrape_interval_s=30, timeout_s=30).fetch(start=START, end=END, policy=sim.policy())
    out = {"gaps": batch.gaps, "energy": {(g.uuid, t): v for g in batch.energy for t, v in g.energy_mj.items()}}
    for hour, part in sorted(split_hours(batch).items()):
        r = attribute_hour(part, hour=hour, policy=sim.policy(), scrape_interval_s=30)
        out[hour] = {
            "usage": {(u.pool, u.tenant, u.klass, u.dark): u.gpu_seconds for u in r.usage},
            "pools": {p.pool: (p.gpus, p.capacity_gpu_seconds, p.dark_minutes, p.models) for p in r.pools},
            "breaches": {(b.service, b.minute_end): (b.p99_ms, b.colocated) for b in r.breaches},
            "unresolved": r.unresolved,
        }
    return out


def test_prometheus_and_victoriametrics_give_identical_rollups_equal_to_the_truth(sim, engines):
    prom_url, vm_url = engines
    via_prometheus, via_victoria = rollups(sim, prom_url), rollups(sim, vm_url)
    assert via_victoria == via_prometheus
    truth = sim.truth(START, END)
    assert truth.breaches and any(truth.dark_minutes.values()) and any(
        0 < truth.dark_minutes[k] < 60 for k in truth.dark_minutes)  # the hours really mix dark and busy
    for hour in range(int(START.timestamp()), int(END.timestamp()), 3600):
        got = via_victoria[hour]
        assert got["usage"] == {k[1:]: v for k, v in truth.usage.items() if k[0] == hour}
        assert {p: v[2] for p, v in got["pools"].items()} == {p: n for (h, p), n in truth.dark_minutes.items() if h == hour}
        assert {k: dict(v[1]) for k, v in got["breaches"].items()} == \
            {k: v for k, v in truth.breach_colocated.items() if hour < k[1] <= hour + 3600}
    assert via_victoria["gaps"] == {} and via_victoria["energy"] == {
        (g.uuid, t): v for g in sim.source().fetch(start=START, end=END, policy=sim.policy()).energy
        for t, v in g.energy_mj.items()}


def test_ingesting_from_victoriametrics_stores_what_prometheus_does(session, sim, engines):
    add_policy(session, sim.policy(), effective_epoch=int(START.timestamp()) - 86400)
    stored = {}
    for name, url in zip(("prometheus", "victoria"), engines):
        report = ingest_hours(session=session, source=PrometheusSource(url, scrape_interval_s=30, timeout_s=30),
                              start=START, end=END, scrape_interval_s=30)
        assert report.ok == [from_epoch(h) for h in range(int(START.timestamp()), int(END.timestamp()), 3600)]
        stored[name] = [snapshot(session, h) for h in range(int(START.timestamp()), int(END.timestamp()), 3600)]
    assert stored["victoria"] == stored["prometheus"]
