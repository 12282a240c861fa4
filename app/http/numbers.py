"""Number text shared by the pages (Jinja filters) and the PDFs: money, GPU-hours and exact figures.

One place, so a page and the document it offers for download print a figure the same way (thousands
separators, fixed decimals). CSV and FOCUS keep the plain exact figures: they are read by machines.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

MISSING = "–"


def exact_number(value: Any, *, trim: bool = True, separators: bool = True) -> str:
    """`value` never rounded, so that quantity x rate can be checked against the amount to the cent; `trim` drops
    trailing zeros (quantities; rates keep the decimals they were given), `separators` adds thousands commas."""
    if value is None:
        return MISSING
    number = Decimal(value)
    if trim:
        number = number.normalize() if number != number.to_integral_value() else number.quantize(Decimal(1))
    return f"{number:,f}" if separators else f"{number:f}"


def money(value: Any, currency: str = "", *, missing: str = MISSING) -> str:
    """Money: 2 decimals, thousands separators, and the currency code when one is given."""
    if value is None:
        return missing
    text = f"{Decimal(value):,.2f}"
    return f"{text} {currency}" if currency else text


def hours(value: Any, digits: int = 1, *, missing: str = MISSING) -> str:
    """GPU-hours: `digits` decimals (pages 1, documents 2) with thousands separators."""
    if value is None:
        return missing
    return f"{Decimal(value):,.{digits}f}"
