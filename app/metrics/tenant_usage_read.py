"""One tenant's usage read side for its page: busy and dark GPU-hours per day, peak GPUs per pool against its quotas."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal

from sqlalchemy import func
from sqlmodel import Session, select

from app.metrics.date_ranges import DateRange, DayOf, days_of
from app.metrics.models import PoolHourRollup, UsageRollup
from app.metrics.usage_read import ZERO, hours
from app.metrics.visibility import readable
from app.policy.document import PolicyDocument


def has_usage(*, session: Session, tenant: str) -> bool:
    """Whether any rollup names the tenant."""
    return session.exec(select(UsageRollup.id).where(UsageRollup.tenant == tenant).limit(1)).first() is not None


def tenant_daily(*, session: Session, period: DateRange, tenant: str) -> tuple[list[date], list[Decimal], list[Decimal]]:
    """Busy and dark GPU-hours of one tenant per day of the range."""
    day_of = DayOf(period.tz)
    days = days_of(period)
    index = {d: i for i, d in enumerate(days)}
    busy, dark = [ZERO] * len(days), [ZERO] * len(days)
    rows = session.exec(readable(
        select(UsageRollup.hour, UsageRollup.dark, func.sum(UsageRollup.gpu_seconds))
        .where(UsageRollup.hour >= period.start_utc, UsageRollup.hour < period.end_utc)
        .group_by(UsageRollup.hour, UsageRollup.dark),
        UsageRollup, frozenset({tenant}),
    ))
    for hour, is_dark, seconds in rows:
        i = index.get(day_of(hour))
        if i is None:
            continue
        if is_dark:
            dark[i] += hours(seconds)
        else:
            busy[i] += hours(seconds)
    return days, busy, dark


@dataclass
class QuotaUse:
    pool: str
    guaranteed: int | None
    borrowing_limit: int | None
    peak_gpus: Decimal  # max over hours of GPU-seconds / 3600 in the pool

    @property
    def over_guarantee(self) -> bool:
        return self.guaranteed is not None and self.peak_gpus > self.guaranteed


@dataclass(frozen=True)
class PoolUse:
    """A tenant's GPUs in a pool over a range, from the hourly rollups."""

    peak_gpus: Decimal  # the busiest hour's GPU-seconds / 3600 (concurrent GPUs, hourly average)
    mean_gpus: Decimal  # GPU-seconds / 3600 / the hours the pool was measured in the range


def pool_use(*, session: Session, start: datetime, end: datetime, tenants: frozenset[str] | None) -> dict[tuple[str, str], PoolUse]:
    """(tenant, pool) -> peak and mean GPUs in [start, end): what a quota is set against."""
    per_hour = readable(
        select(UsageRollup.tenant.label("tenant"), UsageRollup.pool.label("pool"), func.sum(UsageRollup.gpu_seconds).label("s"))
        .where(UsageRollup.hour >= start, UsageRollup.hour < end)
        .group_by(UsageRollup.hour, UsageRollup.tenant, UsageRollup.pool),
        UsageRollup, tenants,
    ).subquery()
    measured = dict(session.exec(
        # Distinct hours: `unpooled` has a row per cluster in an hour.
        select(PoolHourRollup.pool, func.count(func.distinct(PoolHourRollup.hour)))
        .where(PoolHourRollup.hour >= start, PoolHourRollup.hour < end)
        .group_by(PoolHourRollup.pool)).all())
    out = {}
    for tenant, pool, peak, total in session.exec(
            select(per_hour.c.tenant, per_hour.c.pool, func.max(per_hour.c.s), func.sum(per_hour.c.s))
            .group_by(per_hour.c.tenant, per_hour.c.pool)):
        hours_measured = measured.get(pool) or 1
        out[(tenant, pool)] = PoolUse(peak_gpus=hours(peak), mean_gpus=hours(total) / hours_measured)
    return out


def quota_use(*, session: Session, period: DateRange, tenant: str, doc: PolicyDocument | None) -> list[QuotaUse]:
    """Policy quotas of the tenant against its peak concurrent GPUs per pool (hourly average)."""
    used = pool_use(session=session, start=period.start_utc, end=period.end_utc, tenants=frozenset({tenant}))
    peaks = {pool: use.peak_gpus for (_, pool), use in used.items()}
    quotas = {q.pool: q for q in (doc.quotas if doc else []) if q.tenant == tenant}
    out = []
    for pool in sorted(set(peaks) | set(quotas)):
        q = quotas.get(pool)
        out.append(QuotaUse(pool=pool, guaranteed=q.guaranteed_gpus if q else None,
                            borrowing_limit=q.borrowing_limit if q else None, peak_gpus=peaks.get(pool, ZERO)))
    return out
