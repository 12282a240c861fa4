"""Through a real Prometheus and VictoriaMetrics: a node whose exporter goes silent makes a gap, not a zero-use hour;
an energy counter that resets mid-hour is read with `increase` semantics, not undercounted."""

from __future__ import annotations

from decimal import Decimal

import pytest
from sqlmodel import select

from app.core.timeutil import from_epoch
from app.metrics.ingest import ingest_hours
from app.metrics.models import PoolHourModel, UsageRollup
from app.metrics.prometheus_source import PrometheusSource
from tests.support.ingest import HOUR, add_policy, status
from tests.support.policies import A100, mixed_policy
from tests.support.prometheus import PrometheusServer, openmetrics
from tests.support.scenario import H
from tests.support.victoria import VictoriaMetricsServer

STEP = 30
UTIL = "DCGM_FI_DEV_GPU_UTIL"
# gpu-a100-01 (2 GPUs) reports throughout; gpu-a100-02 (1 GPU) goes silent for hour H+1; in hour
# H+2 nothing reports at all (an empty answer after hours with GPUs).
TIMES = list(range(H - 2 * 3600 + STEP, H + 3 * 3600 + 1, STEP))
# GPU-A0's energy counter: +1e6 mJ a sample; the driver reloads at H+1785 (counter back to 0), so the
# sample at H+1800 reads the 0.5e6 mJ used since. Hour H used 59e6 before the reset (from H to the
# last sample before it) and 60.5e6 after: increase semantics give 119.5e6 mJ.
RESET = H + 1785


def silent(host: str, t: int) -> bool:
    return t > H + 7200 or (host == "gpu-a100-02" and H + 3600 < t <= H + 7200)


def energy(t: int) -> float:
    if t <= RESET:
        return 5e12 + 1e6 * (t - TIMES[0]) / STEP
    return 0.5e6 + 1e6 * (t - H - 1800) / STEP


def history() -> str:
    gpus = [("gpu-a100-01", "GPU-A0", "0"), ("gpu-a100-01", "GPU-A1", "1"), ("gpu-a100-02", "GPU-B0", "0")]
    util = []
    for host, uuid, gpu in gpus:
        labels = {"gpu": gpu, "UUID": uuid, "modelName": A100, "Hostname": host,
                  "namespace": "vision-train", "pod": f"train-{uuid.lower()}", "container": "main"}
        util.append((labels, [(t, 90.0) for t in TIMES if not silent(host, t)]))
    counter = [({"gpu": "0", "UUID": "GPU-A0", "modelName": A100, "Hostname": "gpu-a100-01"},
                [(t, energy(t)) for t in TIMES if not silent("gpu-a100-01", t)])]
    return openmetrics([(UTIL, "gauge", util), ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "gauge", counter)])


@pytest.fixture(scope="module")
def engines(tmp_path_factory) -> dict[str, str]:
    """The same blocks served by Prometheus and by VictoriaMetrics (imported before Prometheus opens them)."""
    root = tmp_path_factory.mktemp("outage")
    prom = PrometheusServer.backfilled(root / "prom", history())
    with VictoriaMetricsServer(root / "vm") as vm:
        vm.load_prometheus_blocks(prom.data)
        with prom:
            yield {"prometheus": prom.url, "victoria": vm.url}


@pytest.fixture(params=["prometheus", "victoria"])
def url(request, engines) -> str:
    return engines[request.param]


def test_a_silent_node_and_an_empty_answer_are_gaps_not_zero_use(session, url):
    add_policy(session, mixed_policy(sla=[]))
    source = PrometheusSource(url, scrape_interval_s=STEP, timeout_s=10)
    now = from_epoch(H + 10 * 3600)
    report = ingest_hours(session=session, source=source, start=from_epoch(H), end=from_epoch(H) + 3 * HOUR,
                          scrape_interval_s=STEP, now=now)
    assert report.ok == [from_epoch(H)]
    assert report.gaps == [from_epoch(H + 3600), from_epoch(H + 7200)]
    outage = status(session, H + 3600)
    assert outage.status == "gap" and outage.attempts == 1 and outage.next_retry_at > now
    assert "gpu-a100-02" in outage.last_error and "gpu-a100-01" not in outage.last_error
    assert "gpu-a100-01, gpu-a100-02" in status(session, H + 7200).last_error
    # Nothing of the gap hours is stored: no zero-use rows for the lost node or the empty hour.
    for hour in (H + 3600, H + 7200):
        assert not session.exec(select(UsageRollup).where(UsageRollup.hour == from_epoch(hour))).all()


def test_an_energy_counter_reset_is_not_undercounted(session, url):
    add_policy(session, mixed_policy(sla=[]))
    source = PrometheusSource(url, scrape_interval_s=STEP, timeout_s=10)
    batch = source.fetch(start=from_epoch(H - 3600), end=from_epoch(H + 3600), policy=mixed_policy(sla=[]))
    (gpu,) = batch.energy
    assert gpu.energy_mj[H] == 120e6  # an ordinary hour: 120 samples of 1e6 mJ
    assert gpu.energy_mj[H + 3600] == 119.5e6
    ingest_hours(session=session, source=source, start=from_epoch(H), end=from_epoch(H) + HOUR, scrape_interval_s=STEP)
    row = session.exec(select(PoolHourModel).where(PoolHourModel.hour == from_epoch(H))).one()
    assert (row.gpus, row.measured_gpus, row.measured_kwh) == (3, 1, Decimal("0.033194444"))  # 119.5e6 mJ in kWh
