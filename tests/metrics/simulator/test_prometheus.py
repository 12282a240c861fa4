"""Through a real Prometheus: the backfill, read back with PromQL (extrapolating increase/rate,
count_over_time), attributes to exactly the ground truth. This is what the bimodal load buys."""

from __future__ import annotations

from datetime import timedelta

import pytest

from app.metrics.attribution import attribute_hour, split_hours
from app.metrics.prometheus_source import PrometheusSource
from tests.support.prometheus import PrometheusServer
from tests.support.simulator import DAY

START, END = DAY, DAY + timedelta(hours=3)  # the morning ramp (dark -> busy) and a breach episode
pytestmark = pytest.mark.prometheus


def test_backfilled_prometheus_attributes_to_the_truth(sim, tmp_path):
    sim.write_openmetrics(tmp_path / "sim.om", START, END)
    truth = sim.truth(START, END)
    assert truth.breaches and any(truth.dark_minutes.values())
    with PrometheusServer.backfilled(tmp_path / "prom", tmp_path / "sim.om").start() as prom:
        batch = PrometheusSource(prom.url).fetch(start=START, end=END, policy=sim.policy())
    direct = sim.source().fetch(start=START, end=END, policy=sim.policy())
    assert {(g.uuid, t): v for g in batch.energy for t, v in g.energy_mj.items()} == \
        {(g.uuid, t): v for g in direct.energy for t, v in g.energy_mj.items()}
    for hour, part in split_hours(batch).items():
        rollup = attribute_hour(part, hour=hour, policy=sim.policy(), scrape_interval_s=sim.scrape_interval_s)
        assert {(hour, u.pool, u.tenant, u.klass, u.dark): u.gpu_seconds for u in rollup.usage} == \
            {k: v for k, v in truth.usage.items() if k[0] == hour}
        assert {p.pool: (p.gpus, p.dark_minutes) for p in rollup.pools} == \
            {p: (truth.capacity[(h, p)], truth.dark_minutes[(h, p)]) for (h, p) in truth.capacity if h == hour}
        assert {(b.service, b.minute_end): dict(b.colocated) for b in rollup.breaches} == \
            {k: v for k, v in truth.breach_colocated.items() if hour < k[1] <= hour + 3600}


def test_real_prometheus_scrapes_the_live_exporter(sim, tmp_path):
    import time

    from app.metrics.simulator import serve_exporter

    exporter = serve_exporter(sim, port=0)
    host, port = exporter.server_address[:2]
    try:
        with PrometheusServer(tmp_path, scrape_target=f"{host}:{port}", scrape_interval_s=1).start() as prom:
            deadline = time.monotonic() + 30
            result = []
            while time.monotonic() < deadline and not result:
                time.sleep(0.5)  # state-free: polls until Prometheus answers with the series
                result = prom.query('count by (modelName) (count_over_time(DCGM_FI_DEV_GPU_UTIL[1m]))')
            assert {r["metric"]["modelName"] for r in result} == {
                "NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3", "NVIDIA GeForce RTX 4090"}
            assert prom.query('count(DCGM_FI_PROF_GR_ENGINE_ACTIVE{GPU_I_PROFILE="3g.40gb"})')
            assert prom.query('count(DCGM_FI_DEV_GPU_UTIL{hostname!=""})')
            assert prom.query('sum(vllm:request_success_total{namespace="search-prod"})')
    finally:
        exporter.shutdown()
        exporter.server_close()
