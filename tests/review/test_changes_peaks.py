"""Measured peak GPU memory from a real Prometheus (backfilled DCGM_FI_DEV_FB_USED) feeds validation and the preview."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from app.policy.validation import validate
from app.review import impact
from tests.support.prometheus import PrometheusServer, openmetrics
from tests.support.review import example_document

NOW = datetime(2026, 11, 30, 0, tzinfo=UTC)
T0 = NOW.timestamp() - 2 * 86400


def fb_used(gpu: str, namespace: str, points) -> tuple[dict, list]:
    labels = {"Hostname": "gpu-a100-01", "gpu": gpu, "modelName": "NVIDIA A100-SXM4-80GB", "namespace": namespace,
              "pod": namespace + "-0", "container": "main"}
    return labels, points


@pytest.mark.prometheus  # starts its own server in the test body
def test_peaks_from_prometheus_sum_gpus_at_the_same_minute(tmp_path):
    minutes = range(0, 600)
    # search-prod on two GPUs: together at most 300000 MiB (minute 100); apart each peaks higher alone.
    gpu0 = [(T0 + 60 * m, 200_000.0 if m == 100 else (240_000.0 if m == 300 else 1000.0)) for m in minutes]
    gpu1 = [(T0 + 60 * m, 100_000.0 if m == 100 else 1000.0) for m in minutes]
    train = [(T0 + 60 * m, 50_000.0) for m in minutes]
    text = openmetrics([("DCGM_FI_DEV_FB_USED", "gauge", [
        fb_used("0", "search-prod", gpu0), fb_used("1", "search-prod", gpu1), fb_used("2", "vision-train", train),
        fb_used("3", "unknown-ns", train)])])
    doc = example_document()
    with PrometheusServer.backfilled(tmp_path, text) as prom:
        peaks = impact.measured_peaks_from_prometheus(prom.url, doc, at=NOW)
    assert peaks == {"search": 300_000.0, "vision": 50_000.0}
    # 30% of 16 A100-80GB = 393216 MiB reserved for search: below 1.2 x 400000, an error at the reservation.
    errors = validate(doc, measured_peak_mib={"search": 400_000.0})
    assert any(e.path == "pools[mixed-a100].reservations.search" and e.severity == "error" for e in errors)
    assert not any(e.severity == "error" for e in validate(doc, measured_peak_mib=peaks))
    memory = impact.capacity_impact(None, doc, measured_peaks=peaks)["memory"]
    assert memory == [{"tenant": "search", "reserved_mib": 393216, "peak_mib": 300000, "required_mib": 360000, "ok": True}]


def test_unreachable_prometheus_means_not_measured():
    assert impact.measured_peaks_from_prometheus("http://127.0.0.1:9", example_document(), at=NOW, timeout_s=1) is None
