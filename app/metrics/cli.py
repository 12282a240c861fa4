"""`chargeback ingest` and `chargeback worker` (mounted at the top level by app/cli.py)."""

from __future__ import annotations

import logging
from datetime import datetime

import typer

app = typer.Typer(help="metrics commands", no_args_is_help=True)

WINDOW_HOURS = 24  # hours committed per unit of work


def _when(value: str, name: str) -> datetime:
    from app.core.timeutil import parse_iso

    try:
        return parse_iso(value)
    except ValueError as exc:
        raise typer.BadParameter(f"{value!r} is not an ISO 8601 time", param_hint=name) from exc


@app.command("ingest")
def ingest(
    start: str = typer.Option(..., "--start", help="first hour, ISO 8601 (UTC when no offset)"),
    end: str = typer.Option(..., "--end", help="end, exclusive, ISO 8601"),
    hours_per_fetch: int = typer.Option(0, "--hours-per-fetch", help="hours per query batch (0 = adapt to the fleet)"),
) -> None:
    """Ingest whole hours [START, END) into rollups; exit code 2 when gaps remain."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
    from sqlmodel import Session

    from app.core.db import get_engine, unit_of_work
    from app.core.settings import get_settings
    from app.core.timeutil import hours_between
    from app.metrics.ingest import NO_POLICY, IngestReport, hour_status, ingest_hour_list
    from app.metrics.sources import get_source

    first, last = _when(start, "--start"), _when(end, "--end")
    if last <= first:
        raise typer.BadParameter("must be after --start", param_hint="--end")
    settings, engine = get_settings(), get_engine()
    source = get_source(settings)
    hours = hours_between(first, last)
    console = Console(stderr=True)
    report = IngestReport()
    columns = (TextColumn("[bold]ingest"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[state]}"),
               TimeElapsedColumn(), TimeRemainingColumn())
    with Progress(*columns, console=console, transient=False) as bar:
        task = bar.add_task("ingest", total=len(hours), state="")

        def advance(hour: datetime, state: str) -> None:
            bar.update(task, advance=1, state=f"{hour:%Y-%m-%d %H:%M} {state}")

        for i in range(0, len(hours), WINDOW_HOURS):
            window = hours[i:i + WINDOW_HOURS]
            with unit_of_work(engine) as session:
                part = ingest_hour_list(session=session, source=source, hours=window,
                                        scrape_interval_s=settings.scrape_interval_s, progress=advance,
                                        hours_per_fetch=hours_per_fetch or None)
            report.merge(part)
            if any(error != NO_POLICY for error in part.errors.values()):
                break  # the source went away: stop rather than time out on every remaining window

    with Session(engine) as session:
        rows = hour_status(session, first, last)
    ok = sum(1 for h in hours if h in rows and rows[h].status == "ok")
    missing = len(hours) - ok
    console.print(f"hours: {len(hours)}  ok: {ok}  gaps: {sum(1 for r in rows.values() if r.status == 'gap')}  "
                  f"not attempted: {sum(1 for h in hours if h not in rows)}  in {report.duration_s:.1f}s")
    for hour, error in sorted(report.errors.items())[:5]:
        console.print(f"  {hour:%Y-%m-%d %H:%M}: {error}")
    if missing:
        raise typer.Exit(2)


@app.command("worker")
def worker(
    once: bool = typer.Option(False, "--once", help="one round, then exit"),
    poll_seconds: float = typer.Option(60.0, "--poll-seconds", help="seconds between rounds"),
    backfill_start: str | None = typer.Option(None, "--backfill-start", help="ingest from this time on (ISO 8601)"),
    backfill_hours: int = typer.Option(24, "--backfill-hours", help="on an empty database, hours back to start from"),
) -> None:
    """Ingest every finished hour, catch up after downtime, retry gaps with backoff."""
    from app.metrics.worker import run_worker

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    start = _when(backfill_start, "--backfill-start") if backfill_start else None
    report = run_worker(once=once, poll_seconds=poll_seconds, backfill_start=start, backfill_hours=backfill_hours)
    typer.echo(f"ingested {len(report.ingested)} hours, {len(report.gaps)} gaps, {len(report.skipped)} skipped")
