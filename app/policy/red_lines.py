"""Can a latency histogram's buckets judge an SLA red line? Pure functions over bucket boundaries, no I/O.

A cumulative histogram only knows that P99 lies inside the bucket (lower, upper] holding the 99th
percentile's rank, so a red line is judged minute by minute only when it is one of the boundaries.
Policy validation warns about red lines that are not; boundaries and red lines compare as Decimals,
so 0.3 s is exactly 300 ms.
"""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal


def as_seconds(red_line_s: Decimal | float | int | str) -> Decimal:
    """A red line (or boundary) in seconds as an exact Decimal."""
    return red_line_s if isinstance(red_line_s, Decimal) else Decimal(str(red_line_s))


def resolvable(bounds: Sequence[Decimal], red_line_s: Decimal | float | int | str) -> bool:
    """True when the red line is one of the finite boundaries: every minute is then a breach or clear."""
    red = as_seconds(red_line_s)
    return any(b == red for b in bounds)


def nearest_boundaries(bounds: Sequence[Decimal], red_line_s: Decimal | float | int | str
                       ) -> tuple[Decimal | None, Decimal | None]:
    """The closest finite boundaries at or below and at or above the red line (None where there is none)."""
    red = as_seconds(red_line_s)
    below = max((b for b in bounds if b <= red), default=None)
    above = min((b for b in bounds if b >= red), default=None)
    return below, above


def red_line_finding(bounds: Sequence[Decimal], red_line_ms: Decimal | int | str) -> str | None:
    """Why a red line cannot be judged by these buckets, naming the nearest boundaries; None when it can."""
    red_s = Decimal(str(red_line_ms)) / 1000
    if not bounds or resolvable(bounds, red_s):
        return None
    below, above = nearest_boundaries(bounds, red_s)
    lower = below if below is not None else Decimal(0)
    inside = f"({_ms(lower)}, {_ms(above)}] ms" if above is not None else f"above {_ms(lower)} ms (the +Inf bucket)"
    nearest = " or ".join(f"{_ms(b)} ms" for b in (below, above) if b is not None)
    return (f"red line {_ms(red_s)} ms is not a bucket boundary of the latency histogram: minutes whose P99 falls in "
            f"the bucket {inside} are unresolved (neither breach nor clear, never billed); the nearest boundaries are "
            f"{nearest}")


def _ms(seconds: Decimal) -> str:
    return f"{(seconds * 1000).normalize():f}"
