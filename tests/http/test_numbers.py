"""Exact decimal text for billed quantities and rates: never rounded."""

from __future__ import annotations

from decimal import Decimal

from app.http.numbers import exact_number


def test_quantities_drop_trailing_zeros_and_rates_keep_their_decimals():
    assert exact_number(Decimal("1030.672000")) == "1,030.672"
    assert exact_number(Decimal("5.000000")) == "5"
    assert exact_number(Decimal("0.000001")) == "0.000001"
    assert exact_number(Decimal("1.3000"), trim=False) == "1.3000"
    assert exact_number(Decimal("1234.50"), trim=False, separators=False) == "1234.50"
    assert exact_number(Decimal("-2.000000")) == "-2"
    assert exact_number(None) == "–"
