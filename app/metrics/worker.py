"""The ingestion worker: every finished hour, catch-up after downtime, gap retries, one ingester per hour.

Two workers may run at once (a rolling deploy, an operator's manual run). Each claims the hours it
is about to ingest inside the transaction that writes them: on PostgreSQL with
`pg_try_advisory_xact_lock` per hour (a claimed hour is skipped by the other, which moves on), on
SQLite with `BEGIN IMMEDIATE` (the second waits for the first's commit). After claiming, the
hour's status is read again, so an hour the other worker finished meanwhile is not redone.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy import func, text
from sqlalchemy.engine import Engine
from sqlalchemy.exc import OperationalError
from sqlmodel import Session, select

from app.core.db import get_engine, is_postgres, unit_of_work
from app.core.settings import Settings, get_settings
from app.core.timeutil import HOUR, SECONDS_PER_HOUR, aware, floor_hour, hours_between, utcnow
from app.metrics.ingest import IngestReport, hour_status, ingest_hour_list
from app.metrics.models import IngestHour, IngestStatus
from app.metrics.types import MetricsSource

log = logging.getLogger(__name__)
# Advisory lock namespace ("CB" + 1) and key: (namespace, hours since the epoch).
LOCK_CLASS = 0x43420001


@dataclass
class WorkerReport:
    ingested: list[datetime] = field(default_factory=list)
    gaps: list[datetime] = field(default_factory=list)
    skipped: list[datetime] = field(default_factory=list)  # claimed or finished by another worker
    rounds: int = 0


def last_finished_hour_end(now: datetime, delay_s: int) -> datetime:
    """Hours ending at or before now - delay are finished (scrapes and rules have landed)."""
    return floor_hour(aware(now) - timedelta(seconds=delay_s))


def pending_hours(session: Session, *, now: datetime, delay_s: int, backfill_start: datetime | None = None,
                  backfill_hours: int = 24) -> list[datetime]:
    """Finished hours not yet ok: never tried, or gaps whose retry time has come."""
    now = aware(now)
    end = last_finished_hour_end(now, delay_s)
    if backfill_start is not None:
        start = floor_hour(backfill_start)
    else:
        first = session.exec(select(func.min(IngestHour.hour))).one()
        start = aware(first) if first is not None else end - backfill_hours * HOUR
    rows = hour_status(session, start, end)
    due = []
    for hour in hours_between(start, end):
        row = rows.get(hour)
        if row is None or (row.status == IngestStatus.GAP and (row.next_retry_at is None or aware(row.next_retry_at) <= now)):
            due.append(hour)
    return due


def claim(session: Session, hours: list[datetime], now: datetime) -> list[datetime]:
    """Lock the hours this transaction will ingest; return those still pending once locked."""
    if is_postgres(session):
        got = [h for h in hours if session.execute(
            text("SELECT pg_try_advisory_xact_lock(:c, :k)"), {"c": LOCK_CLASS, "k": int(h.timestamp()) // SECONDS_PER_HOUR}
        ).scalar()]
    else:
        # Take SQLite's write lock first: a concurrent worker waits here until we commit.
        session.connection(execution_options={"sqlite_immediate": True})
        got = list(hours)
    still = []
    for hour in got:
        row = session.exec(select(IngestHour).where(IngestHour.hour == hour)).first()
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


def run_once(*, engine: Engine, source: MetricsSource, settings: Settings, now: datetime,
             backfill_start: datetime | None = None, backfill_hours: int = 24, batch_hours: int = 24,
             progress: Callable[[datetime, str], None] | None = None) -> WorkerReport:
    """One round: ingest every pending hour, one transaction per run of consecutive hours."""
    report = WorkerReport(rounds=1)
    with Session(engine) as session:
        pending = pending_hours(session, now=now, delay_s=settings.ingest_delay_s, backfill_start=backfill_start,
                                backfill_hours=backfill_hours)
    for run in _runs(pending, batch_hours):
        try:
            with unit_of_work(engine) as session:
                claimed = claim(session, run, now)
                report.skipped += [h for h in run if h not in claimed]
                if not claimed:
                    continue
                result: IngestReport = ingest_hour_list(session=session, source=source, hours=claimed,
                                                        scrape_interval_s=settings.scrape_interval_s,
                                                        progress=progress, now=now)
        except OperationalError as exc:  # SQLite: the other worker held the write lock past the busy timeout
            log.warning("could not claim %s..%s: %s", run[0], run[-1], exc)
            report.skipped += run
            continue
        report.ingested += result.ok
        report.gaps += result.gaps
    return report


WorkerTask = Callable[[Engine, datetime], object]


def run_tasks(tasks: Sequence[WorkerTask], *, engine: Engine, now: datetime) -> None:
    """Run each task once; one failing task (a webhook receiver down, SMTP refusing) never stops the others."""
    for task in tasks:
        try:
            task(engine, now)
        except Exception:
            log.exception("worker task %s failed", getattr(task, "__name__", task))


def run_worker(*, engine: Engine | None = None, source: MetricsSource | None = None, settings: Settings | None = None,
               once: bool = False, poll_seconds: float = 60, backfill_start: datetime | None = None,
               backfill_hours: int = 24, batch_hours: int = 24, now: Callable[[], datetime] = utcnow,
               stop: threading.Event | None = None,
               progress: Callable[[datetime, str], None] | None = None,
               tasks: Sequence[WorkerTask] = ()) -> WorkerReport:
    """Ingest finished hours until stopped (or one round with `once`); returns what this worker did.

    After each ingestion round the worker runs `tasks` (deliveries of the event outbox: webhooks,
    e-mail, budget checks), which higher layers hand in: this module cannot import them. Several
    workers run the same tasks at the same time, so every task must claim the rows it acts on before
    acting (`SELECT ... FOR UPDATE SKIP LOCKED`, a conditional UPDATE of a status, or an advisory lock
    as `claim` does for hours) and record the outcome in the same transaction: no row is handled twice.
    """
    settings = settings or get_settings()
    engine = engine or get_engine()
    if source is None:
        from app.metrics.sources import get_source

        source = get_source(settings)
    stop = stop or threading.Event()
    total = WorkerReport()
    while True:
        try:
            done = run_once(engine=engine, source=source, settings=settings, now=now(), backfill_start=backfill_start,
                            backfill_hours=backfill_hours, batch_hours=batch_hours, progress=progress)
        except Exception:
            if once:
                raise
            # A database hiccup must not end the worker: log it and try again next round.
            log.exception("ingestion round failed")
            done = WorkerReport(rounds=1)
        run_tasks(tasks, engine=engine, now=now())
        total.ingested += done.ingested
        total.gaps += done.gaps
        total.skipped += done.skipped
        total.rounds += 1
        if done.ingested or done.gaps:
            log.info("ingested %d hours, %d gaps", len(done.ingested), len(done.gaps))
        if once or stop.wait(poll_seconds):
            return total
