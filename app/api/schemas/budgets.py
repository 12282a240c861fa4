"""Budget schemas: a monthly budget per tenant or department, and where it stands (month-to-date and forecast)."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from app.api.schemas import DecimalText, Out
from app.billing.budgets import DEFAULT_THRESHOLDS, MAX_PERCENT, MAX_THRESHOLDS


class BudgetIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    amount: Decimal = Field(description="the monthly budget in the policy's currency, e.g. \"12000.00\" (at most its "
                                        "cents); a string keeps it exact")
    thresholds: list[int] | None = Field(
        default=None, max_length=MAX_THRESHOLDS * 5,
        description=f"whole percents of the amount that raise a budget.threshold event, ascending, 1 to {MAX_PERCENT}, "
                    f"at most {MAX_THRESHOLDS}; omitted: {list(DEFAULT_THRESHOLDS)}")


class BudgetOut(Out):
    amount: DecimalText
    currency: str = Field(description="the policy's currency when the budget was set")
    thresholds: list[int]
    updated_at: datetime
    updated_by: str | None = Field(description="null for tenant members")


class ForecastOut(Out):
    month_end: DecimalText = Field(description="month-to-date cost + expected_remaining, rounded to the cent")
    expected_remaining: DecimalText = Field(description="the typical cost of each hour of the month not known yet "
                                                        "(to come, or not ingested yet), summed")
    method: Literal["weekday-hour", "hour-of-day", "flat", "none"] = Field(
        description="the coarsest estimate a remaining hour needed: its (weekday, hour) slot blended with the "
                    "hour-of-day pattern; the hour-of-day pattern alone; the mean hour; none (no history)")
    hours_known: int
    hours_remaining: int
    history_hours: int = Field(description="hours of the trailing four weeks the pattern was learned from")
    short_history: bool = Field(description="learned from less than a week of hours: shown, raises no alert")


class CrossingOut(Out):
    threshold_percent: int
    basis: Literal["actual", "forecast"]


class OwedOut(Out):
    """What the tenant owes this month so far: the cost plus the SLA transfers of the same hours."""

    total: DecimalText = Field(description="cost + sla_penalties + sla_credits: what an invoice of these hours says")
    cost: DecimalText = Field(description="usage, reserved fee and overage: `actual`, the figure budgets count")
    sla_penalties: DecimalText = Field(description="paid for SLA breaches while co-located (>= 0)")
    sla_credits: DecimalText = Field(description="received for its services' breaches (<= 0)")
    forecast_total: DecimalText | None = Field(description="the month-end cost forecast plus the transfers so far")
    draft_total: DecimalText | None = Field(description="the rated draft invoice's total; null: the month is not rated")
    draft_rated_at: datetime | None
    draft_stale: bool = Field(description="hours were ingested after the draft was rated: `total` has them, the "
                                          "draft not yet")


class BudgetStatus(Out):
    scope: Literal["tenant", "department"]
    name: str
    department: str | None = Field(description="a tenant's department; a department's own name")
    month: str = Field(description="YYYY-MM, the current billing month")
    as_of: datetime = Field(description="hours before this are known")
    currency: str
    actual: DecimalText | None = Field(description="month-to-date cost (the allocation explorer's); null when the "
                                                   "month cannot be priced (see error)")
    forecast: ForecastOut | None
    budget: BudgetOut | None = Field(description="null: no budget set")
    state: Literal["none", "on-track", "at-risk", "over"] = Field(
        description="over: the month-to-date cost has reached the budget; at-risk: the forecast has; none: no budget "
                    "(or one in another currency than the costs)")
    crossed: list[CrossingOut] = Field(description="thresholds reached now, by month-to-date cost and by forecast")
    error: str | None
    owed: OwedOut | None = Field(default=None, description="a tenant's month so far as its invoice would state it "
                                                           "(GET /budgets/tenants/{tenant} only)")


class BudgetList(Out):
    month: str
    items: list[BudgetStatus]
    next_cursor: str | None = None
