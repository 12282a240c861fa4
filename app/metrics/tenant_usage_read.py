"""One tenant's usage read side for its page: busy and dark GPU-hours per day, peak GPUs per pool against its quotas."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from decimal import Decimal

from sqlalchemy import func
from sqlmodel import Session, select

from app.metrics.date_ranges import DateRange, DayOf, days_of
from app.metrics.models import UsageRollup
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


def quota_use(*, session: Session, period: DateRange, tenant: str, doc: PolicyDocument | None) -> list[QuotaUse]:
    """Policy quotas of the tenant against its peak concurrent GPUs per pool (hourly average)."""
    per_hour = readable(
        select(UsageRollup.pool.label("pool"), func.sum(UsageRollup.gpu_seconds).label("s"))
        .where(UsageRollup.hour >= period.start_utc, UsageRollup.hour < period.end_utc)
        .group_by(UsageRollup.hour, UsageRollup.pool),
        UsageRollup, frozenset({tenant}),
    ).subquery()
    peaks = {pool: hours(s) for pool, s in session.exec(select(per_hour.c.pool, func.max(per_hour.c.s)).group_by(per_hour.c.pool))}
    quotas = {q.pool: q for q in (doc.quotas if doc else []) if q.tenant == tenant}
    out = []
    for pool in sorted(set(peaks) | set(quotas)):
        q = quotas.get(pool)
        out.append(QuotaUse(pool=pool, guaranteed=q.guaranteed_gpus if q else None,
                            borrowing_limit=q.borrowing_limit if q else None, peak_gpus=peaks.get(pool, ZERO)))
    return out
