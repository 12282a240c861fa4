"""The allocation explorer page (Kubecost-style) and its CSV: a window, an aggregate, idle and unallocated rows."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request
from starlette.responses import Response

from app.auth.deps import CurrentUser
from app.billing.allocation import (
    aggregates,
    allocation,
    as_csv,
    billing_today,
    check_aggregate,
    csv_filename,
    window_of,
)
from app.core.deps import SessionDep
from app.core.settings import get_settings
from app.core.timeutil import utcnow
from app.http.templating import render
from app.web.date_range_picker import RangeContext, range_context

router = APIRouter(include_in_schema=False)

AGGREGATE_LABELS = {"tenant": "Tenant", "department": "Department", "pool": "Pool", "cluster": "Cluster", "class": "Class",
                    "namespace": "Namespace"}


@dataclass
class ExplorerQuery:
    """The explorer's parameters, the page's and the CSV's alike (the CSV is exactly the page's rows)."""

    start: date | None = None
    end: date | None = None
    aggregate: Annotated[str, Query(max_length=20)] = "tenant"
    tenant: Annotated[str, Query(max_length=200)] = ""
    cluster: Annotated[str, Query(max_length=63)] = ""


Explorer = Annotated[ExplorerQuery, Depends()]


def _explore(session, user, q: ExplorerQuery):
    """The window (default: this month to date, whole days in the billing time zone) and its allocation."""
    today, tz = billing_today()
    window = window_of(q.start or (q.end or today).replace(day=1), q.end or today, tz=tz, path="query.start")
    rc = RangeContext(period=window, now=utcnow(), today=today, timezone=get_settings().billing_timezone)
    return rc, allocation(session=session, window=window, aggregate=check_aggregate(q.aggregate), viewer=user,
                          tenant=q.tenant, cluster=q.cluster)


@router.get("/allocation")
def allocation_page(request: Request, session: SessionDep, user: CurrentUser, q: Explorer) -> Response:
    rc, result = _explore(session, user, q)
    query = {"start": rc.period.start.isoformat(), "end": rc.period.end.isoformat(), "aggregate": q.aggregate,
             "tenant": q.tenant, "cluster": q.cluster}
    clusters = get_settings().cluster_names()
    context = {
        "title": "Allocation",
        "a": result,
        # The cluster aggregate and filter only where there is more than one cluster.
        "aggregates": [(key, AGGREGATE_LABELS[key]) for key in aggregates()],
        "clusters": clusters if len(clusters) > 1 else [],
        "query": query,
        **range_context(request, rc, keep={"aggregate": q.aggregate, "tenant": q.tenant, "cluster": q.cluster}),
    }
    return render(request, "allocation/index.html", context)


@router.get("/allocation.csv")
def allocation_csv(session: SessionDep, user: CurrentUser, q: Explorer) -> Response:
    _, result = _explore(session, user, q)
    return Response(as_csv(result), media_type="text/csv; charset=utf-8",
                    headers={"Content-Disposition": f'attachment; filename="{csv_filename(result)}"'})
