"""Budgets API (/api/v1): monthly budgets per tenant and department, with this month's cost and forecast.

Finance and admins set them; everyone reads what they may: a tenant member its own tenants' budgets
and forecasts (another tenant's, or an unknown one, is the same 404), departments are staff's.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Response

from app.api.schemas.budgets import BudgetIn, BudgetList, BudgetOut, BudgetStatus, CrossingOut, ForecastOut, OwedOut
from app.auth.deps import CurrentUser, Finance, Principal, Staff
from app.billing import budgets
from app.billing.budget_models import BudgetScope
from app.billing.owed import owed_so_far
from app.core.deps import SessionDep
from app.core.errors import NotFound
from app.core.timeutil import utcnow
from app.http.pagination import DEFAULT_LIMIT, CursorQuery, LimitQuery, page_of

router = APIRouter(tags=["budgets"])
TenantPath = Annotated[str, Path(max_length=200)]
DepartmentPath = Annotated[str, Path(max_length=200)]
TENANT, DEPARTMENT = BudgetScope.TENANT.value, BudgetScope.DEPARTMENT.value


def status_out(status: budgets.BudgetStatus, user: Principal) -> BudgetStatus:
    """The typed answer for one status; who changed a budget is staff's to know."""
    f, b = status.forecast, status.budget
    staff = user.visible_tenants() is None
    return BudgetStatus(
        scope=status.scope, name=status.name, department=status.department, month=status.month, as_of=status.as_of,
        currency=status.currency, actual=None if f is None else str(f.actual),
        forecast=None if f is None else ForecastOut(
            month_end=str(f.month_end), expected_remaining=str(f.expected_remaining.quantize(f.month_end)),
            method=f.method, hours_known=f.hours_known, hours_remaining=f.hours_remaining,
            history_hours=f.history_hours, short_history=f.short_history),
        budget=None if b is None else BudgetOut(amount=str(b.amount), currency=b.currency, thresholds=b.threshold_list,
                                                updated_at=b.updated_at, updated_by=b.updated_by if staff else None),
        state=status.state, crossed=[CrossingOut(threshold_percent=c.threshold, basis=c.basis) for c in status.crossed],
        error=status.error,
    )


def _visible(user: Principal, tenant: str) -> None:
    if not user.can_see_tenant(tenant):  # the same answer as an unknown tenant: existence is not disclosed
        raise NotFound(f"No tenant {tenant[:200]!r} in the policy in effect")


@router.get("/budgets")
def list_budgets(
    session: SessionDep, user: CurrentUser, include_unbudgeted: bool = False, limit: LimitQuery = DEFAULT_LIMIT,
    cursor: CursorQuery = None,
) -> BudgetList:
    """Every budget the caller may read with this month's standing, by scope and name; `include_unbudgeted`: every
    readable tenant (and, for staff, department) too, with its cost and forecast."""
    found = budgets.statuses(session=session, viewer=user, with_unbudgeted=include_unbudgeted)
    month = found[0].month if found else budgets.current_month(utcnow())
    page, next_cursor = page_of(found, key=lambda s: (str(s.scope), s.name), types=[str, str], limit=limit,
                                cursor=cursor)
    return BudgetList(month=month, items=[status_out(s, user) for s in page], next_cursor=next_cursor)


@router.get("/budgets/tenants/{tenant}")
def get_tenant_budget(tenant: TenantPath, session: SessionDep, user: CurrentUser) -> BudgetStatus:
    """A tenant's budget (null when none is set), month-to-date cost and month-end forecast."""
    _visible(user, tenant)
    return _read(session, TENANT, tenant, user)


@router.put("/budgets/tenants/{tenant}")
def put_tenant_budget(tenant: TenantPath, body: BudgetIn, session: SessionDep, user: Finance) -> BudgetStatus:
    """Set a tenant's monthly budget (finance, admin); 422 names `body.amount` or `body.thresholds.N`."""
    return _put(session, TENANT, tenant, body, user)


@router.delete("/budgets/tenants/{tenant}", status_code=204)
def delete_tenant_budget(tenant: TenantPath, session: SessionDep, user: Finance) -> Response:
    """Remove a tenant's budget (its events already raised stay)."""
    return _delete(session, TENANT, tenant, user)


@router.get("/budgets/departments/{department}")
def get_department_budget(department: DepartmentPath, session: SessionDep, user: Staff) -> BudgetStatus:
    """A department's budget (null when none), month-to-date cost and forecast: the sum of its tenants'."""
    return status_out(budgets.status_of(session=session, scope=DEPARTMENT, name=department), user)


@router.put("/budgets/departments/{department}")
def put_department_budget(department: DepartmentPath, body: BudgetIn, session: SessionDep, user: Finance) -> BudgetStatus:
    """Set a department's monthly budget (finance, admin); its alerts are mailed to finance."""
    return _put(session, DEPARTMENT, department, body, user)


@router.delete("/budgets/departments/{department}", status_code=204)
def delete_department_budget(department: DepartmentPath, session: SessionDep, user: Finance) -> Response:
    """Remove a department's budget (its events already raised stay)."""
    return _delete(session, DEPARTMENT, department, user)


def _put(session, scope: str, name: str, body: BudgetIn, user: Principal) -> BudgetStatus:
    """Set the budget (field errors named as pydantic names them: body.thresholds.1), then read where it stands."""
    budgets.set_budget(session=session, scope=scope, name=name, amount=body.amount, thresholds=body.thresholds,
                       actor=user.name, paths=("body.amount", "body.thresholds"), index=lambda path, i: f"{path}.{i}")
    return _read(session, scope, name, user)


def _read(session, scope: str, name: str, user: Principal) -> BudgetStatus:
    """Where one budget stands; a tenant's with what it owes so far (`owed`)."""
    status = budgets.status_of(session=session, scope=scope, name=name)
    out = status_out(status, user)
    if scope == TENANT and status.forecast is not None:
        o = owed_so_far(session=session, tenant=name, as_of=status.as_of)
        out.owed = OwedOut(total=str(o.total), cost=str(o.cost), sla_penalties=str(o.sla_penalties),
                           sla_credits=str(o.sla_credits),
                           forecast_total=None if o.forecast_total is None else str(o.forecast_total),
                           draft_total=None if o.draft_total is None else str(o.draft_total),
                           draft_rated_at=o.draft_rated_at, draft_stale=o.draft_stale)
    return out


def _delete(session, scope: str, name: str, user: Principal) -> Response:
    budgets.delete_budget(session=session, scope=scope, name=name, actor=user.name)
    return Response(status_code=204)
