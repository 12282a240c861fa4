"""Read-only aggregations over the hourly rollups for pages (never Prometheus per request)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from zoneinfo import ZoneInfo

from sqlalchemy import func
from sqlmodel import Session, col, select

from app.core.errors import FieldError, Invalid
from app.core.timeutil import SECONDS_PER_HOUR
from app.metrics.models import IngestHour, UsageRollup

MAX_RANGE_DAYS = 366


@dataclass(frozen=True)
class DateRange:
    """Whole days [start, end] in the billing time zone, and the UTC instants they cover."""

    start: date
    end: date
    tz: ZoneInfo

    @property
    def start_utc(self) -> datetime:
        return datetime.combine(self.start, time(0), self.tz).astimezone(ZoneInfo("UTC"))

    @property
    def end_utc(self) -> datetime:
        """Exclusive: midnight after `end`."""
        return datetime.combine(self.end + timedelta(days=1), time(0), self.tz).astimezone(ZoneInfo("UTC"))


def date_range(start: date | None, end: date | None, *, today: date, tz: ZoneInfo, default_days: int = 30) -> DateRange:
    """The requested range, defaulting to the last `default_days` days up to today; errors name the field."""
    end = end or today
    start = start or end - timedelta(days=default_days - 1)
    errors = []
    if start > end:
        errors.append(FieldError("query.start", "must be on or before the end date"))
    elif (end - start).days + 1 > MAX_RANGE_DAYS:
        errors.append(FieldError("query.end", f"the range may span at most {MAX_RANGE_DAYS} days"))
    if errors:
        raise Invalid("The date range is not valid", errors)
    return DateRange(start=start, end=end, tz=tz)


@dataclass(frozen=True)
class TenantClassHours:
    tenant: str
    klass: str
    gpu_hours: Decimal


def gpu_hours_by_tenant_class(
    *, session: Session, period: DateRange, tenants: frozenset[str] | None
) -> list[TenantClassHours]:
    """GPU-hours per tenant and workload class in `period` (both dark and busy time), largest tenants first.

    `tenants` None means every tenant; otherwise only those (a tenant member's view).
    """
    if tenants is not None and not tenants:
        return []
    seconds = func.sum(UsageRollup.gpu_seconds)
    query = (
        select(UsageRollup.tenant, UsageRollup.klass, seconds)
        .where(UsageRollup.hour >= period.start_utc, UsageRollup.hour < period.end_utc)
        .group_by(UsageRollup.tenant, UsageRollup.klass)
    )
    if tenants is not None:
        query = query.where(col(UsageRollup.tenant).in_(sorted(tenants)))
    rows = [
        TenantClassHours(tenant=t, klass=k, gpu_hours=(Decimal(s) / SECONDS_PER_HOUR).quantize(Decimal("0.001")))
        for t, k, s in session.exec(query)
    ]
    totals: dict[str, Decimal] = {}
    for row in rows:
        totals[row.tenant] = totals.get(row.tenant, Decimal(0)) + row.gpu_hours
    return sorted(rows, key=lambda r: (-totals[r.tenant], r.tenant, r.klass))


@dataclass(frozen=True)
class Coverage:
    """How much of a range the rollups cover: ingested hours, gap hours, hours not yet tried."""

    hours: int
    ok: int
    gaps: int

    @property
    def missing(self) -> int:
        return max(0, self.hours - self.ok - self.gaps)


def coverage(*, session: Session, period: DateRange, now: datetime) -> Coverage:
    """Ingestion coverage of `period` up to `now` (future hours are not counted as missing)."""
    end = min(period.end_utc, now.replace(minute=0, second=0, microsecond=0))
    hours = max(0, int((end - period.start_utc).total_seconds() // SECONDS_PER_HOUR))
    counts = dict(
        session.exec(
            select(IngestHour.status, func.count())
            .where(IngestHour.hour >= period.start_utc, IngestHour.hour < period.end_utc)
            .group_by(IngestHour.status)
        ).all()
    )
    return Coverage(hours=hours, ok=int(counts.get("ok", 0)), gaps=int(counts.get("gap", 0)))
