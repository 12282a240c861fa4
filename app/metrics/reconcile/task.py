"""The worker's reconciliation task: each day once ingested, and again whenever an hour of it is ingested again.

A UTC day of a cluster read from a Prometheus-compatible source is due once it has ended and every hour
of it has been ingested (ok or gap), or, failing that, a day after it ended (an ingestion that stopped
leaves hours missing: the check then says whether the source has them), as long as some hour of it has
no current verdict. So every day is checked after its ingestion, a re-ingested hour is checked again,
and a month's hours are all checked before its close. At most `DAYS_PER_ROUND` days a round, oldest
first, within `LOOKBACK_DAYS` (older hours are past most sources' retention).

Several workers run it at once: each claims the (cluster, day) before reading the source (PostgreSQL:
an advisory lock, skipped when taken; SQLite: the write lock, waited for), then checks again whether the
day is still due, and writes the verdicts in the same transaction.
"""

from __future__ import annotations

import logging
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy import func, select, text
from sqlalchemy.engine import Engine
from sqlmodel import Session

from app.core.clusters import ClusterConfig
from app.core.db import is_postgres, sqlite_write_lock, unit_of_work
from app.core.errors import AppError
from app.core.settings import Settings, get_settings
from app.core.timeutil import SECONDS_PER_DAY, aware, epoch, floor_hour, from_epoch, utcnow
from app.metrics.labels import ExporterIdentity
from app.metrics.models import IngestHour
from app.metrics.reconcile.service import reconcile_hours
from app.metrics.reconcile.source import ReconcileSource
from app.metrics.reconcile.store import check_states

log = logging.getLogger(__name__)
DAYS_PER_ROUND = 3
LOOKBACK_DAYS = 40
GRACE = timedelta(days=1)  # a day with hours never ingested is checked this long after it ended
DAY = timedelta(days=1)


def source_of(config: ClusterConfig, settings: Settings) -> ReconcileSource:
    """A cluster's source as the reconciliation reads it (its URL, auth and TLS, the exporter's identity)."""
    return ReconcileSource(config.url or "", access=config, timeout_s=settings.prometheus_timeout_s,
                           deadline_s=settings.prometheus_deadline_s, exporter=ExporterIdentity.from_settings(settings))


def finished_until(now: datetime, settings: Settings) -> datetime:
    """The end of the last hour ingestion treats as finished (the worker's ingest delay)."""
    return floor_hour(aware(now) - timedelta(seconds=settings.ingest_delay_s))


def due_days(session: Session, *, cluster: str, now: datetime, until: datetime) -> list[datetime]:
    """UTC days of the cluster due for a check, oldest first."""
    first = session.execute(select(func.min(IngestHour.hour)).where(IngestHour.cluster == cluster)).scalar_one()
    if first is None:
        return []
    day = max(from_epoch(epoch(first) // SECONDS_PER_DAY * SECONDS_PER_DAY),
              from_epoch(epoch(aware(now) - timedelta(days=LOOKBACK_DAYS)) // SECONDS_PER_DAY * SECONDS_PER_DAY))
    if day + DAY > until:
        return []
    states = check_states(session, cluster=cluster, start=day, end=until)
    out = []
    while day + DAY <= until:
        if _due([states[day + timedelta(hours=k)] for k in range(24)], day=day, now=now):
            out.append(day)
        day += DAY
    return out


def _due(states: list[tuple[bool, bool]], *, day: datetime, now: datetime) -> bool:
    """Some hour without a current verdict, and every hour ingested (or the day a day past its end)."""
    if all(checked for _, checked in states):
        return False
    return all(done for done, _ in states) or day + DAY + GRACE <= aware(now)


@dataclass
class TaskReport:
    checked: dict[str, list[datetime]] = field(default_factory=dict)  # cluster -> days checked
    failed: dict[str, str] = field(default_factory=dict)  # cluster -> why its source could not be read


def _claim(session: Session, cluster: str, day: datetime) -> bool:
    if is_postgres(session):
        space = zlib.crc32(f"chargeback-reconcile:{cluster}".encode())
        space = space - (1 << 32) if space >= 1 << 31 else space
        key = epoch(day) // SECONDS_PER_DAY
        return bool(session.execute(text("SELECT pg_try_advisory_xact_lock(:c, :k)"), {"c": space, "k": key}).scalar())
    sqlite_write_lock(session)
    return True


def reconcile_task(engine: Engine, clock: Callable[[], datetime] = utcnow, *, settings: Settings | None = None,
                   sources: dict[str, ReconcileSource] | None = None) -> TaskReport:
    """Check the due days of every cluster read from a Prometheus-compatible source (`DAYS_PER_ROUND` each)."""
    from app.metrics.sources import prometheus_clusters

    settings = settings or get_settings()
    if sources is None:
        sources = {c.name: source_of(c, settings) for c in prometheus_clusters(settings)}
    report = TaskReport()
    for cluster, source in sources.items():
        now = clock()
        until = finished_until(now, settings)
        with unit_of_work(engine) as session:
            days = due_days(session, cluster=cluster, now=now, until=until)[:DAYS_PER_ROUND]
        for day in days:
            try:
                with unit_of_work(engine) as session:
                    if not _claim(session, cluster, day):
                        continue
                    states = check_states(session, cluster=cluster, start=day, end=day + DAY)
                    if not _due(list(states.values()), day=day, now=clock()):
                        continue  # another worker checked it meanwhile
                    result = reconcile_hours(session=session, source=source, cluster=cluster, start=day, end=day + DAY,
                                             until=until, scrape_interval_s=settings.scrape_interval_s)
            except AppError as exc:
                report.failed[cluster] = exc.detail
                break
            if result.error:  # nothing was written for the unread hours: the day stays due for the next round
                report.failed[cluster] = result.error
                log.warning("reconcile %s %s: the source could not be read: %s", cluster, day.date(), result.error)
                break
            report.checked.setdefault(cluster, []).append(day)
            if result.problems:
                log.warning("reconcile %s %s: %d hour(s) do not reconcile", cluster, day.date(), len(result.problems))
    return report
