"""Occupancy read side: used GPU-seconds over capacity per pool, per hour or per day, from the rollups."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from decimal import Decimal

from sqlalchemy import func
from sqlmodel import Session, select

from app.core.timeutil import SECONDS_PER_HOUR, aware
from app.metrics.date_ranges import DateRange, DayOf, days_of
from app.metrics.models import PoolHourRollup, UsageRollup

ZERO = Decimal(0)


@dataclass
class Occupancy:
    """Used GPU-seconds / capacity per pool and bucket (a day, or an hour for short ranges)."""

    buckets: list[datetime | date]
    hourly: bool
    pools: list[str]
    cells: dict[str, dict]  # pool -> bucket -> Decimal fraction, absent where nothing was ingested
    gpus: dict[str, int]  # pool -> GPUs in the last ingested hour
    totals: dict[str, Decimal]  # pool -> occupancy over the whole range
    clusters: dict[str, list[str]] = field(default_factory=dict)  # pool -> the clusters its rollups came from


HOURLY_MAX_DAYS = 3


def occupancy(*, session: Session, period: DateRange, cluster: str | None = None) -> Occupancy:
    """Occupancy of each pool per hour (ranges up to 3 days) or per day, of one cluster's pools when given
    (`unpooled` then means that cluster's; unfiltered, every cluster's together)."""
    hourly = (period.end - period.start).days + 1 <= HOURLY_MAX_DAYS
    day_of = DayOf(period.tz)
    key = (lambda h: aware(h).astimezone(period.tz)) if hourly else day_of
    capacity: dict[str, dict] = defaultdict(lambda: defaultdict(lambda: ZERO))
    used: dict[str, dict] = defaultdict(lambda: defaultdict(lambda: ZERO))
    gpus: dict[str, tuple[datetime, int]] = {}
    clusters: dict[str, set[str]] = defaultdict(set)
    rows = session.exec(
        select(PoolHourRollup.hour, PoolHourRollup.pool, PoolHourRollup.capacity_gpu_seconds, PoolHourRollup.gpus,
               PoolHourRollup.cluster)
        .where(PoolHourRollup.hour >= period.start_utc, PoolHourRollup.hour < period.end_utc,
               *([] if cluster is None else [PoolHourRollup.cluster == cluster]))
    )
    for hour, pool, cap, n, in_cluster in rows:
        capacity[pool][key(hour)] += Decimal(cap)
        clusters[pool].add(in_cluster)
        if pool not in gpus or aware(hour) > gpus[pool][0]:
            gpus[pool] = (aware(hour), n)
        elif aware(hour) == gpus[pool][0]:  # `unpooled` of several clusters in the same hour
            gpus[pool] = (aware(hour), gpus[pool][1] + n)
    rows = session.exec(
        select(UsageRollup.hour, UsageRollup.pool, func.sum(UsageRollup.gpu_seconds))
        .where(UsageRollup.hour >= period.start_utc, UsageRollup.hour < period.end_utc,
               *([] if cluster is None else [UsageRollup.cluster == cluster]))
        .group_by(UsageRollup.hour, UsageRollup.pool)
    )
    for hour, pool, seconds in rows:
        used[pool][key(hour)] += Decimal(seconds or 0)
    if hourly:
        start = aware(period.start_utc)
        buckets = [(start + timedelta(hours=i)).astimezone(period.tz)
                   for i in range(int((period.end_utc - period.start_utc).total_seconds() // SECONDS_PER_HOUR))]
    else:
        buckets = days_of(period)
    pools = sorted(capacity)
    cells = {p: {b: min(Decimal(1), used[p][b] / c) for b, c in capacity[p].items() if c > 0} for p in pools}
    totals = {}
    for p in pools:
        cap = sum(capacity[p].values(), ZERO)
        totals[p] = sum(used[p].values(), ZERO) / cap if cap else ZERO
    return Occupancy(buckets=buckets, hourly=hourly, pools=pools, cells=cells,
                     gpus={p: g[1] for p, g in gpus.items()}, totals=totals,
                     clusters={p: sorted(c) for p, c in clusters.items()})
