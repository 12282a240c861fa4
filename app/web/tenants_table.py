"""The Tenants table: per-tenant rows (usage, trend, spend) over a range, their sorting and filtering, and which tenants exist."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal

from sqlmodel import Session

from app.billing.totals import has_lines
from app.metrics.date_ranges import DateRange, days_of
from app.metrics.efficiency import mean_activity
from app.metrics.tenant_usage_read import has_usage
from app.metrics.usage_read import ZERO, Coverage, daily_gpu_hours_by_tenant, ingested_days, usage_cells
from app.policy.document import PolicyDocument


@dataclass
class TenantRow:
    tenant: str
    gpu_hours: Decimal
    dark_hours: Decimal
    efficiency: float | None  # mean engine activity over occupied samples
    previous_hours: Decimal  # the same number of days just before the range
    spend: Decimal | None  # what the tenant owes for the range (billing.owed); None when the range cannot be priced
    daily: list[Decimal | None]  # GPU-hours per day of the range (sparkline); None: no hour of that day ingested
    baseline_whole: bool = True  # every hour of the previous range is ingested

    @property
    def delta(self) -> Decimal | None:
        """Change of GPU-hours against the previous range of equal length, as a fraction.

        None without a baseline: no use before, or a previous range with hours not ingested (against 3 ingested
        hours any month looks like "+35800%").
        """
        if not self.previous_hours or not self.baseline_whole:
            return None
        return (self.gpu_hours - self.previous_hours) / self.previous_hours


def previous_range(period: DateRange) -> DateRange:
    days = (period.end - period.start).days + 1
    return DateRange(start=period.start - timedelta(days=days), end=period.start - timedelta(days=1), tz=period.tz)


def tenant_rows(
    *, session: Session, period: DateRange, tenants: frozenset[str] | None, spend: dict[str, Decimal] | None,
    baseline: Coverage | None = None,
) -> list[TenantRow]:
    """One row per tenant with use in the range or the range before it (unsorted).

    `baseline`: the previous range's coverage; when it is partial no row has a change figure.
    """
    if tenants is not None and not tenants:
        return []
    before = previous_range(period)
    all_days = days_of(period)
    days = len(all_days)
    acc: dict[str, dict] = defaultdict(lambda: {"hours": ZERO, "dark": ZERO, "prev": ZERO, "act": 0.0, "n": 0,
                                                "daily": [ZERO] * days})
    # GPU-hours as the invoice states them (usage_read.usage_cells); the sparkline's days are exact.
    for cell in usage_cells(session=session, start=period.start_utc, end=period.end_utc, tenants=tenants):
        a = acc[cell.tenant]
        a["hours"] += cell.gpu_hours
        a["dark"] += cell.dark_gpu_hours
        a["act"] += cell.activity_sum
        a["n"] += cell.activity_samples
    for cell in usage_cells(session=session, start=before.start_utc, end=before.end_utc, tenants=tenants):
        acc[cell.tenant]["prev"] += cell.gpu_hours
    for tenant, daily in daily_gpu_hours_by_tenant(session=session, period=period, tenants=tenants).items():
        acc[tenant]["daily"] = daily
    ingested = ingested_days(session=session, period=period)
    whole = baseline is None or not baseline.partial
    return [
        TenantRow(tenant=t, gpu_hours=a["hours"], dark_hours=a["dark"], efficiency=mean_activity(a["act"], a["n"]),
                  previous_hours=a["prev"], spend=None if spend is None else spend.get(t, ZERO),
                  daily=[v if d in ingested else None for d, v in zip(all_days, a["daily"], strict=True)],
                  baseline_whole=whole)
        for t, a in acc.items()
    ]


def sort_rows(rows: list[TenantRow], *, key: str, descending: bool, needle: str = "") -> list[TenantRow]:
    """Filter by a substring of the tenant name, then sort; missing values sort last either way."""
    needle = needle.strip().lower()
    if needle:
        rows = [r for r in rows if needle in r.tenant.lower()]
    if key == "tenant":
        return sorted(rows, key=lambda r: r.tenant, reverse=descending)
    present = [r for r in rows if getattr(r, key) is not None]
    missing = [r for r in rows if getattr(r, key) is None]
    present.sort(key=lambda r: (getattr(r, key), r.tenant), reverse=descending)
    return present + sorted(missing, key=lambda r: r.tenant)


# --- one tenant ----------------------------------------------------------------------------------------


def tenant_known(*, session: Session, tenant: str, doc: PolicyDocument | None) -> bool:
    """A tenant exists if the active policy names it or any rollup or line mentions it."""
    if doc is not None and doc.tenant(tenant) is not None:
        return True
    if has_usage(session=session, tenant=tenant):
        return True
    return has_lines(session=session, account=tenant)

