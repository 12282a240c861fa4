"""SLA: breach minutes per service and day, the breach minutes' P99 against the red line, who was co-located, penalties."""

from __future__ import annotations

from datetime import date
from typing import Annotated

from fastapi import APIRouter, Query, Request
from starlette.responses import Response

from app.auth.deps import CurrentUser
from app.billing.period import rated_period
from app.billing.sla_penalties import add_penalties, breach_evidence, paid_penalties
from app.core.deps import SessionDep
from app.core.errors import NotFound
from app.core.settings import get_settings
from app.http.templating import render
from app.metrics.breaches_read import breach_minutes, services
from app.metrics.date_ranges import days_of
from app.metrics.usage_read import ingested_days
from app.policy.service import active_document
from app.web.charts import chart_json
from app.web.date_range_picker import range_context, resolve

router = APIRouter(include_in_schema=False)

RED = "#D55E00"


@router.get("/sla")
def sla_page(
    request: Request,
    session: SessionDep,
    user: CurrentUser,
    start: date | None = None,
    end: date | None = None,
    service: Annotated[str, Query(max_length=200)] = "",
) -> Response:
    rc = resolve(start, end)
    doc = active_document(session=session)
    rows = services(session=session, period=rc.period, doc=doc, tenants=user.visible_tenants())
    months = add_penalties(session=session, period=rc.period, rows=rows)
    names = [r.service for r in rows]
    if service and service not in names:
        raise NotFound(f"No SLA service {service!r}")
    chosen = next((r for r in rows if r.service == service), None) or next((r for r in rows if r.minutes), None) \
        or (rows[0] if rows else None)
    all_days = days_of(rc.period)
    ingested = ingested_days(session=session, period=rc.period)  # a day with no ingested hour: null (a gap), not 0
    daily_chart = {"labels": [d.isoformat() for d in all_days],
                   "datasets": [{"label": r.service,
                                 "data": [v if d in ingested else None for d, v in zip(all_days, r.daily, strict=True)]}
                                for r in rows]}
    breaches, total = ([], 0)
    p99_chart = None
    if chosen is not None:
        breaches, total = breach_minutes(session=session, period=rc.period, service=chosen.service,
                                         tenants=user.visible_tenants())
        ordered = list(reversed(breaches))  # oldest first for the chart
        labels = [b.minute_end.astimezone(rc.period.tz).strftime("%m-%d %H:%M") for b in ordered]
        datasets = [{"label": "P99 of the breach minute (ms)", "data": [b.p99_ms for b in ordered], "color": "#0072B2",
                     "showLine": False, "pointRadius": 3}]
        if chosen.p99_ms is not None:
            datasets.append({"label": f"red line {chosen.p99_ms} ms", "data": [chosen.p99_ms] * len(ordered),
                             "color": RED, "pointRadius": 0, "borderDash": [6, 4], "fill": False})
        p99_chart = {"labels": labels, "datasets": datasets}
    # A training tenant sees no SLA service of its own, yet pays penalties for other tenants' services:
    # list those (service name only, as on its invoice lines) with a link to their evidence.
    paid = paid_penalties(session=session, months=sorted({f"{d.year:04d}-{d.month:02d}" for d in days_of(rc.period)}), tenants=user.visible_tenants()) \
        if user.visible_tenants() is not None else []
    context = {
        "title": "SLA",
        "currency": doc.pricing.currency if doc else "",
        "paid": paid,
        "rows": rows,
        "chosen": chosen,
        "breaches": breaches,
        "breach_total": total,
        "months": months,
        "daily_json": chart_json(daily_chart),
        "p99_json": chart_json(p99_chart) if p99_chart else None,
        "tz": rc.period.tz,
        "any_breach": any(r.minutes for r in rows),
        **range_context(request, rc, keep={"service": service}),
    }
    return render(request, "sla/index.html", context)


@router.get("/sla/paid")
def sla_paid(
    request: Request,
    session: SessionDep,
    user: CurrentUser,
    period: Annotated[str, Query(max_length=7)] = "",
    tenant: Annotated[str, Query(max_length=200)] = "",
    service: Annotated[str, Query(max_length=200)] = "",
) -> Response:
    """The breach minutes behind one tenant's SLA penalty line: P99 and the tenant's own GPU-seconds in each.
    Without a line named: the penalties the viewer's tenants paid, each linking here."""
    if not (period and tenant and service):
        paid = paid_penalties(session=session, months=None, tenants=user.visible_tenants())
        return render(request, "sla/paid.html", {"title": "SLA penalties paid", "e": None, "paid": paid})
    row = rated_period(session=session, month=period)
    if not user.can_see_tenant(tenant):
        raise NotFound(f"{tenant!r} paid no SLA penalty for {service!r} in {row.month}")
    evidence = breach_evidence(session=session, period=row, tenant=tenant, service=service)
    return render(request, "sla/paid.html",
                  {"title": f"SLA evidence {row.month} {tenant} {service}", "e": evidence, "tz": get_settings().tz})
