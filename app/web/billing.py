"""Plain billing pages: periods, one period's invoices and downloads, one tenant's invoice.

They call the same services as the JSON API; finance rates and closes from the period page: a checklist says
what blocks the close and what to do, the close form asks only for the acceptances it needs, and Finalize
goes through a confirmation step (a page of its own, so it works without JavaScript).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Form, Query, Request
from starlette.responses import RedirectResponse, Response

from app.auth.deps import CurrentUser, Finance, Principal, Staff
from app.billing import issued, periods
from app.billing.checklist import period_checklist, period_coverage
from app.billing.invoices import invoice_line, invoice_summaries, load_view, platform_statement, tenant_invoice
from app.billing.line_days import line_days
from app.billing.models import DocumentKind, PeriodStatus
from app.billing.period import get_period, parse_period, rated_period, require_started
from app.billing.report import read_report
from app.billing.types import line_name
from app.core.deps import SessionDep
from app.core.errors import AppError, NotFound
from app.core.safe_text import control_problem
from app.core.timeutil import utcnow
from app.http.htmx import is_htmx
from app.http.responses import download
from app.http.templating import render, templates
from app.web.charts import chart_json

router = APIRouter(include_in_schema=False)
templates.env.filters["line_name"] = line_name  # "Use in dark time", not "usage_dark"
MAX_REASON = 2000  # as the API's CloseRequest.reason


def _is_finance(user: Principal) -> bool:
    return bool(user.roles & {"admin", "finance"})


@router.get("/billing")
def billing_periods(request: Request, session: SessionDep, user: CurrentUser) -> Response:
    rows = periods.list_periods(session=session, staff=user.visible_tenants() is None)
    now = utcnow()
    for row in rows:  # "2 of 744 hours" beside a month that is not whole
        p = parse_period(row["period"])
        row["coverage"] = period_coverage(session=session, period=p, row=get_period(session=session, month=p.month),
                                          now=now)
    return render(request, "billing/periods.html", {"title": "Billing", "periods": rows, "can_rate": _is_finance(user)})


def _period_context(session, user: Principal, p, *, form: dict | None = None, errors: dict | None = None) -> dict:
    """Everything the period page shows: status and coverage, the checklist and close form (finance), invoices, statement."""
    row = get_period(session=session, month=p.month)
    staff = user.visible_tenants() is None
    now = utcnow()
    context = {
        "title": f"Billing {p.month}",
        "month": p.month,
        "period": periods.period_summary(row, staff=staff) if row else None,
        "coverage": period_coverage(session=session, period=p, row=row, now=now),
        "can_rate": _is_finance(user),
        "checklist": period_checklist(session=session, period=p, now=now) if _is_finance(user) else None,
        "form": form or {"accept_gaps": False, "accept_unpooled": False, "accept_unreconciled": False, "reason": ""},
        "errors": errors or {},
        "summary": None,
        "statement": None,
        "staff": staff,
        "closed": False,
    }
    if row is not None and row.status != PeriodStatus.OPEN:
        view = load_view(session=session, period=rated_period(session=session, month=p.month))
        context["summary"] = invoice_summaries(view, user.visible_tenants())
        context["line_count"] = len(view.lines)
        if staff:
            context["statement"] = platform_statement(view)
    return context


@router.get("/billing/{period}")
def billing_period(request: Request, period: str, session: SessionDep, user: CurrentUser, closed: bool = False) -> Response:
    p = parse_period(period)
    require_started(p)
    context = _period_context(session, user, p)
    context["closed"] = closed and context["period"] is not None and context["period"]["status"] == PeriodStatus.FINALIZED
    return render(request, "billing/period.html", context)


@router.get("/billing/{period}/{tenant}")
def billing_invoice(request: Request, period: str, tenant: str, session: SessionDep, user: CurrentUser) -> Response:
    row = rated_period(session=session, month=period)
    if not user.can_see_tenant(tenant):
        raise NotFound(f"No invoice for tenant {tenant!r} in {row.month}")
    invoice = tenant_invoice(load_view(session=session, period=row), tenant)
    return render(request, "billing/invoice.html", {"title": f"Invoice {row.month} {tenant}", "invoice": invoice})


@router.get("/billing/{period}/{tenant}/days")
def billing_line_days(request: Request, period: str, tenant: str, session: SessionDep, user: CurrentUser,
                      line: Annotated[str, Query(max_length=300)] = "") -> Response:
    """One invoice line day by day (an htmx fragment under the line, or a page of its own)."""
    row = rated_period(session=session, month=period)
    if not user.can_see_tenant(tenant):
        raise NotFound(f"No invoice for tenant {tenant!r} in {row.month}")
    record = invoice_line(load_view(session=session, period=row), tenant, line)
    days = line_days(session=session, period=row, line=record)
    return render(request, "billing/line_days.html",
                  {"title": f"Invoice {row.month} {tenant}: per day", "period": row.month, "tenant": tenant, "d": days},
                  block="days")


@router.get("/billing/{period}/{tenant}/invoice.pdf")
def billing_invoice_pdf(request: Request, period: str, tenant: str, session: SessionDep, user: CurrentUser) -> Response:
    row = rated_period(session=session, month=period)
    if not user.can_see_tenant(tenant):
        raise NotFound(f"No invoice for tenant {tenant!r} in {row.month}")
    served = issued.serve(session=session, period=row, kind=DocumentKind.INVOICE_PDF, tenant=tenant)
    return download(request, served.content, media_type="application/pdf",
                    filename=f"invoice-{row.month}-{tenant}.pdf", headers=served.headers())


def _back(request: Request, month: str, *, closed: bool = False) -> Response:
    target = f"/billing/{month}" + ("?closed=1" if closed else "")
    if is_htmx(request):
        return Response(status_code=200, headers={"HX-Redirect": target})
    return RedirectResponse(target, status_code=303)


@router.post("/billing/{period}/rate")
def billing_rate(request: Request, period: str, session: SessionDep, user: Finance) -> Response:
    row = periods.rate(session=session, period=period, actor=user.name)
    return _back(request, row.month)


@router.post("/billing/{period}/close")
def billing_close(
    request: Request,
    period: str,
    session: SessionDep,
    user: Finance,
    accept_gaps: Annotated[bool, Form()] = False,
    accept_unpooled: Annotated[bool, Form()] = False,
    accept_unreconciled: Annotated[bool, Form()] = False,
    reason: Annotated[str, Form()] = "",
    confirmed: Annotated[bool, Form()] = False,
) -> Response:
    """Check the close against the checklist, then ask for confirmation, then finalize.

    A refused close shows the period page again with the reason beside the field and the input kept.
    """
    p = parse_period(period)
    require_started(p)
    form = {"accept_gaps": accept_gaps, "accept_unpooled": accept_unpooled, "accept_unreconciled": accept_unreconciled,
            "reason": reason}
    refusal = period_checklist(session=session, period=p, now=utcnow()).refusal(**form)
    if len(reason) > MAX_REASON:
        refusal["reason"] = f"Keep the reason under {MAX_REASON:,} characters (it is {len(reason):,})."
    elif problem := control_problem(reason):  # periods.close refuses it too: said here beside the field
        refusal["reason"] = f"The reason {problem}."
    if refusal:
        return _refused(request, session, user, p, form, refusal)
    if not confirmed:
        context = _period_context(session, user, p, form=form)
        if context["summary"] is None:  # never rated: nothing to confirm yet
            return _refused(request, session, user, p, form, {"period": "Rate the month first, then review it."})
        return render(request, "billing/close_confirm.html", context)
    try:
        row = periods.close(session=session, period=p.month, actor=user.name, accept_gaps=accept_gaps,
                            accept_unpooled=accept_unpooled, reason=reason, accept_unreconciled=accept_unreconciled)
    except AppError as exc:  # e.g. finalized meanwhile by someone else
        session.rollback()
        return _refused(request, session, user, p, form, {"period": exc.detail}, status=exc.status)
    return _back(request, row.month, closed=True)


def _refused(request: Request, session, user: Principal, p, form: dict, errors: dict, status: int | None = None) -> Response:
    """The period page again, with why beside each field and what was typed kept."""
    if status is None:
        status = 409 if set(errors) - {"reason"} else 422
    context = _period_context(session, user, p, form=form, errors=errors)
    return render(request, "billing/period.html", context, status_code=status)


# The monthly report. Its own router, included before `router`: `/billing/{period}/{tenant}` would
# otherwise take "report" for a tenant name.
report_router = APIRouter(include_in_schema=False)


@report_router.get("/billing/{period}/report")
def billing_report(request: Request, period: str, session: SessionDep, user: Staff) -> Response:
    row = rated_period(session=session, month=period)
    report = read_report(session=session, period=row)
    return render(request, "billing/report.html", {
        "title": f"Report {row.month}", "report": report, "month": row.month,
        "cost_chart": chart_json({"labels": [m["month"] for m in report["trend"]],
                                  "datasets": [{"label": "Fleet cost C", "data": [m["cost"] for m in report["trend"]]}]}),
        "utilisation_chart": chart_json({"labels": [m["month"] for m in report["trend"]], "datasets": [
            {"label": "Utilisation", "color": "#009E73", "data": [None if m["utilisation"] is None else m["utilisation"] * 100
                                              for m in report["trend"]]}]}),
    })


@report_router.get("/billing/{period}/report.pdf")
def billing_report_pdf(request: Request, period: str, session: SessionDep, _: Staff) -> Response:
    row = rated_period(session=session, month=period)
    served = issued.serve(session=session, period=row, kind=DocumentKind.REPORT_PDF)
    return download(request, served.content, media_type="application/pdf", filename=f"report-{row.month}.pdf",
                    headers=served.headers())
