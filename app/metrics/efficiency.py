"""Efficiency (SPEC section 4, reported, not billed): the one definition every page, API and export shows."""

from __future__ import annotations


def mean_activity(activity_sum: float, samples: int) -> float | None:
    """Mean engine activity over the occupied samples, to 4 decimals; None when nothing was measured (not zero)."""
    return round(activity_sum / samples, 4) if samples else None


def issued_hour_weighted(pairs: list[tuple[float, float]]) -> float | None:
    """The figure invoices showed before usage rows kept their sample counts: GPU-hour weighted.

    Only for rows rated before migration 0008 (efficiency stored, sample count 0): a finalized invoice
    is a document already issued, and its exports must keep matching the hashes stored at closing.
    `pairs` are (efficiency, GPU-hours) of the measured rows.
    """
    weight = sum(hours for _, hours in pairs)
    return round(sum(eff * hours for eff, hours in pairs) / weight, 4) if weight else None
