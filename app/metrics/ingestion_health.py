"""Ingestion health: one definition for the portal's /metrics gauges and the overview's health panel.

The lag is measured from the end of the newest hour ingested successfully and never negative; the
last duration is that of the ok hour ingested most recently. Counts cover [start, end) when given,
every hour otherwise (the /metrics gauges).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy import case, func
from sqlmodel import Session, col, select

from app.core.timeutil import HOUR, SECONDS_PER_HOUR, aware
from app.metrics.models import IngestHour, IngestStatus
from app.metrics.quality import FindingsSummary, findings_summary

GAPS_SHOWN = 10


@dataclass
class IngestionHealth:
    last_ok: datetime | None  # start of the newest hour ingested successfully
    lag: timedelta | None  # now - end of that hour, at least zero
    ok_count: int = 0
    gap_count: int = 0
    last_duration_s: float | None = None
    mean_duration_s: float | None = None
    gaps: list[IngestHour] = field(default_factory=list)  # newest first, at most GAPS_SHOWN
    quality: FindingsSummary = field(default_factory=FindingsSummary)  # use cut at capacity

    @property
    def lag_seconds(self) -> float | None:
        return None if self.lag is None else self.lag.total_seconds()

    @property
    def lag_hours(self) -> float | None:
        return None if self.lag is None else self.lag.total_seconds() / SECONDS_PER_HOUR


def ingestion_health(*, session: Session, now: datetime, start: datetime | None = None,
                     end: datetime | None = None) -> IngestionHealth:
    """Lag behind `now`, ok and gap hours, durations and data-quality findings in [start, end) (all when unbounded)."""
    where = []
    if start is not None:
        where.append(IngestHour.hour >= start)
    if end is not None:
        where.append(IngestHour.hour < end)
    newest_ok = session.exec(select(func.max(IngestHour.hour)).where(IngestHour.status == IngestStatus.OK)).one()
    ok, gaps, mean = session.exec(
        select(
            func.sum(case((IngestHour.status == IngestStatus.OK, 1), else_=0)),
            func.sum(case((IngestHour.status == IngestStatus.GAP, 1), else_=0)),
            func.avg(case((IngestHour.status == IngestStatus.OK, IngestHour.duration_s), else_=None)),
        ).where(*where)
    ).one()
    last = session.exec(
        select(IngestHour.duration_s).where(*where, IngestHour.status == IngestStatus.OK)
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
        last_duration_s=None if last is None else float(last),
        mean_duration_s=None if mean is None else float(mean),
        gaps=newest_gaps,
        quality=findings_summary(session=session, start=start, end=end),
    )
