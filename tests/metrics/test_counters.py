"""Counter increases from raw values: resets count from zero, nothing is extrapolated."""

from __future__ import annotations

from app.metrics.counters import hour_increase, step_increases
from app.metrics.presence import silent_nodes


def test_step_increases_handle_resets_births_and_missing_steps():
    assert step_increases({60: 10, 120: 15, 180: 4, 300: 9}, baseline=8) == {60: 2, 120: 5, 180: 4, 300: 5}
    assert step_increases({120: 3, 180: 7}, baseline=None) == {120: 3, 180: 4}  # born in the range
    assert step_increases({}, baseline=5) == {}


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
