"""Allocation API: a window's GPU-hours, efficiency and cost per group, idle and unallocated beside them (/api/v1)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from app.api.billing import to_json
from app.api.schemas.allocation import Allocation
from app.auth.deps import CurrentUser
from app.billing.allocation import allocation as read_allocation
from app.billing.allocation import as_json, billing_today, check_aggregate, parse_window
from app.billing.month_forecast import window_remaining
from app.core.deps import SessionDep
from app.core.timeutil import utcnow

router = APIRouter(tags=["allocation"])


@router.get("/allocation", response_model=Allocation)
def allocation(
    session: SessionDep,
    user: CurrentUser,
    window: Annotated[str, Query(max_length=40, description=(
        "YYYY-MM (a month), YYYY-MM-DD,YYYY-MM-DD (whole days in the billing time zone, both included); "
        "empty: this month to date"))] = "",
    aggregate: Annotated[str, Query(max_length=20, description=(
        "tenant, department, pool, class or namespace; cluster too where several clusters are configured"))] = "tenant",
    tenant: Annotated[str, Query(max_length=200, description="only this tenant's rows (a tenant member: one of its own)")] = "",
    cluster: Annotated[str, Query(max_length=63, description="only this cluster's pools (empty: every cluster)")] = "",
) -> dict:
    """Rows per group with GPU-hours (busy, dark, total), efficiency and cost; idle per pool and unallocated as rows.

    Whole rated months are priced from their invoice lines, the rest estimated by the same rating. A tenant
    member sees only its own tenants' rows (no idle, unallocated or platform rows). For a window that runs
    through today, tenant and department rows carry `forecast_cost`: their cost plus this month's forecast rest
    (not with `cluster`: forecasts are per tenant over every cluster).
    """
    today, tz = billing_today()
    period = parse_window(window, today=today, tz=tz)
    answer = read_allocation(session=session, window=period, aggregate=check_aggregate(aggregate), viewer=user,
                             tenant=tenant, cluster=cluster)
    # The forecast is the tenant's whole fleet: a window narrowed to one cluster carries none.
    # Over the tenants the answer covers: the caller's (and only `tenant` when given), as its rows are.
    remaining = {} if cluster else window_remaining(session=session, window=period, aggregate=aggregate, now=utcnow(),
                                                    visible=answer.visible)
    return to_json(as_json(answer, remaining))
