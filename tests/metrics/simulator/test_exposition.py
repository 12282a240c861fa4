"""The live exposition: Prometheus text format 0.0.4 with dcgm-exporter's exact label names."""

from __future__ import annotations

import urllib.error
import urllib.request
from datetime import timedelta

import pytest
from prometheus_client.parser import text_string_to_metric_families

from app.metrics.simulator import serve_exporter
from tests.support.simulator import DAY

DEVICE_LABELS = {"gpu", "UUID", "pci_bus_id", "device", "modelName", "DCGM_FI_DRIVER_VERSION",
                 "pod", "namespace", "container"}
MIG_LABELS = {"GPU_I_ID", "GPU_I_PROFILE"}


def parse(text: str) -> dict[str, list]:
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


@pytest.fixture(scope="module")
def families(sim):
    return parse(sim.exposition(DAY + timedelta(hours=4)))


def test_device_series_carry_exactly_the_spec_labels(families):
    for name in ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE",
                 "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "DCGM_FI_DEV_GPU_TEMP"):
        assert families[name], name
        for sample in families[name]:
            labels = set(sample.labels)
            host = labels & {"Hostname", "hostname"}
            assert len(host) == 1, sample
            extra = labels - host - DEVICE_LABELS - MIG_LABELS
            assert not extra, (name, extra)
            assert labels & MIG_LABELS in (set(), MIG_LABELS)
            assert DEVICE_LABELS - {"pod", "namespace", "container"} <= labels


def test_both_host_spellings_mig_and_models(families):
    util = families["DCGM_FI_DEV_GPU_UTIL"]
    prof = families["DCGM_FI_PROF_GR_ENGINE_ACTIVE"]
    assert any("Hostname" in s.labels for s in util) and any("hostname" in s.labels for s in util)
    mig = [s for s in prof if "GPU_I_ID" in s.labels]
    assert {s.labels["GPU_I_PROFILE"] for s in mig} == {"3g.40gb", "7g.80gb"}
    # MIG instances carry their parent's UUID: two 3g instances share one.
    uuids = [s.labels["UUID"] for s in mig if s.labels["GPU_I_PROFILE"] == "3g.40gb"]
    assert len(uuids) == 2 * len(set(uuids))
    assert not any("GPU_I_ID" in s.labels for s in util)  # GPU_UTIL is whole GPUs only
    models = {s.labels["modelName"] for s in util}
    assert models == {"NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3", "NVIDIA GeForce RTX 4090"}
    assert "NVIDIA GeForce RTX 4090" not in {s.labels["modelName"] for s in prof}
    assert all(0 <= s.value <= 1 for s in prof) and all(0 <= s.value <= 100 for s in util)


def test_vllm_series_select_by_namespace(families):
    success = families["vllm:request_success"]
    assert {s.labels["namespace"] for s in success} == {"search-prod", "assist-prod"}
    buckets = [s for s in families["vllm:e2e_request_latency_seconds"] if s.name.endswith("_bucket")]
    # vLLM's own boundaries for vllm:e2e_request_latency_seconds, printed as prometheus_client prints them.
    assert {s.labels["le"] for s in buckets} == {
        "0.3", "0.5", "0.8", "1.0", "1.5", "2.0", "2.5", "5.0", "10.0", "15.0", "20.0", "30.0", "40.0", "50.0",
        "60.0", "120.0", "240.0", "480.0", "960.0", "1920.0", "7680.0", "+Inf"}


def test_time_sliced_gpu_has_two_series_differing_by_pod(sim):
    shared = next(u for u in sim.topology.units if u.role.kind == "shared")
    occ = sim.workload.unit_slots(shared.index, int(DAY.timestamp()) // 86400)
    k = next(k for k, pods in enumerate(occ) if len(pods) == 2)
    at = DAY + timedelta(minutes=k + 1)
    series = [s for s in parse(sim.exposition(at))["DCGM_FI_DEV_GPU_UTIL"] if s.labels["UUID"] == shared.gpu.uuid]
    assert len(series) == 2
    assert series[0].labels["pod"] != series[1].labels["pod"]
    assert {k: v for k, v in series[0].labels.items() if k not in ("pod", "namespace", "container")} == \
        {k: v for k, v in series[1].labels.items() if k not in ("pod", "namespace", "container")}


def test_exporter_serves_metrics_over_http(sim):
    server = serve_exporter(sim, port=0)
    try:
        host, port = server.server_address[:2]
        with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10) as response:
            assert response.status == 200
            assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
            body = response.read().decode()
        assert parse(body)["DCGM_FI_DEV_GPU_UTIL"]
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(f"http://{host}:{port}/other", timeout=10)
        assert missing.value.code == 404
    finally:
        server.shutdown()
        server.server_close()
