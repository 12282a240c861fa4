"""Efficiency (SPEC section 4, reported, not billed): the one definition every page, API and export shows."""

from __future__ import annotations


def mean_activity(activity_sum: float, samples: int) -> float | None:
    """Mean engine activity over the occupied samples; None when nothing was measured (not zero).

    Not rounded: each presentation rounds this exact ratio once (pages and PDFs to a percentage
    with 1 decimal, the JSON API to 4 decimals). Rounding here too made a tenant's summary
    (rounded twice) disagree with its per-class table (rounded once), 89.0 % against 89.1 %."""
    return activity_sum / samples if samples else None

