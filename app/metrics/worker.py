"""The ingestion worker: every finished hour, catch-up after downtime, gap retries, one ingester per hour.

Each cluster (CHARGEBACK_CLUSTERS) is ingested on its own: its own pending hours, claims and status
rows, its runs taken in turn with the other clusters' so that one cluster's backlog or outage never
holds another's hours back. A cluster whose source failed is left for the rest of the round (its
hours are gaps, retried with backoff); the others go on.

Two workers may run at once (a rolling deploy, an operator's manual run). Each claims the hours it
is about to ingest inside the transaction that writes them: on PostgreSQL with
`pg_try_advisory_xact_lock` per (cluster, hour) (a claimed hour is skipped by the other, which moves
on), on SQLite with `BEGIN IMMEDIATE` (the second waits for the first's commit). After claiming, the
hour's status is read again, so an hour the other worker finished meanwhile is not redone.

The worker's clock is a function, read where each decision is made (which hours are finished, whether a
claimed hour is due, each task's leases and retry times), never one value for a whole round: a round may
take minutes, and a time read at its start would make leases born expired and retries early.
"""

from __future__ import annotations

import logging
import threading
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy import func, text
from sqlalchemy.engine import Engine
from sqlalchemy.exc import OperationalError
from sqlmodel import Session, select

from app.core.clusters import DEFAULT_CLUSTER
from app.core.db import get_engine, is_postgres, sqlite_write_lock, unit_of_work
from app.core.settings import Settings, get_settings
from app.core.timeutil import HOUR, SECONDS_PER_HOUR, aware, floor_hour, hours_between, utcnow
from app.metrics.ingest import NO_POLICY, IngestReport, hour_status, ingest_hour_list
from app.metrics.models import IngestHour, IngestStatus
from app.metrics.types import MetricsSource

log = logging.getLogger(__name__)
# Advisory lock namespace ("CB" + 1) and key: (namespace, hours since the epoch), the default cluster's;
# another cluster's namespace is derived from its name (two names sharing one only make a worker skip an hour).
LOCK_CLASS = 0x43420001


def lock_key(cluster: str, hour: datetime) -> tuple[int, int]:
    """The (int4, int4) advisory lock of one cluster's hour."""
    if cluster == DEFAULT_CLUSTER:
        space = LOCK_CLASS
    else:
        space = zlib.crc32(f"chargeback-cluster:{cluster}".encode())
        space = space - (1 << 32) if space >= 1 << 31 else space
    return space, int(hour.timestamp()) // SECONDS_PER_HOUR


@dataclass
class WorkerReport:
    """Hours this worker ingested, left as gaps or skipped; an hour appears once per cluster it was done for."""

    ingested: list[datetime] = field(default_factory=list)
    gaps: list[datetime] = field(default_factory=list)
    skipped: list[datetime] = field(default_factory=list)  # claimed or finished by another worker
    rounds: int = 0
    clusters: dict[str, WorkerReport] = field(default_factory=dict)  # the same, per cluster

    def of(self, cluster: str) -> WorkerReport:
        return self.clusters.setdefault(cluster, WorkerReport())

    def add(self, cluster: str, *, ingested=(), gaps=(), skipped=()) -> None:
        part = self.of(cluster)
        for mine, theirs, new in ((self.ingested, part.ingested, ingested), (self.gaps, part.gaps, gaps),
                                  (self.skipped, part.skipped, skipped)):
            mine += new
            theirs += new

    def merge(self, other: WorkerReport) -> None:
        for cluster, part in other.clusters.items():
            self.add(cluster, ingested=part.ingested, gaps=part.gaps, skipped=part.skipped)
        self.rounds += other.rounds or 0


def last_finished_hour_end(now: datetime, delay_s: int) -> datetime:
    """Hours ending at or before now - delay are finished (scrapes and rules have landed)."""
    return floor_hour(aware(now) - timedelta(seconds=delay_s))


def pending_hours(session: Session, *, now: datetime, delay_s: int, backfill_start: datetime | None = None,
                  backfill_hours: int = 24, cluster: str = DEFAULT_CLUSTER) -> list[datetime]:
    """The cluster's finished hours not yet ok: never tried, or gaps whose retry time has come.

    From `backfill_start`, else from the cluster's first recorded hour, else (a cluster new to the
    portal) `backfill_hours` back: a cluster added later does not backfill the others' whole history.
    """
    now = aware(now)
    end = last_finished_hour_end(now, delay_s)
    if backfill_start is not None:
        start = floor_hour(backfill_start)
    else:
        first = session.exec(select(func.min(IngestHour.hour)).where(IngestHour.cluster == cluster)).one()
        start = aware(first) if first is not None else end - backfill_hours * HOUR
    rows = hour_status(session, start, end, cluster)
    due = []
    for hour in hours_between(start, end):
        row = rows.get(hour)
        if row is None or (row.status == IngestStatus.GAP and (row.next_retry_at is None or aware(row.next_retry_at) <= now)):
            due.append(hour)
    return due


def claim(session: Session, hours: list[datetime], clock: Callable[[], datetime],
          cluster: str = DEFAULT_CLUSTER) -> list[datetime]:
    """Lock the cluster's hours this transaction will ingest; return those still pending once locked."""
    if is_postgres(session):
        got = []
        for h in hours:
            space, key = lock_key(cluster, h)
            if session.execute(text("SELECT pg_try_advisory_xact_lock(:c, :k)"), {"c": space, "k": key}).scalar():
                got.append(h)
    else:
        # Take SQLite's write lock first: a concurrent worker waits here until we commit.
        sqlite_write_lock(session)
        got = list(hours)
    now = clock()  # once locked: on SQLite the other worker's whole run may have passed meanwhile
    still = []
    for hour in got:
        row = session.exec(select(IngestHour).where(IngestHour.cluster == cluster, IngestHour.hour == hour)).first()
        if row is None or (row.status == IngestStatus.GAP and (row.next_retry_at is None or aware(row.next_retry_at) <= now)):
            still.append(hour)
    return still


def _runs(hours: list[datetime], size: int) -> list[list[datetime]]:
    """Consecutive hours, at most `size` per run."""
    runs: list[list[datetime]] = []
    for hour in hours:
        if runs and runs[-1][-1] + HOUR == hour and len(runs[-1]) < size:
            runs[-1].append(hour)
        else:
            runs.append([hour])
    return runs


def _in_turn(runs: Mapping[str, list[list[datetime]]]) -> list[tuple[str, list[datetime]]]:
    """The clusters' runs interleaved: first run of each cluster, then the second of each, ..."""
    out = []
    for k in range(max((len(r) for r in runs.values()), default=0)):
        out += [(cluster, r[k]) for cluster, r in runs.items() if k < len(r)]
    return out


def run_once(*, engine: Engine, source: MetricsSource | None = None, settings: Settings,
             clock: Callable[[], datetime] = utcnow, backfill_start: datetime | None = None, backfill_hours: int = 24,
             batch_hours: int = 24, progress: Callable[[datetime, str], None] | None = None,
             sources: Mapping[str, MetricsSource] | None = None) -> WorkerReport:
    """One round: ingest every pending hour of every cluster, one transaction per run of consecutive hours.

    `sources` maps each cluster to its source; `source` alone is the default cluster's.
    """
    sources = dict(sources) if sources is not None else {DEFAULT_CLUSTER: source}
    report = WorkerReport(rounds=1)
    runs = {}
    with Session(engine) as session:
        for cluster in sources:
            pending = pending_hours(session, now=clock(), delay_s=settings.ingest_delay_s, backfill_start=backfill_start,
                                    backfill_hours=backfill_hours, cluster=cluster)
            runs[cluster] = _runs(pending, batch_hours)
    down: set[str] = set()
    for cluster, run in _in_turn(runs):
        if cluster in down:
            continue  # its source failed this round: its hours wait for their retry, the others go on
        try:
            with unit_of_work(engine) as session:
                claimed = claim(session, run, clock, cluster)
                report.add(cluster, skipped=[h for h in run if h not in claimed])
                if not claimed:
                    continue
                result: IngestReport = ingest_hour_list(session=session, source=sources[cluster], hours=claimed,
                                                        scrape_interval_s=settings.scrape_interval_s,
                                                        progress=progress, now=clock(), cluster=cluster)
        except OperationalError as exc:  # SQLite: the other worker held the write lock past the busy timeout
            log.warning("could not claim %s %s..%s: %s", cluster, run[0], run[-1], exc)
            report.add(cluster, skipped=run)
            continue
        report.add(cluster, ingested=result.ok, gaps=result.gaps)
        if any(error != NO_POLICY for error in result.errors.values()) and not result.ok:
            down.add(cluster)
            log.warning("cluster %s could not be read: %s", cluster, next(iter(result.errors.values())))
    return report


# A task is called with the engine and the worker's clock, which it reads each time it acts.
WorkerTask = Callable[[Engine, Callable[[], datetime]], object]


def run_tasks(tasks: Sequence[WorkerTask], *, engine: Engine, clock: Callable[[], datetime] = utcnow) -> None:
    """Run each task once; one failing task (a webhook receiver down, SMTP refusing) never stops the others."""
    for task in tasks:
        try:
            task(engine, clock)
        except Exception:
            log.exception("worker task %s failed", getattr(task, "__name__", task))


def run_worker(*, engine: Engine | None = None, source: MetricsSource | None = None, settings: Settings | None = None,
               once: bool = False, poll_seconds: float = 60, backfill_start: datetime | None = None,
               backfill_hours: int = 24, batch_hours: int = 24, now: Callable[[], datetime] = utcnow,
               stop: threading.Event | None = None,
               progress: Callable[[datetime, str], None] | None = None,
               tasks: Sequence[WorkerTask] = (), sources: Mapping[str, MetricsSource] | None = None) -> WorkerReport:
    """Ingest finished hours until stopped (or one round with `once`); returns what this worker did.

    After each ingestion round the worker runs `tasks` (deliveries of the event outbox: webhooks,
    e-mail, budget checks), which higher layers hand in: this module cannot import them. Several
    workers run the same tasks at the same time, so every task must claim the rows it acts on before
    acting (`SELECT ... FOR UPDATE SKIP LOCKED`, a conditional UPDATE of a status, or an advisory lock
    as `claim` does for hours) and record the outcome in the same transaction: no row is handled twice.
    Each task gets the clock `now`, not a time: a lease or a retry is dated when it is taken.
    """
    settings = settings or get_settings()
    engine = engine or get_engine()
    if source is not None:
        sources = {DEFAULT_CLUSTER: source}
    elif sources is None:
        from app.metrics.sources import get_sources

        sources = get_sources(settings)
    stop = stop or threading.Event()
    total = WorkerReport()
    while True:
        try:
            done = run_once(engine=engine, sources=sources, settings=settings, clock=now, backfill_start=backfill_start,
                            backfill_hours=backfill_hours, batch_hours=batch_hours, progress=progress)
        except Exception:
            if once:
                raise
            # A database hiccup must not end the worker: log it and try again next round.
            log.exception("ingestion round failed")
            done = WorkerReport(rounds=1)
        run_tasks(tasks, engine=engine, clock=now)
        total.merge(done)
        if done.ingested or done.gaps:
            log.info("ingested %d hours, %d gaps", len(done.ingested), len(done.gaps))
        if once or stop.wait(poll_seconds):
            return total
