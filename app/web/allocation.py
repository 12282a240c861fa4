"""The allocation explorer page (Kubecost-style) and its CSV: a window, an aggregate, idle and unallocated rows."""

from __future__ import annotations

from datetime import date
from typing import Annotated

from fastapi import APIRouter, Query, Request
from starlette.responses import Response

from app.auth.deps import CurrentUser
from app.billing.allocation import (
    AGGREGATES,
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

AGGREGATE_LABELS = {"tenant": "Tenant", "department": "Department", "pool": "Pool", "class": "Class", "namespace": "Namespace"}


def _explore(session, user, start: date | None, end: date | None, aggregate: str, tenant: str):
    """The window (default: this month to date, whole days in the billing time zone) and its allocation."""
    today, tz = billing_today()
    window = window_of(start or (end or today).replace(day=1), end or today, tz=tz, path="query.start")
    rc = RangeContext(period=window, now=utcnow(), today=today, timezone=get_settings().billing_timezone)
    return rc, allocation(session=session, window=window, aggregate=check_aggregate(aggregate), viewer=user, tenant=tenant)


@router.get("/allocation")
def allocation_page(
    request: Request,
    session: SessionDep,
    user: CurrentUser,
    start: date | None = None,
    end: date | None = None,
    aggregate: Annotated[str, Query(max_length=20)] = "tenant",
    tenant: Annotated[str, Query(max_length=200)] = "",
) -> Response:
    rc, result = _explore(session, user, start, end, aggregate, tenant)
    query = {"start": rc.period.start.isoformat(), "end": rc.period.end.isoformat(), "aggregate": aggregate, "tenant": tenant}
    context = {
        "title": "Allocation",
        "a": result,
        "aggregates": [(key, AGGREGATE_LABELS[key]) for key in AGGREGATES],
        "query": query,
        **range_context(request, rc, keep={"aggregate": aggregate, "tenant": tenant}),
    }
    return render(request, "allocation/index.html", context)


@router.get("/allocation.csv")
def allocation_csv(
    session: SessionDep,
    user: CurrentUser,
    start: date | None = None,
    end: date | None = None,
    aggregate: Annotated[str, Query(max_length=20)] = "tenant",
    tenant: Annotated[str, Query(max_length=200)] = "",
) -> Response:
    _, result = _explore(session, user, start, end, aggregate, tenant)
    return Response(as_csv(result), media_type="text/csv; charset=utf-8",
                    headers={"Content-Disposition": f'attachment; filename="{csv_filename(result)}"'})
