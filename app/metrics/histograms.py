"""What a latency histogram's buckets can say about P99 against a red line. Pure functions, no I/O.

A cumulative histogram only knows that P99 lies somewhere inside the bucket (lower, upper] that
holds the 99th-percentile rank. A minute is a breach when the whole bucket is above the red line
(lower >= red line), clear when it is below (upper <= red line), and *unresolved* when the red line
falls strictly inside it: interpolation would invent an answer there, so it is neither billed nor
hidden. Boundaries are compared as Decimals of the `le` text, so 0.3 s is exactly 300 ms.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from decimal import Decimal, InvalidOperation

from app.policy.red_lines import as_seconds

INF = Decimal("Infinity")
BREACH, CLEAR, UNRESOLVED = "breach", "clear", "unresolved"
# vLLM's buckets for vllm:e2e_request_latency_seconds (vllm/v1/metrics/loggers.py), in seconds.
VLLM_E2E_LATENCY_S = ("0.3", "0.5", "0.8", "1.0", "1.5", "2.0", "2.5", "5.0", "10.0", "15.0", "20.0", "30.0",
                      "40.0", "50.0", "60.0", "120.0", "240.0", "480.0", "960.0", "1920.0", "7680.0")


def parse_le(text: str) -> Decimal | None:
    """An `le` label value as a Decimal (+Inf included); None when it is not a number."""
    try:
        value = INF if text.strip() in ("+Inf", "Inf", "+inf", "inf") else Decimal(text.strip())
    except (InvalidOperation, AttributeError):
        return None
    return None if value.is_nan() or value < 0 else value


def boundaries(les: Iterable[str]) -> tuple[Decimal, ...]:
    """The finite, distinct bucket boundaries among `le` values, ascending (unparseable ones dropped)."""
    parsed = (parse_le(le) for le in les)
    return tuple(sorted({b for b in parsed if b is not None and b.is_finite()}))


def p99_bucket(cumulative: Sequence[tuple[Decimal, float]], q: float = 0.99) -> tuple[Decimal, Decimal] | None:
    """(lower, upper] of the bucket holding the q-quantile's rank; None without observations.

    `cumulative` is [(upper bound, cumulative count)], +Inf last, as `histogram_quantile` reads it.
    """
    ordered = sorted(cumulative)
    if not ordered or ordered[-1][0] != INF:
        return None
    total = ordered[-1][1]
    if not total > 0:
        return None
    rank = q * total
    lower = Decimal(0)
    for upper, count in ordered:
        if count >= rank:
            return lower, upper
        lower = upper
    return lower, INF


def quantile(cumulative: Sequence[tuple[Decimal, float]], q: float = 0.99) -> float | None:
    """Prometheus's `histogram_quantile` interpolation (the +Inf bucket answers its lower bound)."""
    ordered = sorted(cumulative)
    bucket = p99_bucket(ordered, q)
    if bucket is None:
        return None
    lower, upper = bucket
    if upper == INF:
        return float(lower)
    rank = q * ordered[-1][1]
    below = next((c for u, c in reversed(ordered) if u <= lower), 0.0) if lower > 0 else 0.0
    count = next(c for u, c in ordered if u == upper)
    if count == below:
        return float(upper)
    return float(lower) + (float(upper) - float(lower)) * (rank - below) / (count - below)


def verdict(bucket: tuple[Decimal, Decimal], red_line_s: Decimal | float | int | str) -> str:
    """BREACH when the whole bucket lies above the red line, CLEAR when below, else UNRESOLVED."""
    lower, upper = bucket
    red = as_seconds(red_line_s)
    if lower >= red:
        return BREACH
    if upper <= red:
        return CLEAR
    return UNRESOLVED
