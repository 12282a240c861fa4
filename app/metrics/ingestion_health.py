"""Ingestion health: one definition for the portal's /metrics gauges and the overview's health panel.

The lag is measured from the end of the newest hour ingested successfully and never negative; the
last duration is that of the ok hour ingested most recently. Counts cover [start, end) when given,
every hour otherwise (the /metrics gauges).

Of one cluster, or of the fleet: then an hour is ingested when it is in every cluster and a gap when
it is in any (cluster_hours), the newest ingested hour is the most behind cluster's (so the lag is
the worst cluster's), and `clusters` holds each cluster's own health.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy import case, func
from sqlmodel import Session, col, select

from app.core.timeutil import HOUR, SECONDS_PER_HOUR, aware
from app.metrics.cluster_hours import hour_states, scope
from app.metrics.models import IngestHour, IngestStatus
from app.metrics.quality import FindingsSummary, findings_summary

GAPS_SHOWN = 10


@dataclass
class IngestionHealth:
    last_ok: datetime | None  # start of the newest hour ingested successfully (in every cluster of the scope)
    lag: timedelta | None  # now - end of that hour, at least zero
    ok_count: int = 0
    gap_count: int = 0
    last_duration_s: float | None = None
    mean_duration_s: float | None = None
    gaps: list[IngestHour] = field(default_factory=list)  # newest first, at most GAPS_SHOWN
    quality: FindingsSummary = field(default_factory=FindingsSummary)  # use cut at capacity
    cluster: str | None = None  # None: the fleet
    last_at: datetime | None = None  # when the hour of last_duration_s was ingested
    clusters: list[IngestionHealth] = field(default_factory=list)  # each cluster's, when there are several

    @property
    def lag_seconds(self) -> float | None:
        return None if self.lag is None else self.lag.total_seconds()

    @property
    def lag_hours(self) -> float | None:
        return None if self.lag is None else self.lag.total_seconds() / SECONDS_PER_HOUR


def ingestion_health(*, session: Session, now: datetime, start: datetime | None = None,
                     end: datetime | None = None, cluster: str | None = None) -> IngestionHealth:
    """Lag behind `now`, ok and gap hours, durations and data-quality findings in [start, end) (all when unbounded),
    of `cluster` or of the whole fleet (with each cluster's health beside it when there are several)."""
    clusters = scope(cluster)
    parts = [_cluster_health(session=session, now=now, start=start, end=end, cluster=c) for c in clusters]
    if len(parts) == 1:
        return parts[0]
    first, last = session.exec(select(func.min(IngestHour.hour), func.max(IngestHour.hour))
                               .where(IngestHour.cluster.in_(clusters))).one()
    states = [] if first is None else list(hour_states(
        session=session, start=start or aware(first), end=end or aware(last) + HOUR, clusters=clusters).values())
    # The most behind cluster's newest hour (of those with any: one that never ingested shows in its own health).
    last_ok = min((p.last_ok for p in parts if p.last_ok is not None), default=None)
    done = [p for p in parts if p.last_duration_s is not None]
    counted = [(p.mean_duration_s, p.ok_count) for p in parts if p.mean_duration_s is not None and p.ok_count]
    mean = sum(m * n for m, n in counted) / sum(n for _, n in counted) if counted else None
    gaps = sorted((g for p in parts for g in p.gaps), key=lambda g: (g.hour, g.cluster), reverse=True)[:GAPS_SHOWN]
    return IngestionHealth(
        last_ok=last_ok, lag=None if last_ok is None else max(timedelta(0), aware(now) - (last_ok + HOUR)),
        ok_count=states.count(IngestStatus.OK), gap_count=states.count(IngestStatus.GAP),
        last_duration_s=max(done, key=lambda p: (p.last_at is not None, p.last_at or now)).last_duration_s if done else None,
        mean_duration_s=mean, gaps=gaps, quality=findings_summary(session=session, start=start, end=end),
        clusters=parts,
    )


def _cluster_health(*, session: Session, now: datetime, start: datetime | None, end: datetime | None,
                    cluster: str) -> IngestionHealth:
    where = [IngestHour.cluster == cluster]
    if start is not None:
        where.append(IngestHour.hour >= start)
    if end is not None:
        where.append(IngestHour.hour < end)
    newest_ok = session.exec(select(func.max(IngestHour.hour)).where(IngestHour.cluster == cluster,
                                                                    IngestHour.status == IngestStatus.OK)).one()
    ok, gaps, mean = session.exec(
        select(
            func.sum(case((IngestHour.status == IngestStatus.OK, 1), else_=0)),
            func.sum(case((IngestHour.status == IngestStatus.GAP, 1), else_=0)),
            func.avg(case((IngestHour.status == IngestStatus.OK, IngestHour.duration_s), else_=None)),
        ).where(*where)
    ).one()
    last = session.exec(
        select(IngestHour.duration_s, IngestHour.ingested_at).where(*where, IngestHour.status == IngestStatus.OK)
        .order_by(col(IngestHour.ingested_at).desc().nulls_last()).limit(1)
    ).first()
    newest_gaps = list(session.exec(
        select(IngestHour).where(*where, IngestHour.status == IngestStatus.GAP).order_by(col(IngestHour.hour).desc()).limit(GAPS_SHOWN)
    ))
    last_ok = None if newest_ok is None else aware(newest_ok)
    return IngestionHealth(
        last_ok=last_ok,
        lag=None if last_ok is None else max(timedelta(0), aware(now) - (last_ok + HOUR)),
        ok_count=int(ok or 0), gap_count=int(gaps or 0),
        last_duration_s=None if last is None else float(last[0]),
        mean_duration_s=None if mean is None else float(mean),
        gaps=newest_gaps,
        quality=findings_summary(session=session, start=start, end=end, cluster=cluster),
        cluster=cluster, last_at=None if last is None or last[1] is None else aware(last[1]),
    )
