"""Data-quality findings: what ingestion cut rather than billed, for /metrics, the health panel and statements."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal

from sqlalchemy import func
from sqlmodel import Session, col, select

from app.core.timeutil import aware
from app.metrics.models import DataQualityFinding


@dataclass
class FindingsSummary:
    count: int = 0
    gpu_seconds_cut: Decimal = Decimal(0)
    by_pool: dict[str, tuple[int, Decimal]] = field(default_factory=dict)  # pool -> (findings, GPU-seconds cut)
    newest: list[DataQualityFinding] = field(default_factory=list)  # at most 10, newest hour first


def findings_summary(*, session: Session, start: datetime | None = None,
                     end: datetime | None = None, cluster: str | None = None) -> FindingsSummary:
    """Findings in [start, end) (all when unbounded), of one cluster or all: counts and GPU-seconds cut, per pool
    and in total."""
    where = [] if cluster is None else [DataQualityFinding.cluster == cluster]
    if start is not None:
        where.append(DataQualityFinding.hour >= aware(start))
    if end is not None:
        where.append(DataQualityFinding.hour < aware(end))
    rows = session.exec(
        select(DataQualityFinding.pool, func.count(), func.sum(DataQualityFinding.gpu_seconds_cut))
        .where(*where).group_by(DataQualityFinding.pool)
    ).all()
    out = FindingsSummary()
    for pool, n, cut in rows:
        cut = Decimal(cut or 0)
        out.by_pool[pool] = (int(n), cut)
        out.count += int(n)
        out.gpu_seconds_cut += cut
    if out.count:
        out.newest = list(session.exec(select(DataQualityFinding).where(*where)
                                       .order_by(col(DataQualityFinding.hour).desc(), col(DataQualityFinding.id))
                                       .limit(10)))
    return out
