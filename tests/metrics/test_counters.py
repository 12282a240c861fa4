"""Counter increases from raw values: resets count from zero, nothing is extrapolated."""

from __future__ import annotations

from collections import defaultdict

import httpx
import pytest

from app.metrics.counters import hour_increase
from app.metrics.presence import silent_nodes
from app.metrics.serving import Countdown, increase_plan
from tests.support.prometheus import PrometheusServer, openmetrics
from tests.support.victoria import VictoriaMetricsServer

T0 = 1_790_002_800  # an hour boundary
MINUTES = range(T0 + 600, T0 + 7200 + 1, 60)


def _counter(times, value):
    return [(t, value(t)) for t in times]


SERIES = {
    # Every 15 s; resets at T0+1210 (inside a minute, after growth in it) and is silent for 3 minutes from T0+2000.
    "a": _counter([t for t in range(T0, T0 + 7200, 15) if not T0 + 2000 <= t < T0 + 2180],
                  lambda t: (t - T0) // 15 * 3 + 7 if t < T0 + 1210 else (t - T0 - 1210) // 15 + 1),
    # Born at T0+1500, every 30 s.
    "b": _counter(range(T0 + 1500, T0 + 7200, 30), lambda t: (t - T0 - 1500) // 30 * 2),
    # Every 60 s on minute edges, silent for exactly 11 minutes after T0+1800 (its next value counts as born).
    "c": _counter([t for t in range(T0, T0 + 7201, 60) if not T0 + 1800 < t < T0 + 2460], lambda t: (t - T0) // 60 * 5 + 100),
    # Disappears for good at T0+2500 (its last value stays in the ten-minute look-back, adding nothing).
    "d": _counter(range(T0 + 7, T0 + 2500, 30), lambda t: (t - T0) // 30 + 50),
    # A gap of 25 minutes (longer than the look-back): born again at T0+4000 with a value above the old one.
    "e": _counter([t for t in range(T0, T0 + 7200, 20) if not T0 + 2500 <= t < T0 + 4000], lambda t: (t - T0) // 20 * 4),
    # Two resets in one eleven-minute window (T0+5130 and T0+5400), and one whose new value stays above the old.
    "f": _counter(range(T0 + 3, T0 + 7200, 30),
                  lambda t: 900 + (t - T0) // 30 if t < T0 + 5130 else (t - T0 - 5130) // 30 + 3 if t < T0 + 5400
                  else 1200 + (t - T0) // 30 if t >= T0 + 6000 else (t - T0 - 5400) // 30),
}


def _reference(points, m):
    """A series' increase into the minute ending at m, from its raw samples (the rule `increase_plan` states)."""
    now = [v for t, v in points if m - 60 < t <= m]
    before = [v for t, v in points if m - 660 < t <= m - 60]
    if not now:
        return 0
    if not before or now[-1] < before[-1]:
        return now[-1]
    return now[-1] - before[-1]


@pytest.fixture(scope="module")
def engines(tmp_path_factory):
    """(Prometheus URL, VictoriaMetrics URL) holding the same counters."""
    root = tmp_path_factory.mktemp("counters")
    text = openmetrics([("demo_requests", "counter", [({"pod": name}, points) for name, points in SERIES.items()])])
    prom = PrometheusServer.backfilled(root / "prom", text)
    with VictoriaMetricsServer(root / "vm") as vm:
        vm.load_prometheus_blocks(prom.data)
        with prom:
            yield {"prometheus": prom.url, "victoria": vm.url}


def _run(url: str, plan: list) -> None:
    """Issue a plan's queries one by one, follow-ups included, as the Prometheus source does."""
    while plan:
        query, start, end, step, handle = plan.pop(0)
        body = httpx.get(url + "/api/v1/query_range", timeout=30,
                         params={"query": query, "start": start, "end": end, "step": step}).json()
        assert body["status"] == "success", body
        plan += handle(body["data"]["result"]) or []


@pytest.mark.prometheus
@pytest.mark.parametrize("engine", ["prometheus", "victoria"])
def test_minute_increases_in_the_engine_equal_the_raw_samples_rule(engines, engine):
    got: dict[int, float] = defaultdict(float)
    finished = []
    countdown = Countdown(lambda: finished.append(True))
    plan = []
    for a in range(MINUTES[0], MINUTES[-1] + 1, 3600):  # two pieces, as a long fetch is cut
        plan += increase_plan("demo_requests_total", "", a, min(a + 3540, MINUTES[-1]), lambda _: got, countdown)
    _run(engines[engine], plan)
    expected = {m: sum(_reference(points, m) for points in SERIES.values()) for m in MINUTES}
    assert finished == [True]
    assert {m: got.get(m, 0.0) for m in MINUTES} == expected
    # Every case happened: a reset (a), births (b; c after 11 and e after 25 silent minutes), a series gone
    # for good (d), two resets in one eleven-minute window and a jump up after a silence (f).
    parts = {name: {m: _reference(points, m) for m in MINUTES} for name, points in SERIES.items()}
    assert [parts["a"][T0 + 1260], parts["b"][T0 + 1560], parts["c"][T0 + 2460], parts["d"][T0 + 2580],
            parts["e"][T0 + 4020], parts["f"][T0 + 5160], parts["f"][T0 + 5460], parts["f"][T0 + 6060]] == \
        [4, 4, 305, 0, 804, 3, 1, 1382]


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
