"""Per-unit read side (unit_hour): occupancy of a pool's GPUs or of one GPU's MIG instances per hour or day, the
last hours of every unit of a cluster (the live view's charts), and the inference tenants' stored FB_USED peaks
(memory headroom against the reserve)."""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from decimal import Decimal

from sqlalchemy import func
from sqlalchemy.orm import aliased
from sqlmodel import Session, select

from app.core.timeutil import SECONDS_PER_HOUR, aware
from app.metrics.date_ranges import DateRange, DayOf, day_column, days_of
from app.metrics.models import UnitHourRollup
from app.metrics.occupancy_read import HOURLY_MAX_DAYS

ZERO = Decimal(0)
U = UnitHourRollup


@dataclass
class UnitRowInfo:
    """One heatmap row: a physical GPU (pool view) or a MIG instance / whole GPU (GPU view)."""

    key: str  # the GPU's UUID, or the GPU instance id ("" for a whole GPU)
    label: str  # e.g. "gpu-a100-02 · GPU 3", "GI 1 · 3g.40gb"
    tenants: list[str] = field(default_factory=list)  # holder tenants seen over the range
    mig: bool = False  # a GPU partitioned into MIG instances (the pool view links down to them)


@dataclass
class UnitOccupancy:
    """Used GPU-seconds / capacity per unit row and bucket (a day, or an hour for short ranges)."""

    buckets: list[datetime | date]
    hourly: bool
    rows: list[UnitRowInfo]
    cells: dict[str, dict]  # row key -> bucket -> Decimal fraction, absent where nothing was ingested
    totals: dict[str, Decimal]  # row key -> occupancy over the range
    node: str = ""  # GPU view: its node
    gpu_index: str = ""


def _buckets(period: DateRange, hourly: bool) -> list:
    if not hourly:
        return days_of(period)
    start = aware(period.start_utc)
    hours = int((period.end_utc - period.start_utc).total_seconds() // SECONDS_PER_HOUR)
    return [(start + timedelta(hours=i)).astimezone(period.tz) for i in range(hours)]


def pool_nodes(*, session: Session, period: DateRange, pool: str, cluster: str | None = None) -> list[str]:
    """The nodes with unit-hours of `pool` in the range, in natural order ("node-2" before "node-10"): the heatmap's pages.

    A DISTINCT would read every unit-hour of the pool over the range (7.4 M rows a month at 10,000 GPUs); this walks
    the (pool, node, hour) index instead, one probe per node: the smallest node, then the smallest node after it."""
    def within(t) -> list:
        return [t.pool == pool, t.hour >= period.start_utc, t.hour < period.end_utc,
                *([] if cluster is None else [t.cluster == cluster])]

    walk = select(func.min(U.node).label("node")).where(*within(U)).cte("walk", recursive=True)
    after = aliased(UnitHourRollup)
    following = select(func.min(after.node)).where(*within(after), after.node > walk.c.node).scalar_subquery()
    walk = walk.union_all(select(following).where(walk.c.node.is_not(None)))
    nodes = session.exec(select(walk.c.node).where(walk.c.node.is_not(None))).all()
    return sorted(nodes, key=_natural)


def unit_occupancy(*, session: Session, period: DateRange, pool: str, gpu: str | None = None,
                   cluster: str | None = None, nodes: list[str] | None = None) -> UnitOccupancy:
    """Occupancy of each GPU of `pool` (MIG instances summed), or with `gpu` (a UUID) of each of its units; of one
    cluster's units when given (the same node name in two clusters is two nodes: their GPUs' UUIDs differ); of the
    GPUs on `nodes` only when given (a page of a large pool)."""
    hourly = (period.end - period.start).days + 1 <= HOURLY_MAX_DAYS
    bucket_col = None if hourly else day_column(session, U.hour, period.tz)
    when = bucket_col if bucket_col is not None else U.hour
    where = [U.hour >= period.start_utc, U.hour < period.end_utc, U.pool == pool,
             *([] if cluster is None else [U.cluster == cluster])]
    if gpu:
        where.append(U.gpu_uuid == gpu)
    if nodes is not None:
        where.append(U.node.in_(nodes))
    # One scan: per unit row and bucket, split by the holder tenants (a handful of combinations per row).
    extra = [U.gpu_instance, U.mig_profile] if gpu else []
    rows = session.exec(
        select(U.node, U.gpu_uuid, U.gpu_index, U.tenants, when, func.sum(U.gpu_seconds), func.sum(U.capacity_gpu_seconds),
               *extra)
        .where(*where).group_by(U.node, U.gpu_uuid, U.gpu_index, U.tenants, when, *extra)
    )
    day_of = DayOf(period.tz)
    used: dict[str, dict] = defaultdict(lambda: defaultdict(lambda: ZERO))
    capacity: dict[str, dict] = defaultdict(lambda: defaultdict(lambda: ZERO))
    info: dict[str, UnitRowInfo] = {}
    node = index = ""
    for n, uuid, gi_index, tenants, at, seconds, cap, *unit in rows:
        instance, profile = unit if gpu else ("", "")
        key = instance if gpu else uuid
        if bucket_col is not None:
            bucket = at if isinstance(at, date) else date.fromisoformat(str(at))
        else:
            bucket = aware(at).astimezone(period.tz) if hourly else day_of(at)
        used[key][bucket] += Decimal(seconds or 0)
        capacity[key][bucket] += Decimal(cap or 0)
        row = info.get(key)
        if row is None:
            if gpu:
                node, index = n, gi_index
                label = f"GI {instance} · {profile}" if instance else "whole GPU"
            else:
                label = f"{n} · GPU {gi_index}"
            row = info[key] = UnitRowInfo(key=key, label=label, mig=bool(instance))
        for tenant in tenants.split(","):
            if tenant and tenant not in row.tenants:
                row.tenants.append(tenant)
    for row in info.values():
        row.tenants.sort()
    ordered = sorted(info.values(), key=lambda r: _natural(r.label))
    cells = {k: {b: min(Decimal(1), used[k][b] / c) for b, c in capacity[k].items() if c > 0} for k in info}
    totals = {}
    for k in info:
        cap = sum(capacity[k].values(), ZERO)
        totals[k] = sum(used[k].values(), ZERO) / cap if cap else ZERO
    return UnitOccupancy(buckets=_buckets(period, hourly), hourly=hourly, rows=ordered, cells=cells, totals=totals,
                         node=node, gpu_index=index)


def _natural(text: str) -> tuple:
    """Sort "GPU 10" after "GPU 9"."""
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", text))


PEAK_WINDOW = timedelta(days=7)


def tenant_memory_peaks(*, session: Session, until: datetime, window: timedelta = PEAK_WINDOW) -> dict[str, float]:
    """Per tenant, the highest total FB_USED (MiB) its units held in any hour of the window, from the stored peaks.

    A unit's hourly peak counts for each tenant that held it in the hour, and a tenant's units are added within
    the hour (an upper bound when their peaks did not coincide), as the policy editor's Prometheus reading does.
    """
    rows = session.exec(
        select(U.hour, U.tenants, func.sum(U.fb_used_peak_mib))
        .where(U.hour >= until - window, U.hour < until, U.tenants != "", U.fb_used_peak_mib.is_not(None))
        .group_by(U.hour, U.tenants)
    )
    per_hour: dict[tuple, float] = defaultdict(float)
    for hour, tenants, mib in rows:
        for tenant in tenants.split(","):
            per_hour[(hour, tenant)] += float(mib or 0)
    peaks: dict[str, float] = {}
    for (_, tenant), mib in per_hour.items():
        peaks[tenant] = max(peaks.get(tenant, 0.0), mib)
    return peaks


RECENT_HOURS = 12


@dataclass
class RecentUnits:
    """The last hours of every unit of a cluster: the hours (UTC, oldest first) and, per (node, GPU UUID, GPU
    instance), each hour's occupancy (None where the hour holds no row for the unit) and its holder tenants."""

    hours: list[datetime]
    occupancy: dict[tuple[str, str, str], list[Decimal | None]]
    tenants: dict[tuple[str, str, str], list[str]]


def recent_units(*, session: Session, cluster: str, end: datetime, hours: int = RECENT_HOURS) -> RecentUnits:
    """Occupancy per unit (a whole GPU, or each MIG instance) of the `hours` hours before `end` (an hour boundary)."""
    end = aware(end)
    slots = [end - timedelta(hours=hours - i) for i in range(hours)]
    index = {h: i for i, h in enumerate(slots)}
    rows = session.exec(
        select(U.node, U.gpu_uuid, U.gpu_instance, U.hour, U.gpu_seconds, U.capacity_gpu_seconds, U.tenants)
        .where(U.cluster == cluster, U.hour >= slots[0], U.hour < end)
    )
    occupancy: dict[tuple[str, str, str], list[Decimal | None]] = {}
    tenants: dict[tuple[str, str, str], list[str]] = defaultdict(list)
    for node, uuid, instance, hour, seconds, capacity, holders in rows:
        key = (node, uuid, instance)
        values = occupancy.setdefault(key, [None] * hours)
        if capacity:
            values[index[aware(hour)]] = min(Decimal(1), Decimal(seconds or 0) / Decimal(capacity))
        for tenant in (holders or "").split(","):
            if tenant and tenant not in tenants[key]:
                tenants[key].append(tenant)
    return RecentUnits(hours=slots, occupancy=occupancy, tenants={k: sorted(v) for k, v in tenants.items()})
