"""The first page: GPU-hours per tenant and workload class over a date range, from the rollups."""

from __future__ import annotations

import json
from datetime import date
from decimal import Decimal

from fastapi import APIRouter, Request
from starlette.responses import Response

from app.auth.deps import CurrentUser
from app.core.deps import SessionDep
from app.core.settings import get_settings
from app.core.timeutil import utcnow
from app.http.templating import render
from app.metrics import usage_read
from app.metrics.cluster_hours import check_cluster
from app.metrics.date_ranges import date_range
from app.web import overview_panels
from app.web.budgets import overview_panel
from app.web.charts import class_colour

router = APIRouter(include_in_schema=False)


def _pivot(rows: list[usage_read.TenantClassHours]) -> tuple[list[str], list[str], dict, dict]:
    """Tenants (largest first), classes, hours[tenant][class], and totals per tenant."""
    tenants: list[str] = []
    classes = sorted({r.klass for r in rows})
    hours: dict[str, dict[str, Decimal]] = {}
    for r in rows:
        if r.tenant not in hours:
            tenants.append(r.tenant)
            hours[r.tenant] = {}
        hours[r.tenant][r.klass] = r.gpu_hours
    totals = {t: sum(hours[t].values(), Decimal(0)) for t in tenants}
    return tenants, classes, hours, totals


@router.get("/")
def overview(
    request: Request, session: SessionDep, user: CurrentUser, start: date | None = None, end: date | None = None,
    cluster: str | None = None,
) -> Response:
    settings = get_settings()
    now = utcnow()
    period = date_range(start, end, today=now.astimezone(settings.tz).date(), tz=settings.tz)
    cluster = check_cluster(cluster)
    rows = usage_read.gpu_hours_by_tenant_class(session=session, period=period, tenants=user.visible_tenants(),
                                                cluster=cluster)
    tenants, classes, hours, totals = _pivot(rows)
    chart = {
        "labels": tenants,
        # Floats only for drawing; the table shows the exact Decimal figures.
        "datasets": [{"label": k, "data": [float(hours[t].get(k, 0)) for t in tenants], "color": class_colour(k)}
                     for k in classes],
    }
    context = {
        "title": "Overview",
        "period": period,
        "tenants": tenants,
        "classes": classes,
        "hours": hours,
        "totals": totals,
        "grand_total": sum(totals.values(), Decimal(0)),
        "class_totals": {k: sum((hours[t].get(k, Decimal(0)) for t in tenants), Decimal(0)) for k in classes},
        "chart_json": json.dumps(chart),
        "coverage": usage_read.coverage(session=session, period=period, now=now, cluster=cluster),
        "timezone": settings.billing_timezone,
        "cluster": cluster,
        "clusters": settings.cluster_names() if len(settings.cluster_names()) > 1 else [],
    }
    # Dashboard panels: cost vs last month, GPU-hours by class per day, dark time, live health and SLA partials.
    context.update(overview_panels.extras(session=session, user=user, period=period, now=now,
                                          today=now.astimezone(settings.tz).date(), cluster=cluster))
    context.update(overview_panel(session=session, user=user))  # this month's forecasts and budgets (every cluster)
    return render(request, "overview.html", context)
