"""Usage per namespace over a range: `namespace_usage` rows, and the hours ingested before it existed.

Each usage rollup row's namespaces add up to it exactly (attribution splits it so), so the usage of
a range is the namespace rows of the hours that have them plus, as NOT_RECORDED, the usage rows of
the hours ingested before the namespace table existed (hours with usage but no namespace row).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from sqlalchemy import func, select
from sqlmodel import Session

from app.metrics.models import NamespaceUsage, PoolHourRollup, UsageRollup
from app.metrics.visibility import readable

NOT_RECORDED = "(not recorded)"  # hours ingested before namespaces were kept


@dataclass(frozen=True)
class NamespaceCell:
    """One namespace's use of one pool, as one tenant and class, in busy or dark time, over a range."""

    tenant: str
    pool: str
    klass: str
    dark: bool
    namespace: str
    gpu_seconds: Decimal
    activity_sum: float
    activity_samples: int
    cluster: str = ""  # "" where not read per cluster (a rated period's stored usage)


def namespace_cells(*, session: Session, start: datetime, end: datetime,
                    tenants: frozenset[str] | None, cluster: str | None = None) -> list[NamespaceCell]:
    """GPU-seconds and activity per (tenant, cluster, pool, class, dark, namespace) in [start, end), for the tenants
    the viewer may read (of one cluster when given)."""
    if tenants is not None and not tenants:
        return []
    in_ns = [] if cluster is None else [NamespaceUsage.cluster == cluster]
    in_usage = [] if cluster is None else [UsageRollup.cluster == cluster]
    recorded = (select(NamespaceUsage.hour).where(NamespaceUsage.hour >= start, NamespaceUsage.hour < end, *in_ns)
                .distinct())
    by_namespace = readable(
        select(NamespaceUsage.tenant, NamespaceUsage.pool, NamespaceUsage.klass, NamespaceUsage.dark,
               NamespaceUsage.namespace, func.sum(NamespaceUsage.gpu_seconds), func.sum(NamespaceUsage.activity_sum),
               func.sum(NamespaceUsage.activity_samples), NamespaceUsage.cluster)
        .where(NamespaceUsage.hour >= start, NamespaceUsage.hour < end, *in_ns)
        .group_by(NamespaceUsage.tenant, NamespaceUsage.pool, NamespaceUsage.klass, NamespaceUsage.dark,
                  NamespaceUsage.namespace, NamespaceUsage.cluster),
        NamespaceUsage, tenants,
    )
    unrecorded = readable(
        select(UsageRollup.tenant, UsageRollup.pool, UsageRollup.klass, UsageRollup.dark,
               func.sum(UsageRollup.gpu_seconds), func.sum(UsageRollup.activity_sum), func.sum(UsageRollup.activity_samples),
               UsageRollup.cluster)
        .where(UsageRollup.hour >= start, UsageRollup.hour < end, UsageRollup.hour.not_in(recorded), *in_usage)
        .group_by(UsageRollup.tenant, UsageRollup.pool, UsageRollup.klass, UsageRollup.dark, UsageRollup.cluster),
        UsageRollup, tenants,
    )
    cells = [NamespaceCell(t, p, k, bool(d), ns, Decimal(str(s or 0)), float(a or 0), int(n or 0), c)
             for t, p, k, d, ns, s, a, n, c in session.execute(by_namespace)]
    cells += [NamespaceCell(t, p, k, bool(d), NOT_RECORDED, Decimal(str(s or 0)), float(a or 0), int(n or 0), c)
              for t, p, k, d, s, a, n, c in session.execute(unrecorded)]
    return sorted(cells, key=lambda c: (c.tenant, c.pool, c.klass, c.dark, c.namespace, c.cluster))


def capacity_by_pool(*, session: Session, start: datetime, end: datetime,
                     cluster: str | None = None) -> dict[str, Decimal]:
    """Capacity GPU-seconds per pool in [start, end), of one cluster when given (staff only: capacity is nobody's
    tenant data)."""
    rows = session.execute(
        select(PoolHourRollup.pool, func.sum(PoolHourRollup.capacity_gpu_seconds))
        .where(PoolHourRollup.hour >= start, PoolHourRollup.hour < end,
               *([] if cluster is None else [PoolHourRollup.cluster == cluster]))
        .group_by(PoolHourRollup.pool)
    )
    return {pool: Decimal(str(seconds or 0)) for pool, seconds in rows}
