"""The usage read side, from the hourly rollups (never Prometheus per request): GPU-hours grouped by
tenant, pool, class or department, per day with idle capacity, the dark-time share, and coverage.

GPU-hours have one definition for the overview, /api/v1/usage and the invoice: the GPU-seconds of
each (tenant, pool, class, busy|dark) cell of the range, as GPU-hours rounded to the micro-hour
(the invoice's quantity precision), then added. The database sums; Python only folds cells and
hours into days of the billing time zone, so every query returns at most (hours x a few keys) rows.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from decimal import Decimal
from zoneinfo import ZoneInfo

from sqlalchemy import func, select
from sqlmodel import Session

from app.core.errors import FieldError, Invalid
from app.core.timeutil import SECONDS_PER_HOUR, aware, floor_hour
from app.metrics.cluster_hours import ClusterHours, cluster_counts, hour_states, scope
from app.metrics.date_ranges import MAX_RANGE_DAYS, DateRange, DayOf, day_column, days_of
from app.metrics.efficiency import mean_activity
from app.metrics.models import IngestStatus, PoolHourRollup, UsageRollup
from app.metrics.visibility import readable
from app.policy.models import PolicyVersion

ZERO = Decimal(0)
GPU_HOURS = Decimal("0.000001")  # the invoice's quantity precision
NO_HOURS = ZERO.quantize(GPU_HOURS)  # "0.000000", as the invoice prints an empty cell
GROUPS = ("tenant", "pool", "class", "department")
CLASSES = ("inference", "training", "preprocessing", "unallocated")


def hours(seconds) -> Decimal:
    """GPU-seconds as GPU-hours (exact Decimal)."""
    return Decimal(seconds or 0) / SECONDS_PER_HOUR


@dataclass(frozen=True)
class UsageCell:
    """One tenant's use of one pool in one class over a range, as the invoice states it."""

    tenant: str
    pool: str
    klass: str
    busy_gpu_hours: Decimal
    dark_gpu_hours: Decimal
    activity_sum: float
    activity_samples: int

    @property
    def gpu_hours(self) -> Decimal:
        return self.busy_gpu_hours + self.dark_gpu_hours


def _in_cluster(table, cluster: str | None) -> list:
    """The WHERE clause of one cluster's rows (none: every cluster)."""
    return [] if cluster is None else [table.cluster == cluster]


def usage_cells(*, session: Session, start: datetime, end: datetime, tenants: frozenset[str] | None,
                cluster: str | None = None) -> list[UsageCell]:
    """GPU-hours (busy, dark) and activity per tenant, pool and class in [start, end), for the tenants the viewer may
    read (of one cluster when given)."""
    stmt = readable(
        select(UsageRollup.tenant, UsageRollup.pool, UsageRollup.klass, UsageRollup.dark, func.sum(UsageRollup.gpu_seconds),
               func.sum(UsageRollup.activity_sum), func.sum(UsageRollup.activity_samples))
        .where(UsageRollup.hour >= start, UsageRollup.hour < end, *_in_cluster(UsageRollup, cluster))
        .group_by(UsageRollup.tenant, UsageRollup.pool, UsageRollup.klass, UsageRollup.dark),
        UsageRollup, tenants,
    )
    acc: dict[tuple[str, str, str], list] = defaultdict(lambda: [NO_HOURS, NO_HOURS, 0.0, 0])
    for tenant, pool, klass, dark, seconds, activity, samples in session.execute(stmt):
        a = acc[(tenant, pool, klass)]
        a[1 if dark else 0] = hours(seconds).quantize(GPU_HOURS)
        a[2] += float(activity or 0)
        a[3] += int(samples or 0)
    return [UsageCell(t, p, k, busy, dark, activity, samples)
            for (t, p, k), (busy, dark, activity, samples) in sorted(acc.items())]


# --- /api/v1/usage ---------------------------------------------------------------------------------------


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
    elif end - start > timedelta(days=MAX_RANGE_DAYS):
        errors.append(FieldError("query.end", f"a range spans at most {MAX_RANGE_DAYS} days"))
    if errors:
        raise Invalid("The usage query is not valid", errors)

    departments = departments_at(session, end) if group_by == "department" else {}
    groups: dict[str, list] = defaultdict(lambda: [NO_HOURS, NO_HOURS, 0.0, 0])
    for cell in usage_cells(session=session, start=start, end=end, tenants=tenants):
        key = {"pool": cell.pool, "class": cell.klass}.get(group_by, cell.tenant)
        if group_by == "department":
            key = departments.get(key, "unallocated" if key == "unallocated" else "unassigned")
        g = groups[key]
        g[0] += cell.busy_gpu_hours
        g[1] += cell.dark_gpu_hours
        g[2] += cell.activity_sum
        g[3] += cell.activity_samples
    rows = [
        {
            "key": key,
            "busy_gpu_hours": busy,
            "dark_gpu_hours": dark,
            "gpu_hours": busy + dark,
            "efficiency": mean_activity(activity, samples),
        }
        for key, (busy, dark, activity, samples) in sorted(groups.items())
    ]
    states = list(hour_states(session=session, start=start, end=end, clusters=scope()).values())
    return {
        "start": start,
        "end": end,
        "group_by": group_by,
        "rows": rows,
        "hours_expected": int((end - start).total_seconds() // SECONDS_PER_HOUR),
        "hours_ok": states.count(IngestStatus.OK),
        "gap_hours": states.count(IngestStatus.GAP),
    }


def departments_at(session: Session, end: datetime) -> dict[str, str]:
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


# --- the overview ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TenantClassHours:
    tenant: str
    klass: str
    gpu_hours: Decimal


def gpu_hours_by_tenant_class(
    *, session: Session, period: DateRange, tenants: frozenset[str] | None, cluster: str | None = None
) -> list[TenantClassHours]:
    """GPU-hours per tenant and workload class in `period` (dark and busy time), largest tenants first."""
    if tenants is not None and not tenants:
        return []
    by_key: dict[tuple[str, str], Decimal] = defaultdict(lambda: ZERO)
    for cell in usage_cells(session=session, start=period.start_utc, end=period.end_utc, tenants=tenants,
                            cluster=cluster):
        by_key[(cell.tenant, cell.klass)] += cell.gpu_hours
    rows = [TenantClassHours(tenant=t, klass=k, gpu_hours=h) for (t, k), h in by_key.items()]
    totals: dict[str, Decimal] = defaultdict(lambda: ZERO)
    for row in rows:
        totals[row.tenant] += row.gpu_hours
    return sorted(rows, key=lambda r: (-totals[r.tenant], r.tenant, r.klass))


@dataclass(frozen=True)
class Coverage:
    """How much of a range the rollups cover: ingested hours, gap hours, hours not yet tried.

    `hours` counts the range's finished hours (an hour is ingested after it ends); `expected` every hour of
    the range, finished or not (a month's 744), so "2 of 744 hours" reads the same on every page.
    """

    hours: int
    ok: int
    gaps: int
    expected: int | None = None
    # With several clusters in scope: each one's ok and gap hours (an hour is ok above only when ok in every one).
    clusters: tuple[ClusterHours, ...] = ()

    @property
    def missing(self) -> int:
        return max(0, self.hours - self.ok - self.gaps)

    @property
    def total(self) -> int:
        return self.hours if self.expected is None else self.expected

    @property
    def partial(self) -> bool:
        """Fewer hours ingested than the range holds: its figures are not the whole range's."""
        return self.ok < self.total

    @property
    def in_progress(self) -> bool:
        """The range has not ended yet (hours still to come, not missing)."""
        return self.hours < self.total


def hours_coverage(*, session: Session, start: datetime, end: datetime, now: datetime,
                   cluster: str | None = None) -> Coverage:
    """Ingestion coverage of the UTC hours [start, end): every hour expected, those finished by `now` due.

    Of one cluster, or (None) of the fleet: an hour counts as ingested when every cluster's is (cluster_hours).
    """
    start, end = aware(start), aware(end)
    expected = max(0, int((end - start).total_seconds() // SECONDS_PER_HOUR))
    done_until = min(end, floor_hour(now))
    hours_done = max(0, int((done_until - start).total_seconds() // SECONDS_PER_HOUR))
    clusters = scope(cluster)
    states = list(hour_states(session=session, start=start, end=end, clusters=clusters).values())
    per_cluster = tuple(cluster_counts(session=session, start=start, end=end, clusters=clusters)) if len(clusters) > 1 else ()
    return Coverage(hours=hours_done, ok=states.count(IngestStatus.OK), gaps=states.count(IngestStatus.GAP),
                    expected=expected, clusters=per_cluster)


def coverage(*, session: Session, period: DateRange, now: datetime, cluster: str | None = None) -> Coverage:
    """Ingestion coverage of `period` up to `now` (future hours are not counted as missing)."""
    return hours_coverage(session=session, start=period.start_utc, end=period.end_utc, now=now, cluster=cluster)


def ingested_days(*, session: Session, period: DateRange, hourly: bool = False,
                  cluster: str | None = None) -> set[date] | set[datetime]:
    """Days of the range with at least one ingested hour (in every cluster of the scope): the others have no figures
    (charts draw a gap, not 0). `hourly`: the ingested hours themselves (local time), for a chart by hour."""
    day_of = _local_hour(period.tz) if hourly else DayOf(period.tz)
    states = hour_states(session=session, start=period.start_utc, end=period.end_utc, clusters=scope(cluster))
    return {day_of(hour) for hour, state in states.items() if state == IngestStatus.OK}


# --- usage over time -------------------------------------------------------------------------------------


@dataclass
class DailyUsage:
    """GPU-hours per day and class (busy and dark), plus idle capacity per day when the whole fleet is shown."""

    days: list[date]
    by_class: dict[str, dict[date, Decimal]]
    dark: dict[date, Decimal]
    idle: dict[date, Decimal] | None  # None for a tenant member: idle capacity is not theirs

    def total(self, klass: str) -> Decimal:
        return sum(self.by_class.get(klass, {}).values(), ZERO)


def _local_hour(tz: ZoneInfo):
    return lambda hour: aware(hour).astimezone(tz)


def hours_of(period: DateRange) -> list[datetime]:
    """Every hour of the range, in the billing time zone."""
    start, end = period.start_utc, period.end_utc
    return [(start + timedelta(hours=i)).astimezone(period.tz) for i in range(int((end - start).total_seconds()) // SECONDS_PER_HOUR)]


def daily_usage(*, session: Session, period: DateRange, tenants: frozenset[str] | None, hourly: bool = False,
                cluster: str | None = None) -> DailyUsage:
    """GPU-hours by class per day (and idle = capacity - used for the whole fleet); `hourly`: per hour instead
    (a short range), keyed by the local hour."""
    in_db = None if hourly else day_column(session, UsageRollup.hour, period.tz)
    day_of = (lambda d: d) if in_db is not None else (_local_hour(period.tz) if hourly else DayOf(period.tz))
    bucket = UsageRollup.hour if in_db is None else in_db
    query = (
        select(bucket, UsageRollup.klass, UsageRollup.dark, func.sum(UsageRollup.gpu_seconds))
        .where(UsageRollup.hour >= period.start_utc, UsageRollup.hour < period.end_utc, *_in_cluster(UsageRollup, cluster))
        .group_by(bucket, UsageRollup.klass, UsageRollup.dark)
    )
    # Seconds are summed per day first and divided once: a Decimal division per row costs more than the query.
    by_class: dict[str, dict[date, Decimal]] = defaultdict(lambda: defaultdict(lambda: ZERO))
    dark: dict[date, Decimal] = defaultdict(lambda: ZERO)
    used: dict[date, Decimal] = defaultdict(lambda: ZERO)
    if tenants is None or tenants:
        for hour, klass, is_dark, seconds in session.execute(readable(query, UsageRollup, tenants)):
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
        rows = session.execute(
            select(cap_bucket, func.sum(PoolHourRollup.capacity_gpu_seconds))
            .where(PoolHourRollup.hour >= period.start_utc, PoolHourRollup.hour < period.end_utc,
                   *_in_cluster(PoolHourRollup, cluster))
            .group_by(cap_bucket)
        )
        for hour, seconds in rows:
            capacity[day_of(hour)] += seconds or ZERO
        idle = {day: hours(max(ZERO, cap - used.get(day, ZERO))) for day, cap in capacity.items()}
    return DailyUsage(
        days=hours_of(period) if hourly else days_of(period),
        by_class={k: {d: hours(v) for d, v in per_day.items()} for k, per_day in by_class.items()},
        dark={d: hours(v) for d, v in dark.items()},
        idle=idle,
    )


def daily_gpu_hours_by_tenant(*, session: Session, period: DateRange,
                              tenants: frozenset[str] | None) -> dict[str, list[Decimal]]:
    """Exact GPU-hours per tenant and day of the range (the tenants page's sparklines)."""
    days = days_of(period)
    index = {d: i for i, d in enumerate(days)}
    day_of = DayOf(period.tz)
    out: dict[str, list[Decimal]] = {}
    query = readable(
        select(UsageRollup.hour, UsageRollup.tenant, func.sum(UsageRollup.gpu_seconds))
        .where(UsageRollup.hour >= period.start_utc, UsageRollup.hour < period.end_utc)
        .group_by(UsageRollup.hour, UsageRollup.tenant),
        UsageRollup, tenants,
    )
    for hour, tenant, seconds in session.execute(query):
        i = index.get(day_of(hour))
        if i is not None:
            out.setdefault(tenant, [ZERO] * len(days))[i] += hours(seconds)
    return out


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


def dark_share(*, session: Session, period: DateRange, tenants: frozenset[str] | None,
               cluster: str | None = None) -> DarkShare:
    """Share of pool-minutes that were dark, and share of GPU-hours used in dark time (of one cluster when given)."""
    pool_hours, dark_minutes = session.execute(
        select(func.count(), func.sum(PoolHourRollup.dark_minutes))
        .where(PoolHourRollup.hour >= period.start_utc, PoolHourRollup.hour < period.end_utc,
               *_in_cluster(PoolHourRollup, cluster))
    ).one()
    used = ZERO
    dark = ZERO
    if tenants is None or tenants:
        query = readable(
            select(UsageRollup.dark, func.sum(UsageRollup.gpu_seconds))
            .where(UsageRollup.hour >= period.start_utc, UsageRollup.hour < period.end_utc,
                   *_in_cluster(UsageRollup, cluster))
            .group_by(UsageRollup.dark),
            UsageRollup, tenants,
        )
        for is_dark, seconds in session.execute(query):
            used += hours(seconds)
            if is_dark:
                dark += hours(seconds)
    return DarkShare(pool_minutes=int(pool_hours or 0) * 60, dark_minutes=int(dark_minutes or 0),
                     used_hours=used, dark_hours=dark)
