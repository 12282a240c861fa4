"""Budgets: a monthly amount per tenant or department with alert thresholds, and where each stands this month.

A budget is compared with the tenant's (or department's) cost as the allocation explorer states it:
the reserved fee, overage and usage lines (SLA penalties and credits are transfers between tenants,
corrections adjust earlier months; neither is spending of the month). Where it stands is two
figures: the month-to-date cost (`actual`) and the month-end forecast (`forecast`). A threshold is
crossed on a basis when that figure reaches `amount x threshold / 100`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal, InvalidOperation

from sqlalchemy import delete
from sqlmodel import Session, select

from app.billing.budget_models import Budget, BudgetScope
from app.billing.forecast import Forecast
from app.billing.month_forecast import MonthForecasts, month_forecasts
from app.billing.month_forecast import current_month as current_month  # re-exported: the month a status is of
from app.billing.pricing import cents
from app.billing.readable import Viewer
from app.core.audit import record
from app.core.errors import FieldError, Invalid, NotFound
from app.core.timeutil import utcnow
from app.policy.service import active_document

DEFAULT_THRESHOLDS = (50, 80, 100)
MAX_THRESHOLDS = 10
MAX_PERCENT = 1000
MAX_AMOUNT = Decimal("1000000000000")  # 1e12 in the currency: far above any fleet, below the column's 18 digits
ACTUAL, FORECAST = "actual", "forecast"
SCOPES = (BudgetScope.TENANT.value, BudgetScope.DEPARTMENT.value)


# --- who can have a budget ------------------------------------------------------------------------------


def directory(session: Session) -> tuple[dict[str, str], str]:
    """(tenant -> department, currency) of the policy in effect: what budgets may be set for, and in what."""
    doc = active_document(session=session)
    if doc is None:
        return {}, "USD"
    return {t.name: t.department for t in doc.tenants}, doc.pricing.currency


def require_known(*, session: Session, scope: str, name: str) -> None:
    """404 unless the policy in effect names this tenant or department."""
    tenants, _ = directory(session)
    if scope == BudgetScope.TENANT and name not in tenants:
        raise NotFound(f"No tenant {name[:200]!r} in the policy in effect")
    if scope == BudgetScope.DEPARTMENT and name not in set(tenants.values()):
        raise NotFound(f"No department {name[:200]!r} in the policy in effect")


# --- the table ------------------------------------------------------------------------------------------


def get_budget(*, session: Session, scope: str, name: str) -> Budget | None:
    return session.exec(select(Budget).where(Budget.scope == scope, Budget.name == name)).first()


def list_budgets(*, session: Session, viewer: Viewer | None) -> list[Budget]:
    """Every budget the viewer may read, departments first then tenants, by name. A tenant member reads only
    its own tenants' budgets: a department's spans other tenants."""
    rows = list(session.exec(select(Budget).order_by(Budget.scope, Budget.name)))
    visible = None if viewer is None else viewer.visible_tenants()
    if visible is None:
        return rows
    return [b for b in rows if b.scope == BudgetScope.TENANT and b.name in visible]


def parse_amount(value: str | Decimal, *, currency: str, path: str) -> Decimal:
    """A positive amount in `currency`, at most its cents (whole units for zero-decimal currencies)."""
    try:
        amount = value if isinstance(value, Decimal) else Decimal(str(value).strip().replace(",", ""))
    except InvalidOperation:
        raise Invalid("The budget was not saved", [FieldError(path, "a number, e.g. 12000.00")]) from None
    quantum = cents(currency)
    if not amount.is_finite() or amount <= 0:
        raise Invalid("The budget was not saved", [FieldError(path, "must be more than 0")])
    if amount > MAX_AMOUNT:
        raise Invalid("The budget was not saved", [FieldError(path, f"at most {MAX_AMOUNT:,} {currency}")])
    if amount != amount.quantize(quantum):
        places = "whole units" if quantum == 1 else "at most 2 decimal places"
        raise Invalid("The budget was not saved", [FieldError(path, f"{currency} amounts have {places}")])
    return amount.quantize(quantum)


def check_thresholds(values: Sequence[int], *, path: str, index=lambda path, i: f"{path}[{i}]") -> list[int]:
    """Whole percents from 1 to MAX_PERCENT, strictly ascending, at most MAX_THRESHOLDS; errors name each one."""
    errors = []
    if not values:
        errors.append(FieldError(path, "at least one threshold, e.g. 50, 80, 100"))
    if len(values) > MAX_THRESHOLDS:
        errors.append(FieldError(path, f"at most {MAX_THRESHOLDS} thresholds"))
    for i, value in enumerate(values):
        if not 1 <= value <= MAX_PERCENT:
            errors.append(FieldError(index(path, i), f"{value}: a percent from 1 to {MAX_PERCENT}"))
        elif i and value <= values[i - 1]:
            errors.append(FieldError(index(path, i), f"{value}: thresholds go up, each above the one before"))
    if errors:
        raise Invalid("The budget was not saved", errors)
    return list(values)


def set_budget(*, session: Session, scope: str, name: str, amount: str | Decimal,
               thresholds: Sequence[int] | None, actor: str, paths: tuple[str, str] = ("amount", "thresholds"),
               index=lambda path, i: f"{path}[{i}]") -> Budget:
    """Create or replace a budget (flush, never commit); 404 for a name the policy does not know, 422 per field."""
    require_known(session=session, scope=scope, name=name)
    _, currency = directory(session)
    errors: list[FieldError] = []
    parsed_amount = parsed_thresholds = None
    try:
        parsed_amount = parse_amount(amount, currency=currency, path=paths[0])
    except Invalid as exc:
        errors += exc.errors
    try:
        parsed_thresholds = check_thresholds(list(DEFAULT_THRESHOLDS if thresholds is None else thresholds),
                                             path=paths[1], index=index)
    except Invalid as exc:
        errors += exc.errors
    if errors:
        raise Invalid(f"The budget of {scope} {name} was not saved", errors)
    budget = get_budget(session=session, scope=scope, name=name)
    before = None if budget is None else _audit_view(budget)
    if budget is None:
        budget = Budget(scope=scope, name=name, amount=parsed_amount, currency=currency, thresholds="",
                        updated_at=utcnow(), updated_by=actor)
    budget.amount, budget.currency = parsed_amount, currency
    budget.thresholds = ",".join(str(t) for t in parsed_thresholds)
    budget.updated_at, budget.updated_by = utcnow(), actor
    session.add(budget)
    session.flush()
    after = _audit_view(budget)
    if after != before:
        record(session=session, actor=actor, action="budget.set", entity="budget", entity_id=f"{scope}:{name}",
               before=before, after=after, tenant=name if scope == BudgetScope.TENANT else None)
    return budget


def delete_budget(*, session: Session, scope: str, name: str, actor: str) -> None:
    """Remove a budget (flush, never commit); 404 when there is none."""
    budget = get_budget(session=session, scope=scope, name=name)
    if budget is None:
        raise NotFound(f"No budget for {scope} {name[:200]!r}")
    before = _audit_view(budget)
    session.execute(delete(Budget).where(Budget.id == budget.id))
    session.flush()
    record(session=session, actor=actor, action="budget.delete", entity="budget", entity_id=f"{scope}:{name}",
           before=before, tenant=name if scope == BudgetScope.TENANT else None)


def _audit_view(budget: Budget) -> dict:
    return {"amount": str(budget.amount), "currency": budget.currency, "thresholds": budget.threshold_list}


# --- where a budget stands (pure below `statuses`) ---------------------------------------------------------


@dataclass(frozen=True)
class Crossing:
    threshold: int  # percent
    basis: str  # ACTUAL | FORECAST
    value: Decimal  # the cost that crossed: month-to-date, or the month-end forecast


def crossings(*, amount: Decimal, thresholds: Iterable[int], forecast: Forecast) -> list[Crossing]:
    """Each threshold the month-to-date cost has reached, and each the month-end forecast has reached.

    The forecast counts only once it was learned from a week of hours (`Forecast.short_history`).
    """
    out = []
    for threshold in thresholds:
        limit = amount * threshold / 100
        if forecast.actual >= limit:
            out.append(Crossing(threshold, ACTUAL, forecast.actual))
        if not forecast.short_history and forecast.month_end >= limit:
            out.append(Crossing(threshold, FORECAST, forecast.month_end))
    return out


@dataclass(frozen=True)
class BudgetStatus:
    """One tenant's or department's month: its budget (if any), month-to-date cost and forecast."""

    scope: str
    name: str
    department: str | None  # a tenant's department (a department's own name for a department)
    month: str
    currency: str
    as_of: datetime
    budget: Budget | None
    forecast: Forecast | None  # None when the month cannot be priced (`error`)
    error: str | None = None

    @property
    def comparable(self) -> bool:
        """A budget set in another currency than the costs are priced in is not compared (no alert either)."""
        return self.budget is not None and self.forecast is not None and self.budget.currency == self.currency

    @property
    def crossed(self) -> list[Crossing]:
        if not self.comparable:
            return []
        return crossings(amount=self.budget.amount, thresholds=self.budget.threshold_list, forecast=self.forecast)

    def share(self, value: Decimal | None) -> Decimal | None:
        """`value` as a fraction of the budget (None without a comparable budget)."""
        if not self.comparable or value is None:
            return None
        return value / self.budget.amount

    @property
    def state(self) -> str:
        """over (the month-to-date cost has reached the budget), at-risk (the forecast has), on-track, or none."""
        if not self.comparable:
            return "none"
        if self.forecast.actual >= self.budget.amount:
            return "over"
        if self.forecast.month_end >= self.budget.amount:
            return "at-risk"
        return "on-track"


def _status(answer: MonthForecasts, scope: str, name: str, budget: Budget | None) -> BudgetStatus:
    forecasts = answer.tenants if scope == BudgetScope.TENANT else answer.departments
    department = answer.department_of.get(name) if scope == BudgetScope.TENANT else name
    return BudgetStatus(scope=scope, name=name, department=department, month=answer.month, currency=answer.currency,
                        as_of=answer.as_of, budget=budget, forecast=None if answer.error else forecasts.get(name),
                        error=answer.error)


def status_of(*, session: Session, scope: str, name: str, now: datetime | None = None) -> BudgetStatus:
    """One tenant's or department's month as of now (the caller checked it may be read)."""
    require_known(session=session, scope=scope, name=name)
    answer = month_forecasts(session=session, as_of=now or utcnow())
    return _status(answer, scope, name, get_budget(session=session, scope=scope, name=name))


def statuses(*, session: Session, viewer: Viewer | None, now: datetime | None = None, month: str | None = None,
             with_unbudgeted: bool = False) -> list[BudgetStatus]:
    """Every readable budget's standing this month (or `month`); with `with_unbudgeted`, every readable tenant and
    department of the policy too, budget or not (departments only for staff)."""
    answer = month_forecasts(session=session, as_of=now or utcnow(), month=month)
    budgets = {(b.scope, b.name): b for b in list_budgets(session=session, viewer=viewer)}
    keys = set(budgets)
    if with_unbudgeted:
        visible = None if viewer is None else viewer.visible_tenants()
        tenants, _ = directory(session)
        keys |= {(BudgetScope.TENANT.value, t) for t in tenants if visible is None or t in visible}
        if visible is None:
            keys |= {(BudgetScope.DEPARTMENT.value, d) for d in tenants.values()}
    return [_status(answer, scope, name, budgets.get((scope, name))) for scope, name in sorted(keys)]
