"""Budgets page (finance, admin): a monthly budget per tenant and department with its thresholds, this month's
cost and month-end forecast beside it; and the forecast card and chart the tenant page and overview show."""

from __future__ import annotations

import re
from typing import Annotated

from fastapi import APIRouter, Form, Path, Request
from starlette.responses import RedirectResponse, Response

from app.auth.deps import Finance, Principal
from app.billing import budgets
from app.billing.budget_models import BudgetScope
from app.billing.forecast import daily_path
from app.billing.month_forecast import month_forecasts
from app.billing.owed import owed_so_far
from app.core.deps import SessionDep
from app.core.errors import FieldError, Invalid
from app.core.settings import get_settings
from app.core.timeutil import epoch, utcnow
from app.http.htmx import is_htmx
from app.http.templating import render
from app.web.charts import budget_chart

router = APIRouter(include_in_schema=False)
NamePath = Annotated[str, Path(max_length=200)]
Amount = Annotated[str, Form(max_length=40)]
Thresholds = Annotated[str, Form(max_length=200)]
TENANT, DEPARTMENT = BudgetScope.TENANT.value, BudgetScope.DEPARTMENT.value
OVERVIEW_ROWS = 8


def _page(request: Request, session, user: Principal, *, errors: dict | None = None, typed: dict | None = None,
          status_code: int = 200) -> Response:
    rows = budgets.statuses(session=session, viewer=user, with_unbudgeted=True)
    context = {"title": "Budgets", "rows": rows, "month": rows[0].month if rows else budgets.current_month(utcnow()),
               "as_of": rows[0].as_of if rows else None, "errors": errors or {}, "typed": typed or {},
               "defaults": ", ".join(str(t) for t in budgets.DEFAULT_THRESHOLDS)}
    return render(request, "budgets/index.html", context, status_code=status_code)


def _after_post(request: Request) -> Response:
    if is_htmx(request):
        return Response(status_code=204, headers={"HX-Redirect": "/budgets"})
    return RedirectResponse("/budgets", status_code=303)


def parse_thresholds(text: str) -> list[int] | None:
    """"50, 80, 100" (commas or spaces, an optional %) as whole percents; "" -> None (the defaults)."""
    parts = [p for p in re.split(r"[,\s]+", text.replace("%", " ").strip()) if p]
    if not parts:
        return None
    bad = [p for p in parts if not p.isdigit()]
    if bad:
        raise Invalid("The budget was not saved", [FieldError("thresholds", f"{bad[0]!r} is not a whole percent")])
    return [int(p) for p in parts]


def _save(request: Request, session, user: Principal, scope: str, name: str, amount: str, thresholds: str) -> Response:
    try:
        budgets.set_budget(session=session, scope=scope, name=name, amount=amount,
                           thresholds=parse_thresholds(thresholds), actor=user.name)
    except Invalid as exc:
        by_field: dict[str, list[str]] = {}
        for e in exc.errors:
            by_field.setdefault(e.path.split("[")[0], []).append(e.message)
        key = f"{scope}:{name}"
        return _page(request, session, user, errors={key: by_field},
                     typed={key: {"amount": amount, "thresholds": thresholds}}, status_code=422)
    return _after_post(request)


@router.get("/budgets")
def budgets_page(request: Request, session: SessionDep, user: Finance) -> Response:
    return _page(request, session, user)


@router.post("/budgets/tenants/{tenant}")
def tenant_budget_save(request: Request, session: SessionDep, user: Finance, tenant: NamePath, amount: Amount = "",
                       thresholds: Thresholds = "") -> Response:
    """Set a tenant's budget; a bad amount or threshold comes back beside its field, the input kept."""
    return _save(request, session, user, TENANT, tenant, amount, thresholds)


@router.post("/budgets/tenants/{tenant}/delete")
def tenant_budget_delete(request: Request, session: SessionDep, user: Finance, tenant: NamePath) -> Response:
    budgets.delete_budget(session=session, scope=TENANT, name=tenant, actor=user.name)
    return _after_post(request)


@router.post("/budgets/departments/{department}")
def department_budget_save(request: Request, session: SessionDep, user: Finance, department: NamePath,
                           amount: Amount = "", thresholds: Thresholds = "") -> Response:
    return _save(request, session, user, DEPARTMENT, department, amount, thresholds)


@router.post("/budgets/departments/{department}/delete")
def department_budget_delete(request: Request, session: SessionDep, user: Finance, department: NamePath) -> Response:
    budgets.delete_budget(session=session, scope=DEPARTMENT, name=department, actor=user.name)
    return _after_post(request)


# --- the tenant page's card and the overview's panel ------------------------------------------------------


def tenant_card(*, session, tenant: str, klass: str) -> dict:
    """Context of the tenant page's budget card: the status and the month's chart."""
    status = budgets.status_of(session=session, scope=TENANT, name=tenant)
    chart = None
    if status.forecast is not None:
        answer = month_forecasts(session=session, as_of=status.as_of)
        points = daily_path(forecast=status.forecast, costs=answer.tenant_costs(tenant), observed=answer.costs.observed,
                            month_start=epoch(answer.start), month_end=epoch(answer.end), as_of=epoch(answer.as_of),
                            tz=get_settings().tz)
        budget = status.budget.amount if status.comparable else None
        chart = budget_chart(points, klass=klass, budget=budget,
                             thresholds=status.budget.threshold_list if budget is not None else [])
    # what the tenant owes so far (the cost above plus the SLA transfers), and the draft invoice beside it
    owed = owed_so_far(session=session, tenant=tenant, as_of=status.as_of)
    return {"budget_status": status, "budget_chart": chart, "owed": owed}


def overview_panel(*, session, user: Principal) -> dict:
    """The overview's forecast panel: budgets first (by forecast share of budget), then the largest forecasts."""
    rows = [s for s in budgets.statuses(session=session, viewer=user, with_unbudgeted=True)
            if s.scope == TENANT or s.budget is not None]

    def order(s: budgets.BudgetStatus):
        share = s.share(s.forecast.month_end if s.forecast else None)
        return (share is None, -(share or 0), -(s.forecast.month_end if s.forecast else 0), s.scope, s.name)

    rows.sort(key=order)
    return {"forecast_rows": rows[:OVERVIEW_ROWS], "forecast_more": max(0, len(rows) - OVERVIEW_ROWS),
            "forecast_month": rows[0].month if rows else None, "forecast_error": rows[0].error if rows else None}
