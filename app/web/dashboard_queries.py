"""Read-only aggregations of the hourly rollups for the dashboard pages (never Prometheus per request).

The database sums per hour; Python only folds hours into days of the billing time zone, so every
query returns at most (hours x a few keys) rows whatever the number of GPUs.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from decimal import Decimal
from zoneinfo import ZoneInfo

from sqlalchemy import case, func
from sqlmodel import Session, col, select

from app.core.timeutil import SECONDS_PER_HOUR as HOUR_SECONDS, aware
from app.metrics.models import IngestHour, PoolHourRollup, UsageRollup
from app.metrics.quality import FindingsSummary, findings_summary
from app.web.queries import DateRange

ZERO = Decimal(0)
CLASSES = ("inference", "training", "preprocessing", "unallocated")


def days_of(period: DateRange) -> list[date]:
    """Every day of the range, in order."""
    return [period.start + timedelta(days=i) for i in range((period.end - period.start).days + 1)]


class DayOf:
    """hour (UTC) -> local date, memoised: a month has 720 distinct hours but many rows per hour."""

    def __init__(self, tz: ZoneInfo):
        self.tz = tz
        self.cache: dict[datetime, date] = {}

    def __call__(self, hour: datetime) -> date:
        day = self.cache.get(hour)
        if day is None:
            day = self.cache[hour] = aware(hour).astimezone(self.tz).date()
        return day


def day_column(session: Session, column, tz: ZoneInfo):
    """The local date of a UTC timestamp column, computed by PostgreSQL; None on SQLite (Python folds hours there).

    Grouping by day in the database returns ~30 rows a month instead of ~720 per key, and converting rows is
    what costs most in Python.
    """
    if session.get_bind().dialect.name != "postgresql":
        return None
    return func.date(func.timezone(tz.key, column))


def _tenant_filter(query, tenants: frozenset[str] | None):
    return query if tenants is None else query.where(col(UsageRollup.tenant).in_(sorted(tenants)))


def hours(seconds) -> Decimal:
    """GPU-seconds as GPU-hours (exact Decimal)."""
    return Decimal(seconds or 0) / HOUR_SECONDS


# --- usage over time ---------------------------------------------------------------------------------


@dataclass
class DailyUsage:
    """GPU-hours per day and class (busy and dark), plus idle capacity per day when the whole fleet is shown."""

    days: list[date]
    by_class: dict[str, dict[date, Decimal]]
    dark: dict[date, Decimal]
    idle: dict[date, Decimal] | None  # None for a tenant member: idle capacity is not theirs

    def total(self, klass: str) -> Decimal:
        return sum(self.by_class.get(klass, {}).values(), ZERO)


def daily_usage(*, session: Session, period: DateRange, tenants: frozenset[str] | None) -> DailyUsage:
    """GPU-hours by class per day (and idle = capacity - used for the whole fleet)."""
    in_db = day_column(session, UsageRollup.hour, period.tz)
    day_of = (lambda d: d) if in_db is not None else DayOf(period.tz)
    bucket = UsageRollup.hour if in_db is None else in_db
    query = (
        select(bucket, UsageRollup.klass, UsageRollup.dark, func.sum(UsageRollup.gpu_seconds))
        .where(UsageRollup.hour >= period.start_utc, UsageRollup.hour < period.end_utc)
        .group_by(bucket, UsageRollup.klass, UsageRollup.dark)
    )
    # Seconds are summed per day first and divided once: a Decimal division per row costs more than the query.
    by_class: dict[str, dict[date, Decimal]] = defaultdict(lambda: defaultdict(lambda: ZERO))
    dark: dict[date, Decimal] = defaultdict(lambda: ZERO)
    used: dict[date, Decimal] = defaultdict(lambda: ZERO)
    if tenants is None or tenants:
        for hour, klass, is_dark, seconds in session.exec(_tenant_filter(query, tenants)):
            day = day_of(hour)
            seconds = seconds or ZERO
            by_class[klass][day] += seconds
            used[day] += seconds
            if is_dark:
                dark[day] += seconds
    idle = None
    if tenants is None:
        capacity: dict[date, Decimal] = defaultdict(lambda: ZERO)
        cap_bucket = PoolHourRollup.hour if in_db is None else day_column(session, PoolHourRollup.hour, period.tz)
        rows = session.exec(
            select(cap_bucket, func.sum(PoolHourRollup.capacity_gpu_seconds))
            .where(PoolHourRollup.hour >= period.start_utc, PoolHourRollup.hour < period.end_utc)
            .group_by(cap_bucket)
        )
        for hour, seconds in rows:
            capacity[day_of(hour)] += seconds or ZERO
        idle = {day: hours(max(ZERO, cap - used.get(day, ZERO))) for day, cap in capacity.items()}
    return DailyUsage(
        days=days_of(period),
        by_class={k: {d: hours(v) for d, v in per_day.items()} for k, per_day in by_class.items()},
        dark={d: hours(v) for d, v in dark.items()},
        idle=idle,
    )


# --- fleet -------------------------------------------------------------------------------------------


@dataclass
class Occupancy:
    """Used GPU-seconds / capacity per pool and bucket (a day, or an hour for short ranges)."""

    buckets: list[datetime | date]
    hourly: bool
    pools: list[str]
    cells: dict[str, dict]  # pool -> bucket -> Decimal fraction, absent where nothing was ingested
    gpus: dict[str, int]  # pool -> GPUs in the last ingested hour
    totals: dict[str, Decimal]  # pool -> occupancy over the whole range


HOURLY_MAX_DAYS = 3


def occupancy(*, session: Session, period: DateRange) -> Occupancy:
    """Occupancy of each pool per hour (ranges up to 3 days) or per day."""
    hourly = (period.end - period.start).days + 1 <= HOURLY_MAX_DAYS
    day_of = DayOf(period.tz)
    key = (lambda h: aware(h).astimezone(period.tz)) if hourly else day_of
    capacity: dict[str, dict] = defaultdict(lambda: defaultdict(lambda: ZERO))
    used: dict[str, dict] = defaultdict(lambda: defaultdict(lambda: ZERO))
    gpus: dict[str, tuple[datetime, int]] = {}
    rows = session.exec(
        select(PoolHourRollup.hour, PoolHourRollup.pool, PoolHourRollup.capacity_gpu_seconds, PoolHourRollup.gpus)
        .where(PoolHourRollup.hour >= period.start_utc, PoolHourRollup.hour < period.end_utc)
    )
    for hour, pool, cap, n in rows:
        capacity[pool][key(hour)] += Decimal(cap)
        if pool not in gpus or aware(hour) > gpus[pool][0]:
            gpus[pool] = (aware(hour), n)
    rows = session.exec(
        select(UsageRollup.hour, UsageRollup.pool, func.sum(UsageRollup.gpu_seconds))
        .where(UsageRollup.hour >= period.start_utc, UsageRollup.hour < period.end_utc)
        .group_by(UsageRollup.hour, UsageRollup.pool)
    )
    for hour, pool, seconds in rows:
        used[pool][key(hour)] += Decimal(seconds or 0)
    if hourly:
        start = aware(period.start_utc)
        buckets = [(start + timedelta(hours=i)).astimezone(period.tz)
                   for i in range(int((period.end_utc - period.start_utc).total_seconds() // 3600))]
    else:
        buckets = days_of(period)
    pools = sorted(capacity)
    cells = {p: {b: min(Decimal(1), used[p][b] / c) for b, c in capacity[p].items() if c > 0} for p in pools}
    totals = {}
    for p in pools:
        cap = sum(capacity[p].values(), ZERO)
        totals[p] = sum(used[p].values(), ZERO) / cap if cap else ZERO
    return Occupancy(buckets=buckets, hourly=hourly, pools=pools, cells=cells,
                     gpus={p: g[1] for p, g in gpus.items()}, totals=totals)


# --- ingestion health --------------------------------------------------------------------------------


@dataclass
class IngestionHealth:
    last_ok: datetime | None
    lag: timedelta | None  # now - end of the last ingested hour
    gaps: list[IngestHour] = field(default_factory=list)  # in range, newest first (at most 10 shown)
    gap_count: int = 0
    ok_count: int = 0
    mean_duration_s: float | None = None
    quality: FindingsSummary = field(default_factory=FindingsSummary)  # use cut at capacity, in range

    @property
    def lag_hours(self) -> float | None:
        return None if self.lag is None else self.lag.total_seconds() / 3600


def ingestion_health(*, session: Session, period: DateRange, now: datetime) -> IngestionHealth:
    """Lag of the newest ingested hour behind `now`, and gap hours in the range."""
    last_ok = session.exec(select(func.max(IngestHour.hour)).where(IngestHour.status == "ok")).one()
    in_range = (IngestHour.hour >= period.start_utc, IngestHour.hour < period.end_utc)
    counts = session.exec(
        select(
            func.sum(case((IngestHour.status == "ok", 1), else_=0)),
            func.sum(case((IngestHour.status == "gap", 1), else_=0)),
            func.avg(case((IngestHour.status == "ok", IngestHour.duration_s), else_=None)),
        ).where(*in_range)
    ).one()
    gaps = list(
        session.exec(
            select(IngestHour).where(*in_range, IngestHour.status == "gap").order_by(col(IngestHour.hour).desc()).limit(10)
        )
    )
    last = None if last_ok is None else aware(last_ok)
    return IngestionHealth(
        last_ok=last,
        lag=None if last is None else max(timedelta(0), now - (last + timedelta(hours=1))),
        gaps=gaps, gap_count=int(counts[1] or 0), ok_count=int(counts[0] or 0),
        mean_duration_s=None if counts[2] is None else float(counts[2]),
        quality=findings_summary(session=session, start=period.start_utc, end=period.end_utc),
    )


# --- dark time ----------------------------------------------------------------------------------------


@dataclass
class DarkShare:
    pool_minutes: int
    dark_minutes: int
    used_hours: Decimal
    dark_hours: Decimal

    @property
    def minute_share(self) -> Decimal | None:
        return None if not self.pool_minutes else Decimal(self.dark_minutes) / Decimal(self.pool_minutes)

    @property
    def hour_share(self) -> Decimal | None:
        return None if not self.used_hours else self.dark_hours / self.used_hours


def dark_share(*, session: Session, period: DateRange, tenants: frozenset[str] | None) -> DarkShare:
    """Share of pool-minutes that were dark, and share of GPU-hours used in dark time."""
    pool_hours, dark_minutes = session.exec(
        select(func.count(), func.sum(PoolHourRollup.dark_minutes))
        .where(PoolHourRollup.hour >= period.start_utc, PoolHourRollup.hour < period.end_utc)
    ).one()
    used = ZERO
    dark = ZERO
    if tenants is None or tenants:
        query = _tenant_filter(
            select(UsageRollup.dark, func.sum(UsageRollup.gpu_seconds))
            .where(UsageRollup.hour >= period.start_utc, UsageRollup.hour < period.end_utc)
            .group_by(UsageRollup.dark),
            tenants,
        )
        for is_dark, seconds in session.exec(query):
            used += hours(seconds)
            if is_dark:
                dark += hours(seconds)
    return DarkShare(pool_minutes=int(pool_hours or 0) * 60, dark_minutes=int(dark_minutes or 0),
                     used_hours=used, dark_hours=dark)
