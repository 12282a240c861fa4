"""Usage API: GPU-hours over a range grouped by tenant, pool, class or department (JSON, /api/v1)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Query

from app.api.billing import to_json
from app.api.schemas.usage import GroupBy, UsageSummary
from app.auth.deps import CurrentUser
from app.core.deps import SessionDep
from app.metrics.usage_read import usage_summary

router = APIRouter(tags=["usage"])


@router.get("/usage", response_model=UsageSummary)
def usage(
    session: SessionDep,
    user: CurrentUser,
    start: Annotated[datetime, Query(description="ISO 8601, inclusive; naive means UTC")],
    end: Annotated[datetime, Query(description="ISO 8601, exclusive")],
    group_by: Annotated[GroupBy, Query()] = "tenant",
) -> dict:
    """GPU-hours (busy, dark, total) and efficiency per group; a tenant member sees only its tenants."""
    return to_json(
        usage_summary(session=session, start=start, end=end, group_by=group_by, tenants=user.visible_tenants())
    )
