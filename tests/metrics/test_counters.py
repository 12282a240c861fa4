"""Counter increases from raw values: resets count from zero, nothing is extrapolated."""

from __future__ import annotations

import httpx
import pytest

from app.metrics.counters import hour_increase
from app.metrics.presence import silent_nodes
from app.metrics.serving import minute_increases
from tests.support.prometheus import PrometheusServer, openmetrics

T0 = 1_790_002_800  # an hour boundary
MINUTES = range(T0 + 600, T0 + 3600 + 1, 60)


def _counter(times, value):
    return [(t, value(t)) for t in times]


# A series scraped every 15 s that resets at T0+1210 and is silent for 3 minutes from T0+2000; one every
# 30 s born at T0+1500; one every 60 s whose samples fall on minute edges.
SERIES = {
    "a": _counter([t for t in range(T0, T0 + 3600, 15) if not T0 + 2000 <= t < T0 + 2180],
                  lambda t: (t - T0) // 15 * 3 + 7 if t < T0 + 1210 else (t - T0 - 1210) // 15 + 1),
    "b": _counter(range(T0 + 1500, T0 + 3600, 30), lambda t: (t - T0 - 1500) // 30 * 2),
    "c": _counter(range(T0, T0 + 3601, 60), lambda t: (t - T0) // 60 * 5 + 100),
}


def _reference(points, m):
    """A series' increase into the minute ending at m, from its raw samples (the rule minute_increases states)."""
    now = [v for t, v in points if m - 60 < t <= m]
    before = [v for t, v in points if m - 660 < t <= m - 60]
    if not now:
        return 0
    if not before or now[-1] < before[-1]:
        return now[-1]
    return now[-1] - before[-1]


@pytest.fixture(scope="module")
def counters(tmp_path_factory):
    text = openmetrics([("demo_requests", "counter", [({"pod": name}, points) for name, points in SERIES.items()])])
    with PrometheusServer.backfilled(tmp_path_factory.mktemp("counters"), text) as prom:
        yield prom


def test_minute_increases_in_the_engine_equal_the_raw_samples_rule(counters):
    body = httpx.get(counters.url + "/api/v1/query_range", timeout=30, params={
        "query": minute_increases("demo_requests_total", ""), "start": MINUTES[0], "end": MINUTES[-1], "step": 60,
    }).json()
    assert body["status"] == "success", body
    got = {int(t): float(v) for t, v in body["data"]["result"][0]["values"]}
    expected = {m: sum(_reference(points, m) for points in SERIES.values()) for m in MINUTES}
    assert {m: got.get(m, 0.0) for m in MINUTES} == expected
    # Resets, the silent spell and the birth all happened: the rule was exercised, not just plain growth.
    assert expected[T0 + 1260] < expected[T0 + 1200] and got[T0 + 1560] == expected[T0 + 1560]


def test_hour_increase_without_extrapolation():
    assert hour_increase(before=100, lowest=101, highest=160, last=160, resets=0) == 60
    assert hour_increase(before=100, lowest=2, highest=50, last=50, resets=0) == 50  # reset between the hours
    assert hour_increase(before=100, lowest=1, highest=130, last=40, resets=1) == 70  # 30 before, 40 after
    assert hour_increase(before=None, lowest=20, highest=80, last=80, resets=0) == 60  # appeared this hour
    assert hour_increase(before=None, lowest=0, highest=80, last=5, resets=1) is None  # cannot tell: fall back
    assert hour_increase(before=100, lowest=0, highest=130, last=5, resets=2) is None


def test_a_node_is_expected_only_if_it_was_reporting_at_its_last_hour_end():
    reported = {3600: {"n1": {"a", "b"}, "n2": {"c"}, "drained": {"d"}}, 7200: {"n1": {"a"}},
                10800: {"exporter-pod-x": {"a", "b"}}}
    alive = {3600: {"n1": {"a", "b"}, "n2": {"c"}}, 7200: {"n1": {"a"}}}  # "drained" left mid-hour
    assert silent_nodes(reported, alive, 7200) == ["n2"]
    assert silent_nodes(reported, alive, 10800) == ["n2"]  # still out; n1's GPUs report under a new Hostname
    assert silent_nodes(reported, alive, 10800, lookback_hours=1) == []
    assert silent_nodes(reported, alive, 14400 + 3 * 3600) == []  # beyond the look-back: no longer expected
