"""Ingest status across clusters: the one rule for whether an hour of the fleet (or of one cluster) is ingested.

Each cluster's hours are ingested on their own (`IngestHour` per cluster and hour). A figure over the
whole fleet covers an hour only when every configured cluster's hour is ok; an hour in which any
cluster is a gap is a gap (the others' rollups are stored and billed; the gap cluster's are not);
otherwise an hour some cluster has not tried yet is not ingested. A figure for one cluster reads that
cluster's rows alone. Clusters no longer configured keep their rows, but no longer count here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import case, func, select
from sqlmodel import Session

from app.core.timeutil import aware, hours_between
from app.metrics.models import IngestHour, IngestStatus, PoolHourRollup
from app.policy.document import UNPOOLED


def scope(cluster: str | None = None) -> list[str]:
    """The clusters a figure covers: the one asked for, else every configured cluster."""
    if cluster:
        return [cluster]
    from app.core.settings import get_settings

    return get_settings().cluster_names()


def _counts(session: Session, start: datetime, end: datetime, clusters: Sequence[str], by) -> list:
    """(key, ok rows, gap rows) of the clusters' hours in [start, end), grouped by `by` (the hour, or the cluster)."""
    return session.execute(
        select(by, func.sum(case((IngestHour.status == IngestStatus.OK, 1), else_=0)),
               func.sum(case((IngestHour.status == IngestStatus.GAP, 1), else_=0)))
        .where(IngestHour.hour >= aware(start), IngestHour.hour < aware(end), IngestHour.cluster.in_(list(clusters)))
        .group_by(by)
    ).all()


def hour_states(*, session: Session, start: datetime, end: datetime, clusters: Sequence[str]) -> dict[datetime, str]:
    """Hour start -> `ok` (every cluster's hour ok) or `gap` (some cluster's a gap) for the hours of [start, end) that
    are either; an hour absent is not ingested yet in some cluster."""
    rows = _counts(session, start, end, clusters, IngestHour.hour)
    need = len(set(clusters))
    out: dict[datetime, str] = {}
    for hour, ok, gaps in rows:
        if gaps:
            out[aware(hour)] = IngestStatus.GAP
        elif ok == need:
            out[aware(hour)] = IngestStatus.OK
    return out


def never_ingested(*, session: Session, start: datetime, end: datetime,
                   clusters: Sequence[str]) -> dict[str, list[datetime]]:
    """Cluster -> the hours of [start, end) it has never attempted (no row, neither ok nor gap), for the clusters
    with any: these block a close until ingested (SPEC 4), unlike gaps, which can be accepted with a reason."""
    rows = session.execute(
        select(IngestHour.cluster, IngestHour.hour)
        .where(IngestHour.hour >= aware(start), IngestHour.hour < aware(end), IngestHour.cluster.in_(list(clusters)))
    ).all()
    seen: dict[str, set[datetime]] = {c: set() for c in clusters}
    for cluster, hour in rows:
        seen[cluster].add(aware(hour))
    every = hours_between(aware(start), aware(end))
    out = {c: [h for h in every if h not in seen[c]] for c in dict.fromkeys(clusters)}
    return {c: hours for c, hours in out.items() if hours}


@dataclass(frozen=True)
class ClusterHours:
    """One cluster's ingest status over a range: ok and gap hours (the rest are not tried yet)."""

    cluster: str
    ok: int
    gaps: int


def latest_ingest(*, session: Session, start: datetime, end: datetime) -> datetime | None:
    """When an hour of [start, end) was last ingested (any cluster); None when none was."""
    return session.execute(select(func.max(IngestHour.ingested_at))
                           .where(IngestHour.hour >= start, IngestHour.hour < end)).scalar_one()


def cluster_counts(*, session: Session, start: datetime, end: datetime, clusters: Sequence[str]) -> list[ClusterHours]:
    """Ok and gap hours of [start, end) per cluster, in the order given (a cluster with no row counts zero)."""
    rows = _counts(session, start, end, clusters, IngestHour.cluster)
    found = {cluster: (int(ok or 0), int(gaps or 0)) for cluster, ok, gaps in rows}
    return [ClusterHours(c, *found.get(c, (0, 0))) for c in clusters]


def pool_clusters(*, session: Session, start: datetime, end: datetime) -> dict[str, str]:
    """Named pool -> the cluster its rollups in [start, end) came from (`unpooled`, every cluster's, is left out)."""
    rows = session.execute(
        select(PoolHourRollup.pool, PoolHourRollup.cluster).distinct()
        .where(PoolHourRollup.hour >= aware(start), PoolHourRollup.hour < aware(end), PoolHourRollup.pool != UNPOOLED)
        .order_by(PoolHourRollup.pool, PoolHourRollup.cluster)
    ).all()
    return {pool: cluster for pool, cluster in rows}


def check_cluster(value: str | None, *, path: str = "query.cluster") -> str | None:
    """A cluster filter: "" or None for every cluster, else a configured cluster's name (422 naming `path`)."""
    if not value:
        return None
    known = scope()
    if value not in known:
        from app.core.errors import FieldError, Invalid

        raise Invalid(f"{value[:63]!r} is not a cluster", [FieldError(path, "one of: " + ", ".join(known))])
    return value
