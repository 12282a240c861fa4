"""Exact decimal text for billed quantities and unit rates, shared by the pages and the PDF."""

from __future__ import annotations

from decimal import Decimal
from typing import Any


def exact_number(value: Any, *, trim: bool = True, separators: bool = True) -> str:
    """`value` never rounded, so that quantity x rate can be checked against the amount to the cent; `trim` drops
    trailing zeros (quantities; rates keep the decimals they were given), `separators` adds thousands commas."""
    if value is None:
        return "–"
    number = Decimal(value)
    if trim:
        number = number.normalize() if number != number.to_integral_value() else number.quantize(Decimal(1))
    return f"{number:,f}" if separators else f"{number:f}"
