"""What a tenant owes this month so far: the one figure every page that answers "what do I owe" shows.

The month to date is the allocation explorer's (the month's days so far, rated from the rollups as they stand
now, `month_forecast.month_to_date`). Its cost (usage, reserved fee and overage: what budgets and forecasts count)
plus the SLA transfers of the same hours (penalties paid, credits received) is what an invoice of those hours
says: `total`. When the month is rated, its draft invoice is the same figure as of that rating (with any
corrections): `draft_total`, stale once an hour of the month was ingested after it. The month-end forecast adds
the cost forecast for the hours to come to the transfers so far (transfers are not forecast).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from sqlmodel import Session

from app.billing.allocation import ALLOCATED, allocation
from app.billing.models import PeriodStatus
from app.billing.month_forecast import current_month, month_forecasts, month_to_date
from app.billing.period import get_period, parse_period
from app.billing.pricing import cents
from app.billing.readable import Viewer
from app.billing.totals import tenant_totals
from app.core.errors import AppError
from app.core.timeutil import aware, floor_hour
from app.metrics.cluster_hours import latest_ingest
from app.metrics.date_ranges import DateRange

ZERO = Decimal(0)


@dataclass(frozen=True)
class Owed:
    """One tenant's month so far, as an invoice of its hours would state it."""

    tenant: str
    month: str
    currency: str
    as_of: datetime  # the hours before this one are in the figures
    cost: Decimal  # usage, reserved fee and overage (the allocation's and the budget's figure)
    sla_penalties: Decimal  # paid for breaches while co-located (>= 0)
    sla_credits: Decimal  # received for its services' breaches (<= 0)
    forecast_cost: Decimal | None  # the cost forecast to month end (None: no forecast, `error` says why)
    draft_total: Decimal | None = None  # the rated draft invoice's total (None: the month is not rated)
    draft_rated_at: datetime | None = None
    draft_stale: bool = False  # hours of the month were ingested after the draft was rated
    error: str | None = None

    @property
    def total(self) -> Decimal:
        return self.cost + self.sla_penalties + self.sla_credits

    @property
    def forecast_total(self) -> Decimal | None:
        """The month-end forecast of what is owed: the cost forecast plus the transfers so far."""
        return None if self.forecast_cost is None else self.forecast_cost + self.sla_penalties + self.sla_credits


def owed_so_far(*, session: Session, tenant: str, as_of: datetime) -> Owed:
    """`tenant`'s month (the billing month holding `as_of`) up to the hour `as_of` falls in; the caller has checked
    that its user may see the tenant. The month to date is read as the forecasts read it (every tenant's
    allocation, kept for a few seconds), so this adds no second pass over the month's rollups."""
    until = floor_hour(as_of)
    month = current_month(until)
    period = parse_period(month)
    forecasts = month_forecasts(session=session, as_of=until, month=month)
    forecast = forecasts.tenants.get(tenant)
    window = month_to_date(period, until)
    cost = penalties = credits = ZERO
    currency = forecasts.currency
    if window is not None and not forecasts.error:
        answer = allocation(session=session, window=window, aggregate="tenant", viewer=None)
        currency = answer.currency
        cost = sum((r.cost for r in answer.rows if r.kind == ALLOCATED and r.name == tenant), ZERO)
        penalties = answer.sla_penalties.get(tenant, ZERO)
        credits = answer.sla_credits.get(tenant, ZERO)
    owed = dict(tenant=tenant, month=month, currency=currency, as_of=until, cost=cost, sla_penalties=penalties,
                sla_credits=credits, error=forecasts.error,
                forecast_cost=None if forecast is None else forecast.month_end)
    row = get_period(session=session, month=month)
    if row is not None and row.status == PeriodStatus.RATED and row.rated_at is not None:
        totals = {t["tenant"]: t["total"] for t in tenant_totals(session=session, period=row, viewer=None)}
        latest = latest_ingest(session=session, start=period.start, end=period.end)
        owed.update(draft_total=totals.get(tenant, ZERO).quantize(cents(currency)), draft_rated_at=row.rated_at,
                    draft_stale=latest is not None and aware(latest) > aware(row.rated_at))
    return Owed(**owed)


def owed_by_tenant(*, session: Session, window: DateRange, viewer: Viewer | None) -> dict[str, Decimal] | None:
    """What each visible tenant owes for the days of `window` (cost plus the SLA transfers of those hours, as the
    invoices of whole months say); None when rating refuses the window (a GPU model without a price)."""
    try:
        answer = allocation(session=session, window=window, aggregate="tenant", viewer=viewer)
    except AppError:
        return None
    owed = {r.name: r.cost for r in answer.rows if r.kind == ALLOCATED}
    for transfers in (answer.sla_penalties, answer.sla_credits):
        for tenant, amount in transfers.items():
            owed[tenant] = owed.get(tenant, ZERO) + amount
    return owed
