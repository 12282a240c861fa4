"""GPU-hours over an arbitrary range, grouped by tenant, pool, class or department (one SQL GROUP BY)."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta
from decimal import Decimal

from sqlalchemy import func, select
from sqlmodel import Session

from app.billing.efficiency import mean_activity
from app.core.errors import FieldError, Invalid
from app.core.timeutil import SECONDS_PER_HOUR, aware, floor_hour
from app.metrics.models import IngestHour, UsageRollup
from app.policy.models import PolicyVersion

GROUPS = ("tenant", "pool", "class", "department")
MAX_RANGE = timedelta(days=400)
HOURS = Decimal("0.000001")


def usage_summary(
    *, session: Session, start: datetime, end: datetime, group_by: str, tenants: frozenset[str] | None
) -> dict:
    """GPU-hours (busy, dark) and efficiency per group over [start, end), hours floored to the hour."""
    start, end = floor_hour(aware(start)), aware(end)
    errors = []
    if group_by not in GROUPS:
        errors.append(FieldError("query.group_by", "one of: " + ", ".join(GROUPS)))
    if end <= start:
        errors.append(FieldError("query.end", "must be after start"))
    elif end - start > MAX_RANGE:
        errors.append(FieldError("query.end", f"a range spans at most {MAX_RANGE.days} days"))
    if errors:
        raise Invalid("The usage query is not valid", errors)

    column = {"pool": UsageRollup.pool, "class": UsageRollup.klass}.get(group_by, UsageRollup.tenant)
    stmt = (
        select(
            column, UsageRollup.dark, func.sum(UsageRollup.gpu_seconds), func.sum(UsageRollup.activity_sum),
            func.sum(UsageRollup.activity_samples),
        )
        .where(UsageRollup.hour >= start, UsageRollup.hour < end)
        .group_by(column, UsageRollup.dark)
    )
    if tenants is not None:
        stmt = stmt.where(UsageRollup.tenant.in_(sorted(tenants)))
    departments = _departments(session, end) if group_by == "department" else {}
    groups: dict[str, list] = defaultdict(lambda: [Decimal(0), Decimal(0), 0.0, 0])
    for key, dark, seconds, activity, samples in session.execute(stmt):
        if group_by == "department":
            key = departments.get(key, "unallocated" if key == "unallocated" else "unassigned")
        g = groups[key]
        g[1 if dark else 0] += Decimal(seconds or 0)
        g[2] += float(activity or 0)
        g[3] += int(samples or 0)
    rows = [
        {
            "key": key,
            "busy_gpu_hours": (busy / SECONDS_PER_HOUR).quantize(HOURS),
            "dark_gpu_hours": (dark / SECONDS_PER_HOUR).quantize(HOURS),
            "gpu_hours": ((busy + dark) / SECONDS_PER_HOUR).quantize(HOURS),
            "efficiency": mean_activity(activity, samples),
        }
        for key, (busy, dark, activity, samples) in sorted(groups.items())
    ]
    statuses = dict(
        session.execute(
            select(IngestHour.status, func.count())
            .where(IngestHour.hour >= start, IngestHour.hour < end)
            .group_by(IngestHour.status)
        ).all()
    )
    expected = int((end - start).total_seconds() // SECONDS_PER_HOUR)
    return {
        "start": start,
        "end": end,
        "group_by": group_by,
        "rows": rows,
        "hours_expected": expected,
        "hours_ok": statuses.get("ok", 0),
        "gap_hours": statuses.get("gap", 0),
    }


def _departments(session: Session, end: datetime) -> dict[str, str]:
    """Tenant -> department from the policy version in effect at the end of the range."""
    from app.policy.service import load_document

    version = session.execute(
        select(PolicyVersion)
        .where(PolicyVersion.effective_from < end)
        .order_by(PolicyVersion.effective_from.desc(), PolicyVersion.id.desc())
        .limit(1)
    ).scalars().first()
    if version is None:
        return {}
    return {t.name: t.department for t in load_document(version).tenants}
