"""The bucket arithmetic behind SLA verdicts: a red line inside the P99 bucket is unresolved."""

from __future__ import annotations

from decimal import Decimal as D

from app.metrics.histograms import (
    BREACH,
    CLEAR,
    INF,
    UNRESOLVED,
    VLLM_E2E_LATENCY_S,
    boundaries,
    p99_bucket,
    parse_le,
    quantile,
    verdict,
)

VLLM = boundaries(VLLM_E2E_LATENCY_S + ("+Inf",))


def cumulative(counts: dict[str, float]) -> list[tuple[D, float]]:
    return [(parse_le(le), c) for le, c in counts.items()]


def test_le_values_parse_exactly_and_junk_is_dropped():
    assert parse_le("0.3") == D("0.3") and parse_le("+Inf") == INF and parse_le("1e+00") == D(1)
    assert parse_le("NaN") is None and parse_le("abc") is None and parse_le("-1") is None
    assert boundaries(["+Inf", "0.5", "0.3", "x", "0.5"]) == (D("0.3"), D("0.5"))


def test_the_bucket_holding_p99_decides_breach_clear_or_unresolved():
    fast = cumulative({"0.3": 1000, "0.5": 1000, "0.8": 1000, "+Inf": 1000})
    slow = cumulative({"0.3": 900, "0.5": 900, "0.8": 1000, "+Inf": 1000})
    assert p99_bucket(fast) == (D(0), D("0.3")) and p99_bucket(slow) == (D("0.5"), D("0.8"))
    assert verdict(p99_bucket(fast), D("0.3")) == CLEAR
    assert verdict(p99_bucket(fast), D("0.25")) == UNRESOLVED  # interpolation would say 0.297 s: a breach
    assert quantile(fast) == 0.297
    assert verdict(p99_bucket(slow), D("0.3")) == BREACH and verdict(p99_bucket(slow), D("0.5")) == BREACH
    assert verdict(p99_bucket(slow), D("0.6")) == UNRESOLVED and verdict(p99_bucket(slow), D("0.8")) == CLEAR


def test_the_inf_bucket_and_empty_histograms():
    overflow = cumulative({"0.3": 0, "60.0": 0, "+Inf": 5})
    assert p99_bucket(overflow) == (D("60.0"), INF) and quantile(overflow) == 60.0
    assert verdict(p99_bucket(overflow), D("0.3")) == BREACH and verdict(p99_bucket(overflow), 100) == UNRESOLVED
    assert p99_bucket(cumulative({"0.3": 0, "+Inf": 0})) is None and quantile([]) is None
    assert p99_bucket(cumulative({"0.3": 5})) is None  # no +Inf bucket: not a histogram
