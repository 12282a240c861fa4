"""Per-day drill-down of an invoice line (issue 12): the line re-derived day by day from the hourly rollups.

A GPU-hour line sums hours of different rates, so its one rate is an effective rate. Here each day
of the billing timezone is rated on its own, unrounded (rating is exact below 1e-20, so the days add
up to the line's exact sum), and the days are rounded **cumulatively**: a day's amount is
round(sum up to that day) - round(sum before it), half-even to the cent (quantities likewise to
6 decimals). The days therefore add up to the stored line to the cent, and each day's rate is the
checkable rate of `invoice_lines.unit_rate`. When the rollups changed after the period was rated
(re-ingested hours), the days no longer add up and the drill-down says so instead of pretending.
"""

from __future__ import annotations

from datetime import date, datetime, timedelta
from decimal import ROUND_HALF_EVEN, Decimal

from sqlmodel import Session

from app.billing.invoice_lines import HOURLY_KINDS, unit_rate
from app.billing.loader import DocumentCache, load_hours
from app.billing.models import BillingPeriod, ChargeLineRecord, LineSource
from app.billing.pricing import cents
from app.billing.rating import rate_period
from app.billing.types import QUANTITY
from app.core.errors import NotFound
from app.core.settings import get_settings
from app.core.timeutil import aware, epoch

ZERO = Decimal(0)


def billing_days(period: BillingPeriod) -> list[tuple[date, datetime, datetime]]:
    """(day, UTC start, UTC end) of each calendar day of the period in the billing timezone."""
    tz = get_settings().tz
    start, end = aware(period.starts_at), aware(period.ends_at)
    out = []
    day = start.astimezone(tz).date()
    while True:
        lo = max(datetime(day.year, day.month, day.day, tzinfo=tz).astimezone(start.tzinfo), start)
        if lo >= end:
            return out
        nxt = day + timedelta(days=1)
        hi = min(datetime(nxt.year, nxt.month, nxt.day, tzinfo=tz).astimezone(start.tzinfo), end)
        out.append((day, lo, hi))
        day = nxt


def _same(a, line: ChargeLineRecord) -> bool:
    return (a.account, a.kind, a.klass, a.service, a.policy_version) == (
        line.account, line.kind, line.klass, line.service, line.policy_version)


def split_cumulative(exact: list[tuple[date, Decimal, Decimal]], currency: str) -> list[dict]:
    """Round exact (day, quantity, amount) rows so that they add up to the rounded totals (cumulative rounding)."""
    cent = cents(currency)
    rows = []
    sum_q = sum_a = ZERO
    shown_q = shown_a = ZERO
    for day, quantity, amount in exact:
        sum_q += quantity
        sum_a += amount
        q = sum_q.quantize(QUANTITY, ROUND_HALF_EVEN) - shown_q
        a = sum_a.quantize(cent, ROUND_HALF_EVEN) - shown_a
        shown_q += q
        shown_a += a
        rows.append({"day": day, "quantity": q, "amount": a, "unit_rate": unit_rate(q, a, currency)})
    return rows


def line_days(*, session: Session, period: BillingPeriod, line: ChargeLineRecord) -> dict:
    """The days of one GPU-hour line: quantity, rate and amount per day, adding up to the line to the cent."""
    if line.source != LineSource.RATING or line.kind not in HOURLY_KINDS:
        raise NotFound(f"Line {line.line_id} has no per-day drill-down (only rated GPU-hour lines have one)")
    docs = DocumentCache(session)
    exact = []
    for day, start, end in billing_days(period):
        hours = [h for h in load_hours(session=session, start=start, end=end, docs=docs)
                 if h.pool == line.pool and h.policy_version == line.policy_version]
        if not hours:
            continue
        result = rate_period(hours, period_start=epoch(start), period_end=epoch(end), exact=True)
        for a in result.lines:
            if _same(a, line):
                exact.append((day, a.quantity, a.amount))
    rows = split_cumulative(exact, period.currency)
    quantity = sum((r["quantity"] for r in rows), ZERO)
    amount = sum((r["amount"] for r in rows), ZERO)
    return {
        "line_id": line.line_id, "kind": line.kind, "pool": line.pool, "currency": period.currency,
        "days": rows, "quantity": quantity, "amount": amount,
        "line_quantity": line.quantity, "line_amount": line.amount,
        "adds_up": amount == line.amount and quantity == line.quantity,
    }
