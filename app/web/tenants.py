"""Tenants: a sortable, filterable list (htmx partial) and one tenant's usage, invoices, penalties and quotas."""

from __future__ import annotations

from datetime import date
from typing import Annotated, Literal

from fastapi import APIRouter, Query, Request
from starlette.responses import Response

from app.auth.deps import CurrentUser
from app.billing.checklist import period_coverage
from app.billing.owed import owed_by_tenant
from app.billing.period import get_period, parse_period
from app.billing.totals import tenant_history
from app.core.deps import SessionDep
from app.core.errors import NotFound
from app.http.htmx import htmx_target
from app.http.templating import render
from app.metrics.tenant_usage_read import quota_use, tenant_daily
from app.metrics.usage_read import coverage, ingested_days
from app.policy.service import active_document
from app.web import tenants_table
from app.web.budgets import tenant_card as budget_card
from app.web.charts import chart_json, sparkline
from app.web.date_range_picker import range_context, resolve

router = APIRouter(include_in_schema=False)

SortKey = Literal["tenant", "spend", "gpu_hours", "efficiency", "delta"]
TABLE_ID = "tenant-table"


@router.get("/tenants")
def tenant_list(
    request: Request,
    session: SessionDep,
    user: CurrentUser,
    start: date | None = None,
    end: date | None = None,
    sort: SortKey = "gpu_hours",
    dir: Literal["asc", "desc"] = "desc",
    q: Annotated[str, Query(max_length=100)] = "",
) -> Response:
    rc = resolve(start, end)
    spend = owed_by_tenant(session=session, window=rc.period, viewer=user)  # the same days as the GPU-hours
    baseline = coverage(session=session, period=tenants_table.previous_range(rc.period), now=rc.now)
    rows = tenants_table.tenant_rows(session=session, period=rc.period, tenants=user.visible_tenants(), spend=spend,
                                     baseline=baseline)
    shown = tenants_table.sort_rows(rows, key=sort, descending=dir == "desc", needle=q)
    doc = active_document(session=session)
    context = {
        "title": "Tenants",
        "coverage": coverage(session=session, period=rc.period, now=rc.now),
        "baseline": baseline,
        "currency": doc.pricing.currency if doc else "",  # money on pages always carries its currency
        "rows": shown,
        "total_rows": len(rows),
        "sparks": {r.tenant: sparkline(r.daily) for r in shown},
        "sort": sort,
        "dir": dir,
        "q": q,
        "table_id": TABLE_ID,
        "table_url": request.url.path,
        "base_query": {"start": rc.period.start.isoformat(), "end": rc.period.end.isoformat()},
        **range_context(request, rc, keep={"sort": sort, "dir": dir, "q": q}),
    }
    # The sort links and the filter box ask for the table only; the range picker for the whole content.
    block = "table" if htmx_target(request) == TABLE_ID else "content"
    return render(request, "tenants/list.html", context, block=block)


@router.get("/tenants/{tenant}")
def tenant_detail(
    request: Request,
    tenant: str,
    session: SessionDep,
    user: CurrentUser,
    start: date | None = None,
    end: date | None = None,
) -> Response:
    # Same answer for "not yours" and "does not exist": a member learns nothing about other tenants.
    if len(tenant) > 200 or not user.can_see_tenant(tenant):
        raise NotFound(f"No tenant {tenant[:200]!r}")
    doc = active_document(session=session)
    if not tenants_table.tenant_known(session=session, tenant=tenant, doc=doc):
        raise NotFound(f"No tenant {tenant!r}")
    rc = resolve(start, end)
    days, busy, dark = tenant_daily(session=session, period=rc.period, tenant=tenant)
    ingested = ingested_days(session=session, period=rc.period)
    known = [d in ingested for d in days]  # a day with no ingested hour is a gap in the chart (null), not 0
    chart = {
        "labels": [d.isoformat() for d in days],
        "datasets": [{"label": "busy", "data": [v if k else None for v, k in zip(busy, known, strict=True)],
                      "color": "#0072B2"},
                     {"label": "dark", "data": [v if k else None for v, k in zip(dark, known, strict=True)],
                      "color": "#56B4E9"}],
    }
    invoices = tenant_history(session=session, tenant=tenant, viewer=user)
    # "2 of 744 hours" beside an invoice of a month that is not whole (a few months: one small read each)
    invoice_coverage = {
        i.month: period_coverage(session=session, period=parse_period(i.month),
                                 row=get_period(session=session, month=i.month), now=rc.now)
        for i in invoices
    }
    tenant_doc = doc.tenant(tenant) if doc else None
    context = {
        "title": f"Tenant {tenant}",
        "tenant": tenant,
        "tenant_doc": tenant_doc,
        "currency": doc.pricing.currency if doc else "",
        "busy_total": sum(busy, tenants_table.ZERO),
        "dark_total": sum(dark, tenants_table.ZERO),
        "chart_json": chart_json(chart),
        "invoices": invoices,
        "penalties_paid": sum((i.penalties_paid for i in invoices), tenants_table.ZERO),
        "credits_received": sum((i.credits_received for i in invoices), tenants_table.ZERO),
        "quotas": quota_use(session=session, period=rc.period, tenant=tenant, doc=doc),
        "coverage": coverage(session=session, period=rc.period, now=rc.now),
        "invoice_coverage": invoice_coverage,
        **range_context(request, rc),
    }
    if tenant_doc is not None:  # this month's cost, forecast and budget (a tenant the policy names)
        context.update(budget_card(session=session, tenant=tenant, klass=tenant_doc.klass))
    return render(request, "tenants/detail.html", context)
