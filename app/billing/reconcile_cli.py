"""`chargeback reconcile`: check a month's (or a range's) stored hours against the source, the second way.

Exit codes: 0 every checked hour reconciles (gaps and hours never ingested that the source has no data
for either are listed, and left to the close's coverage item); 3 some hour differs, is stored as ok with
no data in the source, or is stored as a gap / never ingested while the source has its data; 4 the
source could not be read for some hours (nothing is recorded for them); 2 invalid input.
"""

from __future__ import annotations

from datetime import datetime

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

app = typer.Typer(help="reconciliation", no_args_is_help=True)
EXIT_DIFFERENCES = 3
EXIT_UNREAD = 4


def _when(value: str, name: str) -> datetime:
    from app.core.timeutil import parse_iso

    try:
        return parse_iso(value)
    except ValueError as exc:
        raise typer.BadParameter(f"{value!r} is not an ISO 8601 time", param_hint=name) from exc


def _range(period: str | None, start: str | None, end: str | None) -> tuple[datetime, datetime]:
    from app.billing.period import parse_period
    from app.core.errors import AppError

    if period and (start or end):
        raise typer.BadParameter("give --period, or --start and --end, not both", param_hint="--period")
    if period:
        try:
            p = parse_period(period)
        except AppError as exc:
            raise typer.BadParameter(exc.detail, param_hint="--period") from None
        return p.start, p.end
    if not (start and end):
        raise typer.BadParameter("give --period YYYY-MM, or --start and --end", param_hint="--period")
    first, last = _when(start, "--start"), _when(end, "--end")
    if last <= first:
        raise typer.BadParameter("must be after --start", param_hint="--end")
    return first, last


def _clusters(settings, names: list[str] | None) -> list:
    """The clusters to check: those named (each configured and read from a URL), else every one read from a URL."""
    from app.metrics.sources import prometheus_clusters

    readable = {c.name: c for c in prometheus_clusters(settings)}
    known = settings.cluster_names()
    for name in names or ():
        if name not in known:
            raise typer.BadParameter(f"unknown cluster {name!r} (configured: {', '.join(known)})", param_hint="--cluster")
        if name not in readable:
            raise typer.BadParameter(f"cluster {name!r} is the built-in simulator: there is no second source to check "
                                     "against", param_hint="--cluster")
    return [readable[n] for n in dict.fromkeys(names)] if names else list(readable.values())


@app.command("reconcile")
def reconcile_command(
    period: str | None = typer.Option(None, "--period", help="YYYY-MM: every finished hour of the billing month"),
    start: str | None = typer.Option(None, "--start", help="first hour, ISO 8601 (instead of --period)"),
    end: str | None = typer.Option(None, "--end", help="end, exclusive, ISO 8601"),
    cluster: list[str] | None = typer.Option(None, "--cluster", help="only this cluster (repeatable; default: every "
                                             "cluster read from a Prometheus-compatible URL)"),
    show: int = typer.Option(20, "--show", min=0, help="hours that do not reconcile listed, with both figures"),
) -> None:
    """Re-derive each stored hour from the source by a second, independent count and list what differs.

    Per pool-hour: GPUs, occupied GPU-seconds (and each tenant's) and kWh as the rating uses them, counted again from raw per-series samples and compared with the stored rollups. Also listed: hours stored ok with no data in the source, and hours stored as gaps or never ingested that the source has. The verdicts are stored: the close checklist reads them.

    Exit codes: 0 reconciled, 3 hours that do not reconcile, 4 the source could not be read for some hours, 2 bad input.
    """
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    from app.core.db import unit_of_work
    from app.core.settings import get_settings
    from app.core.timeutil import hours_between, utcnow
    from app.metrics.reconcile.service import ReconcileReport, days_of, reconcile_hours
    from app.metrics.reconcile.task import finished_until, source_of

    first, last = _range(period, start, end)
    settings = get_settings()
    configs = _clusters(settings, cluster)
    console = Console(stderr=True)
    if not configs:
        console.print("nothing to reconcile: every cluster is read from the built-in simulator")
        return
    until = finished_until(utcnow(), settings)
    stop = min(last, until)
    if stop <= first:
        console.print(f"nothing to reconcile: no finished hour in {first:%Y-%m-%d %H:%M} .. {last:%Y-%m-%d %H:%M} UTC")
        return
    hours = int((stop - first).total_seconds()) // 3600
    reports: dict[str, ReconcileReport] = {}
    columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
               TimeRemainingColumn())
    with Progress(*columns, console=console, transient=False) as bar:
        for config in configs:
            source = source_of(config, settings)
            task = bar.add_task(f"reconcile {config.name}", total=hours)
            report = reports[config.name] = ReconcileReport(cluster=config.name)
            for day_start, day_end in days_of(first, stop):
                with unit_of_work() as session:
                    part = reconcile_hours(session=session, source=source, cluster=config.name, start=day_start,
                                           end=day_end, until=until, scrape_interval_s=settings.scrape_interval_s,
                                           progress=lambda n, task=task: bar.update(task, advance=n))
                report.checks += part.checks
                report.duration_s += part.duration_s
                if part.error:
                    report.unread = hours_between(day_start, stop)
                    report.error = part.error
                    break
    _print(reports, show, several=len(configs) > 1)
    if any(r.unread for r in reports.values()):
        raise typer.Exit(EXIT_UNREAD)
    if any(r.problems for r in reports.values()):
        raise typer.Exit(EXIT_DIFFERENCES)


def _print(reports: dict, show: int, *, several: bool) -> None:
    from app.core.timeutil import from_epoch

    out = Console(width=max(120, Console().width))
    rows = []
    for name, report in reports.items():
        counts = report.verdicts
        out.print(f"{name + ': ' if several else ''}{len(report.checks)} hours checked in {report.duration_s:.1f}s: "
                  + ", ".join(f"{v} {counts.get(k, 0)}" for k, v in (
                      ("agrees", "agree"), ("differs", "differ"), ("source_empty", "stored ok with no source data"),
                      ("unstored", "not stored though the source has them"), ("gap", "gaps"),
                      ("missing", "never ingested"))))
        if report.error:
            out.print(f"[bold red]{name}: the source could not be read[/] ({escape(report.error)}); "
                      f"{len(report.unread)} hours not checked from {report.unread[0]:%Y-%m-%d %H:%M} UTC")
        rows += [(name, c) for c in report.problems]
    if not rows or not show:
        if not rows:
            out.print("[green]reconciled[/]: every stored hour checked agrees with the source within rounding")
        return
    table = Table(title="Hours that do not reconcile", show_lines=True, expand=True)
    for title, ratio in (("cluster", 1), ("hour (UTC)", 2), ("verdict", 2), ("what differs (stored, source)", 8)):
        table.add_column(title, ratio=ratio, overflow="fold")
    for name, check in rows[:show]:
        table.add_row(name, f"{from_epoch(check.hour):%Y-%m-%d %H:%M}", str(check.verdict), escape(check.detail))
    if len(rows) > show:
        table.caption = f"and {len(rows) - show} more"
    out.print(table)
