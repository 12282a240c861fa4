"""`chargeback ingest` and `chargeback worker` (mounted at the top level by app/cli.py)."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

import typer

from app.core.timeutil import SECONDS_PER_DAY

app = typer.Typer(help="metrics commands", no_args_is_help=True)

WINDOW_HOURS = 24  # hours committed per unit of work


def _when(value: str, name: str) -> datetime:
    from app.core.timeutil import parse_iso

    try:
        return parse_iso(value)
    except ValueError as exc:
        raise typer.BadParameter(f"{value!r} is not an ISO 8601 time", param_hint=name) from exc


def _clusters(settings, names: list[str] | None) -> list[str]:
    """The clusters named with --cluster (each must be configured), else every configured cluster."""
    known = settings.cluster_names()
    for name in names or ():
        if name not in known:
            raise typer.BadParameter(f"unknown cluster {name!r} (configured: {', '.join(known)})", param_hint="--cluster")
    return list(dict.fromkeys(names)) if names else known


@app.command("ingest")
def ingest(
    start: str = typer.Option(..., "--start", help="first hour, ISO 8601 (UTC when no offset)"),
    end: str = typer.Option(..., "--end", help="end, exclusive, ISO 8601"),
    hours_per_fetch: int = typer.Option(0, "--hours-per-fetch", help="hours per query batch (0 = adapt to the fleet)"),
    cluster: list[str] | None = typer.Option(None, "--cluster", help="only this cluster (repeatable; default: every one)"),
) -> None:
    """Ingest whole hours [START, END) of each cluster into rollups; exit code 2 when gaps remain in any."""
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )
    from sqlmodel import Session

    from app.core.db import get_engine, unit_of_work
    from app.core.settings import get_settings
    from app.core.timeutil import hours_between
    from app.metrics.ingest import IngestReport, hour_status, ingest_hour_list
    from app.metrics.models import IngestStatus
    from app.metrics.sources import get_source

    first, last = _when(start, "--start"), _when(end, "--end")
    if last <= first:
        raise typer.BadParameter("must be after --start", param_hint="--end")
    settings, engine = get_settings(), get_engine()
    names = _clusters(settings, cluster)
    hours = hours_between(first, last)
    console = Console(stderr=True)
    reports: dict[str, IngestReport] = {}
    columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("{task.fields[state]}"), TimeElapsedColumn(), TimeRemainingColumn())
    with Progress(*columns, console=console, transient=False) as bar:
        for name in names:
            source = get_source(settings, name)
            report = reports[name] = IngestReport()
            task = bar.add_task(f"ingest {name}" if len(names) > 1 else "ingest", total=len(hours), state="")

            def advance(hour: datetime, state: str, task=task) -> None:
                bar.update(task, advance=1, state=f"{hour:%Y-%m-%d %H:%M} {state}")

            for i in range(0, len(hours), WINDOW_HOURS):
                window = hours[i:i + WINDOW_HOURS]
                with unit_of_work(engine) as session:
                    part = ingest_hour_list(session=session, source=source, hours=window,
                                            scrape_interval_s=settings.scrape_interval_s, progress=advance,
                                            hours_per_fetch=hours_per_fetch or None, cluster=name)
                report.merge(part)  # past a gap or an outage: on to the end of the range (SPEC 4)

    missing = 0
    with Session(engine) as session:
        for name in names:
            rows = hour_status(session, first, last, name)
            ok = sum(1 for h in hours if h in rows and rows[h].status == IngestStatus.OK)
            missing += len(hours) - ok
            label = f"{name}: " if len(names) > 1 else ""
            console.print(f"{label}hours: {len(hours)}  ok: {ok}  "
                          f"gaps: {sum(1 for r in rows.values() if r.status == IngestStatus.GAP)}  "
                          f"not attempted: {sum(1 for h in hours if h not in rows)}  in {reports[name].duration_s:.1f}s")
            _print_gap_reasons(console, rows.items())
            for hour, error in sorted(reports[name].errors.items()):
                if rows.get(hour) is not None and rows[hour].status == IngestStatus.OK:
                    console.print(f"  kept {hour:%Y-%m-%dT%H:%M} as ingested before (reading it again failed: {error})")
    if missing:
        raise typer.Exit(2)


def _print_gap_reasons(console, rows, label: str = "") -> None:
    """Each run of gap hours with its reason; hours with no policy in effect also say how to fix that."""
    from app.core.timeutil import format_runs
    from app.metrics.ingest import NO_POLICY
    from app.metrics.models import IngestStatus

    by_reason: dict[str, list[datetime]] = {}
    for hour, row in sorted(rows):
        if row.status == IngestStatus.GAP:
            by_reason.setdefault(row.last_error, []).append(hour)
    for error, failed in by_reason.items():
        fix = (f" (import one first: chargeback policy import FILE --effective-from {failed[0]:%Y-%m-%dT%H:00Z})"
               if error == NO_POLICY else "")
        console.print(f"  {label}gap {format_runs(failed)}: {error}{fix}")


@app.command("worker")
def worker(
    ctx: typer.Context,
    once: bool = typer.Option(False, "--once", help="one round, then exit"),
    poll_seconds: float = typer.Option(60.0, "--poll-seconds", help="seconds between rounds"),
    backfill_start: str | None = typer.Option(None, "--backfill-start", help="ingest from this time on (ISO 8601)"),
    backfill_hours: int = typer.Option(24, "--backfill-hours", help="on an empty database, hours back to start from"),
    batch_hours: int = typer.Option(
        WINDOW_HOURS, "--batch-hours", min=1, max=WINDOW_HOURS,
        help="hours claimed and committed together (smaller: several workers share a backlog)"),
) -> None:
    """Ingest every finished hour, catch up after downtime, retry gaps with backoff; several may run at once."""
    from app.metrics.worker import run_worker

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    start = _when(backfill_start, "--backfill-start") if backfill_start else None
    # Deliveries of the event outbox (webhooks, e-mail, budgets) live above metrics: app/cli.py hands them in.
    tasks = (ctx.obj or {}).get("worker_tasks", ())
    report = run_worker(once=once, poll_seconds=poll_seconds, backfill_start=start, backfill_hours=backfill_hours,
                        batch_hours=batch_hours, tasks=tasks)
    typer.echo(f"ingested {len(report.ingested)} hours, {len(report.gaps)} gaps, {len(report.skipped)} skipped")
    _explain_round(report)


def _explain_round(report) -> None:
    """Why hours are gaps (their reasons, read back), or why there was nothing to do."""
    from rich.console import Console
    from sqlmodel import Session

    from app.core.db import get_engine
    from app.core.settings import get_settings
    from app.metrics.ingest import hour_status

    console = Console(stderr=True)
    if not (report.ingested or report.gaps or report.skipped):
        console.print(f"nothing to ingest: every finished hour is ingested (an hour is read "
                      f"{get_settings().ingest_delay_s} s after it ends, CHARGEBACK_INGEST_DELAY_S)")
        return
    with Session(get_engine()) as session:
        for cluster, part in report.clusters.items():
            if part.gaps:
                hours = sorted(set(part.gaps))
                rows = hour_status(session, hours[0], hours[-1] + timedelta(hours=1), cluster)
                _print_gap_reasons(console, ((h, r) for h, r in rows.items() if h in set(hours)),
                                   f"{cluster}: " if len(report.clusters) > 1 else "")


@app.command("doctor")
def doctor(
    url: str | None = typer.Option(None, "--url", help="Prometheus-compatible query API (default: the configured clusters')"),
    cluster: list[str] | None = typer.Option(None, "--cluster", help="check this cluster (repeatable; default: every "
                                             "cluster read from a Prometheus URL)"),
    policy_file: str | None = typer.Option(None, "--policy", help="policy YAML to check against (default: the active version)"),
    at: str | None = typer.Option(None, "--at", help="evaluate at this time, ISO 8601 (default: now)"),
    lookback_s: int = typer.Option(600, "--lookback", min=60, max=SECONDS_PER_DAY, help="seconds of samples to read"),
    as_json: bool = typer.Option(False, "--json", help="print the report as JSON"),
) -> None:
    """Preflight a live Prometheus: label style, intervals, duplicates, nodes, namespaces, SLA buckets; exit 1 if it would mis-bill.

    Each cluster is checked against its own pools (a node another cluster's pool names is "not in any pool" here).
    With --url and several clusters configured, --cluster says whose pools the URL's nodes belong to.
    """
    import json

    from rich.console import Console

    from app.core.clusters import CREDENTIALS_IN_URL, DEFAULT_CLUSTER, has_credentials
    from app.core.settings import get_settings
    from app.core.timeutil import epoch, utcnow
    from app.metrics import doctor as doc
    from app.metrics.prometheus_api import PromReader
    from app.metrics.sources import prometheus_clusters

    settings = get_settings()
    names = _clusters(settings, cluster) if cluster else None
    if url:
        if has_credentials(url):
            raise typer.BadParameter(f"{CREDENTIALS_IN_URL}: name the cluster in CHARGEBACK_CLUSTERS with them and "
                                     "run the doctor with --cluster", param_hint="--url")
        if names and len(names) > 1:
            raise typer.BadParameter("--url checks one Prometheus: give at most one --cluster", param_hint="--cluster")
        name = names[0] if names else (DEFAULT_CLUSTER if DEFAULT_CLUSTER in settings.cluster_names()
                                        else settings.cluster_names()[0])
        targets = [(name, PromReader(url, timeout_s=settings.prometheus_timeout_s))]
    else:
        configs = [c for c in prometheus_clusters(settings) if names is None or c.name in names]
        unread = sorted(set(names or ()) - {c.name for c in configs})
        if unread:
            raise typer.BadParameter(f"cluster {', '.join(unread)} is the built-in simulator, which has no Prometheus "
                                     "to check: give the cluster a url in CHARGEBACK_CLUSTERS, or check a Prometheus "
                                     "with --url", param_hint="--cluster")
        if not configs:
            raise typer.BadParameter("no Prometheus to check: pass --url, or set CHARGEBACK_PROMETHEUS_URL or "
                                     "CHARGEBACK_CLUSTERS", param_hint="--url")
        targets = [(c.name, PromReader(c.url or "", timeout_s=settings.prometheus_timeout_s, access=c))
                   for c in configs]
    when = epoch(_when(at, "--at")) if at else epoch(utcnow())
    policy = _doctor_policy(policy_file)
    reports = []
    for name, reader in targets:
        report = doc.run(reader, at=when, policy=None if policy is None else policy.for_cluster(name),
                         lookback_s=lookback_s)
        report.cluster = name
        reports.append(report)
    if as_json:
        data = reports[0].as_dict() if len(reports) == 1 else {"clusters": {r.cluster: r.as_dict() for r in reports}}
        typer.echo(json.dumps(data, indent=2, sort_keys=True))
    else:
        console = Console(width=max(120, Console().width))
        for report in reports:
            console.print(doc_table(report, cluster=report.cluster if len(reports) > 1 else None))
    if any(r.failing for r in reports):
        raise typer.Exit(1)


def _doctor_policy(path: str | None):
    """The policy from a file, else the active version, else None (the doctor then skips policy checks)."""
    from app.core.errors import AppError

    if path:
        from pathlib import Path

        from app.policy.parsing import parse_document

        try:
            return parse_document(Path(path).read_text())
        except OSError as exc:
            raise typer.BadParameter(f"cannot read {path}: {exc.strerror}", param_hint="--policy") from None
        except AppError as exc:
            raise typer.BadParameter(f"{path} is not a valid policy: {exc.detail}", param_hint="--policy") from None
    from sqlalchemy.exc import SQLAlchemyError

    from app.core.db import get_engine, unit_of_work
    from app.policy.service import active_version, load_document

    try:
        with unit_of_work(get_engine()) as session:
            version = active_version(session=session)
            return load_document(version) if version else None
    except SQLAlchemyError:
        return None  # no database yet: the doctor still checks the exporter side


def doc_table(report, *, cluster: str | None = None):
    """The report as a rich table: severity, finding, what it does to the bill, how to fix it."""
    from rich.table import Table

    colours = {"error": "bold red", "warning": "yellow", "info": "cyan"}
    where = f"cluster {cluster} ({report.url})" if cluster else report.url
    table = Table(title=f"chargeback doctor: {where}", show_lines=True, expand=True)
    for name, ratio in (("severity", 1), ("finding", 4), ("effect on the bill", 4), ("fix", 4)):
        table.add_column(name, ratio=ratio, overflow="fold")
    order = {"error": 0, "warning": 1, "info": 2}
    for f in sorted(report.findings, key=lambda f: order[f.severity]):
        table.add_row(f"[{colours[f.severity]}]{f.severity}[/]", f"[bold]{f.title}[/]\n{f.detail}", f.bill, f.fix or "-")
    summary = ", ".join(f"{k}: {v}" for k, v in sorted(report.summary.items()))
    table.caption = (f"{summary}\n" if summary else "") + (
        "[bold red]would mis-bill: fix the errors above[/]" if report.failing else "[green]no finding would mis-bill[/]")
    return table
