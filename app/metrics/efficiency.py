"""Efficiency (SPEC section 4, reported, not billed): the one definition every page, API and export shows."""

from __future__ import annotations


def mean_activity(activity_sum: float, samples: int) -> float | None:
    """Mean engine activity over the occupied samples, to 4 decimals; None when nothing was measured (not zero)."""
    return round(activity_sum / samples, 4) if samples else None

