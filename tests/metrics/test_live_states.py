"""Pool states on the live fleet, each derived from what is measured now (units occupied, the SLA services'
requests, the pool's reservation), and P99 read as a number with its bucket: one reading per state, built
as dcgm-exporter labels its series."""

from __future__ import annotations

from decimal import Decimal

import pytest

from app.metrics.live import GPU_UTIL, LiveReading, ServiceNow, live_fleet
from tests.support.policies import mixed_policy

AT = 1_764_547_200 + 20 * 60
# colocation: 180 s window / 3 s interval = 60 requests make inference active
ACTIVE, QUIET = 100.0, 5.0


def util(host: str, gpu: int, namespace: str = "", pod: str = "", value: float = 80.0):
    labels = {"__name__": GPU_UTIL, "Hostname": host, "UUID": f"GPU-{host}-{gpu}", "gpu": str(gpu),
              "modelName": "NVIDIA A100-SXM4-80GB"}
    if pod:
        labels.update(namespace=namespace, pod=pod, container="main")
    return (labels, AT - 10, value if pod else 0.0)


def reading(series, requests: float | None = None) -> LiveReading:
    services = {} if requests is None else {"search-chat": ServiceNow(requests_in_window=requests)}
    return LiveReading(at=AT, series=series, services=services)


def pools(fleet) -> dict:
    return {p.name: p for p in fleet.pools}


FREE_RTX = [util("gpu-4090-01", 0)]
TRAINING_RTX = [util("gpu-4090-01", 0, "vision-train", "train-0")]
FREE_A100 = [util("gpu-a100-01", 0), util("gpu-a100-01", 1)]
TRAINING_A100 = [util("gpu-a100-01", 0, "vision-train", "train-0"), util("gpu-a100-01", 1)]


def test_a_pool_without_reservation_and_nothing_occupied_is_idle_never_busy():
    """The finding: rtx reserves nothing and names no SLA service, 0 of its units held: it was "busy · inference active"."""
    rtx = pools(live_fleet(reading(FREE_RTX), mixed_policy()))["rtx"]
    assert (rtx.occupied, rtx.units) == (0, 1)
    assert rtx.state.key == "idle" and rtx.state.label == "Idle"
    assert "no unit is occupied" in rtx.state.meaning


def test_a_pool_without_reservation_in_use_is_billed_at_the_full_rate():
    rtx = pools(live_fleet(reading(TRAINING_RTX), mixed_policy()))["rtx"]
    assert rtx.occupied == 1 and rtx.dark is False and rtx.inference_active is None
    assert rtx.state.key == "no-reservation" and "full rate" in rtx.state.meaning


def test_inference_serving_when_a_service_takes_requests_and_units_are_held():
    pool = pools(live_fleet(reading(TRAINING_A100, requests=ACTIVE), mixed_policy()))["mixed-a100"]
    assert pool.inference_active is True and pool.occupied == 1
    assert pool.state.key == "serving" and pool.state.label == "Inference serving"


def test_dark_time_when_every_service_is_quiet():
    pool = pools(live_fleet(reading(TRAINING_A100, requests=QUIET), mixed_policy()))["mixed-a100"]
    assert pool.inference_active is False and pool.dark is True
    assert pool.state.key == "dark" and "dark-time rate (× 0.6)" in pool.state.meaning
    assert "SLA services are idle" in pool.state.meaning


def test_dark_time_when_the_pool_reserves_capacity_without_an_sla_service():
    pool = pools(live_fleet(reading(TRAINING_A100), mixed_policy(sla=[])))["mixed-a100"]
    assert pool.sla_services == 0 and pool.reserved_fraction == Decimal("0.30")
    assert pool.state.key == "dark" and "names no SLA service" in pool.state.meaning


@pytest.mark.parametrize("requests", [ACTIVE, QUIET, None])
def test_no_unit_occupied_is_idle_whatever_the_traffic(requests):
    pool = pools(live_fleet(reading(FREE_A100, requests=requests), mixed_policy()))["mixed-a100"]
    assert pool.occupied == 0 and pool.state.key == "idle"
    assert ("report requests" in pool.state.meaning) is (requests == ACTIVE)


def test_nodes_no_pool_names_are_unpooled():
    pool = pools(live_fleet(reading([util("gpu-x-99", 0, "vision-train", "train-0")]), mixed_policy()))["unpooled"]
    assert pool.dark is None and pool.state.key == "unpooled" and "never priced" in pool.state.meaning


@pytest.mark.parametrize("bucket, p99, footnote", [
    ((Decimal(0), Decimal("0.3")), "≤ 300 ms", "(0 ms, 300 ms]"),
    ((Decimal("0.3"), Decimal("0.5")), "≤ 500 ms", "(300 ms, 500 ms]"),
    ((Decimal("0.0025"), Decimal("0.005")), "≤ 5 ms", "(2.5 ms, 5 ms]"),
    ((Decimal(5), Decimal("Infinity")), "> 5,000 ms", "(5,000 ms, ∞)"),
])
def test_p99_is_a_number_with_its_bucket_as_the_footnote(bucket, p99, footnote):
    lower, upper = bucket
    # cumulative counts: none at or below the lower bound, all 100 requests by the upper one
    cumulative = ([(lower, 0.0)] if lower else []) + ([(upper, 100.0)] if upper.is_finite() else [])
    cumulative.append((Decimal("Infinity"), 100.0))
    live = LiveReading(at=AT, series=TRAINING_A100, services={"search-chat": ServiceNow(100.0, cumulative)})
    (service,) = live_fleet(live, mixed_policy()).services
    assert service.bucket == bucket
    assert (service.p99_text, service.bucket_text) == (p99, footnote)
    expected = "within the red line" if bucket[1] <= Decimal("0.3") else "over the red line"
    assert service.verdict_text == expected and "within in" not in service.verdict_text
