"""`chargeback rate | close | issue | export | verify | correct`: finance's billing commands (mounted at top level).

Business errors print a clear message and exit non-zero (2 invalid input, 3 conflict, 4 not found,
5 documents still being issued), never a traceback.
"""

from __future__ import annotations

import sys
from contextlib import contextmanager
from decimal import Decimal
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from app.core.errors import AppError

app = typer.Typer(help="billing commands", no_args_is_help=True)
out = Console()
err = Console(stderr=True)

EXIT_CODES = {404: 4, 409: 3, 422: 2, 503: 5}  # 503: documents still being issued


@contextmanager
def _business_errors():
    """Turn an AppError into a readable message and an exit code."""
    try:
        yield
    except AppError as exc:
        err.print(f"[bold red]{exc.title}:[/] {exc.detail}")
        for e in exc.errors:
            err.print(f"  [yellow]{e.path}[/]: {e.message}")
        raise typer.Exit(EXIT_CODES.get(exc.status, 1)) from None


def _actor() -> str:
    import getpass

    return f"cli:{getpass.getuser()}"


def _lines_table(session, row) -> Table:
    from app.billing.invoices import invoice_summaries, load_view, platform_statement

    view = load_view(session=session, period=row)
    summary = invoice_summaries(view, None)
    statement = platform_statement(view)
    table = Table(title=f"{row.month} ({row.status}, run {row.revision})")
    table.add_column("Tenant")
    table.add_column("Department")
    table.add_column("GPU-hours", justify="right")
    table.add_column(f"Total {row.currency}", justify="right")
    for inv in summary["invoices"]:
        table.add_row(inv["tenant"], inv["department"], f"{inv['gpu_hours']:,.2f}", f"{inv['total']:,.2f}")
    table.add_section()
    for kind, amount in statement["balance"].items():
        table.add_row(f"platform: {kind.removeprefix('platform_')}", "", "", f"{amount:,.2f}")
    table.add_row("platform: unallocated", "", f"{statement['unallocated']['gpu_hours']:,.2f}",
                  f"{statement['unallocated']['amount']:,.2f}")
    table.add_row("carried by the platform", "", "", f"{statement['carried_total']:,.2f}")
    table.add_section()
    table.add_row("cost C (all pools)", "", "", f"{statement['cost_total']:,.2f}")
    table.caption = (
        f"conservation: {'ok' if statement['conserved'] else 'VIOLATED'}; hours ok {row.hours_ok}/{row.hours_expected}; "
        f"gaps {len(statement['gap_hours'])}; unattributed breach minutes {len(statement['unattributed_breaches'])}"
    )
    return table


@app.command("rate")
def rate_command(period: str = typer.Option(..., "--period", help="YYYY-MM")) -> None:
    """Rate PERIOD as a draft (re-ratable until it is closed)."""
    from app.billing import periods
    from app.core.db import unit_of_work

    with _business_errors():
        with unit_of_work() as session:
            row = periods.rate(session=session, period=period, actor=_actor())
            out.print(_lines_table(session, row))
    out.print(f"[green]rated[/] {period} (draft; re-rate any time, `chargeback close --period {period}` to finalize)")


@app.command("close")
def close_command(
    period: str = typer.Option(..., "--period", help="YYYY-MM"),
    accept_gaps: bool = typer.Option(False, "--accept-gaps", help="finalize even with gap hours (hours never ingested still block: ingest them first)"),
    accept_unpooled: bool = typer.Option(
        False, "--accept-unpooled", help="finalize although GPUs on nodes no policy pool names stay unpriced"
    ),
    accept_unreconciled: bool = typer.Option(
        False, "--accept-unreconciled",
        help="finalize although hours do not reconcile with the source or were not checked (`chargeback reconcile`)"),
    reason: str = typer.Option(None, "--reason", help="why (required with any --accept-* option)"),
    issue: bool = typer.Option(True, "--issue/--no-issue",
                               help="issue the documents right after finalizing (else the worker issues them)"),
) -> None:
    """Finalize PERIOD (re-rate, store lines, one transaction), then issue its documents (a second one)."""
    from app.billing import periods
    from app.core.db import unit_of_work

    with _business_errors():
        with unit_of_work() as session:
            row = periods.close(
                session=session, period=period, actor=_actor(), accept_gaps=accept_gaps,
                accept_unpooled=accept_unpooled, reason=reason, accept_unreconciled=accept_unreconciled,
            )
            out.print(_lines_table(session, row))
    out.print(f"[green]finalized[/] {period}")
    if not issue:
        out.print("documents pending: the worker issues them (`chargeback issue` does it now)")
        return
    _issue(period)


def _issue(period: str) -> None:
    """Issue PERIOD's pending documents with a progress bar, and print the export hashes."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from app.billing import issuing
    from app.core.db import get_engine

    with Progress(TextColumn("issuing {task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=err, transient=True, disable=not err.is_terminal) as bar:
        task = bar.add_task(period, total=None)

        def progress(done: int, total: int, name: str) -> None:
            bar.update(task, completed=done, total=total, description=f"{period}: {escape(name)}")
            if not err.is_terminal:  # a log or a pipe gets a line per document instead of a bar
                err.print(f"issued {done}/{total} {escape(name)}", soft_wrap=True)

        try:
            done = issuing.issue_period(engine=get_engine(), month=period, actor=_actor(), progress=progress)
        except Exception as exc:  # the finalized lines are committed; the documents stay pending, whole
            err.print(f"[bold red]Issuing {period} failed:[/] {escape(str(exc))}. Its documents stay pending; "
                      "the worker (or `chargeback issue`) issues them again.")
            raise typer.Exit(1) from None
    if done is None:
        out.print(f"{period}: no documents pending here (issued already, or a worker is issuing them now)")
        return
    out.print(f"[green]issued[/] {done.documents} documents of {period}")
    for fmt, digest in done.sha256.items():
        out.print(f"  sha256 {fmt:5} {digest}")


@app.command("issue")
def issue_command(period: str = typer.Option(None, "--period", help="YYYY-MM (default: every pending month)")) -> None:
    """Issue the documents of a finalized PERIOD still pending (what the worker does after each round)."""
    from sqlmodel import Session

    from app.billing import issuing
    from app.core.db import get_engine

    with Session(get_engine()) as session:
        months = issuing.pending_months(session)
    if period is not None:
        months = [m for m in months if m == period]
    if not months:
        out.print("no finalized month has documents pending" + (f" ({period})" if period else ""))
        return
    for month in months:
        _issue(month)


@app.command("export")
def export_command(
    period: str = typer.Option(..., "--period", help="YYYY-MM"),
    fmt: str = typer.Option("csv", "--format", help="csv | focus | pdf"),
    out_path: Path = typer.Option(..., "--out", help="file to write ('-' for stdout)"),
) -> None:
    """Write PERIOD's export (CSV, FOCUS 1.2 CSV or PDF) to a file: once finalized, the document issued after close."""
    from app.billing import exports, issued
    from app.billing.period import rated_period
    from app.core.db import unit_of_work

    with _business_errors():
        exports.check_format(fmt)
        with unit_of_work() as session:
            row = rated_period(session=session, month=period)
            served = issued.serve(session=session, period=row, kind=fmt)
    if str(out_path) == "-":
        sys.stdout.buffer.write(served.content)
        return
    try:
        out_path.write_bytes(served.content)
    except OSError as exc:
        err.print(f"[bold red]Cannot write {out_path}:[/] {exc.strerror}")
        raise typer.Exit(1) from None
    note = {
        issued.ISSUED: " (the issued document; matches the finalized hash)",
        issued.LIVE: " (live render: the period is not finalized)",
    }.get(served.origin, f" [yellow]({served.notice})[/]")
    err.print(f"wrote {out_path} ({len(served.content):,} bytes, sha256 {served.sha256}){note}", soft_wrap=True)


@app.command("verify")
def verify_command(period: str = typer.Option(..., "--period", help="a finalized period, YYYY-MM")) -> None:
    """Check a finalized PERIOD's issued documents against the sealed manifest and the audit record of the issue
    (exit 1 if any is missing, added or changed), and say which a render today would no longer reproduce
    (informational)."""
    from app.billing import issued
    from app.billing.models import PeriodStatus
    from app.billing.period import rated_period
    from app.core.db import unit_of_work

    with _business_errors():
        with unit_of_work() as session:
            row = rated_period(session=session, month=period)
            if row.status != PeriodStatus.FINALIZED:
                err.print(f"[bold red]Not finalized:[/] {period} is {row.status}; only a finalized period has issued documents")
                raise typer.Exit(3)
            checks = issued.verify(session=session, period=row)
    corrupt = [c for c in checks if c.intact is False]
    for c in checks:
        name = c.name
        if c.problem is not None:
            state = f"[bold red]CORRUPT: {escape(c.problem)}[/]"
        elif c.intact is None:
            state = "not stored (finalized before issued documents were kept)"
            if c.stored_sha256 is not None:
                state += "; a render today " + ("DIFFERS from" if c.rendering_changed else "matches") + " the issued hash"
        elif not c.intact:
            state = "[bold red]CORRUPT: stored bytes do not match the stored hash[/]"
        else:
            state = "ok" + ("; rendering changed since issue (the issued bytes are served)" if c.rendering_changed else "")
        out.print(f"  {escape(name):30} {state}", soft_wrap=True)
    intact = sum(1 for c in checks if c.intact)
    changed = sum(1 for c in checks if c.rendering_changed)
    out.print(f"{period}: {intact} issued document(s) intact, {len(corrupt)} corrupt, "
              f"{changed} whose rendering changed since issue", soft_wrap=True)
    if corrupt:
        raise typer.Exit(1)


@app.command("correct")
def correct_command(
    period: str = typer.Option(..., "--period", help="the open period that receives the correction (YYYY-MM)"),
    line_id: str = typer.Option(..., "--line", help="id of the finalized line being corrected"),
    amount: str = typer.Option(..., "--amount", help="signed amount, e.g. -12.50"),
    reason: str = typer.Option(..., "--reason"),
) -> None:
    """Add a correction line to an open period that names a finalized line."""
    from app.billing import periods
    from app.core.db import unit_of_work

    with _business_errors():
        with unit_of_work() as session:
            line = periods.correct(session=session, period=period, line_id=line_id, amount=amount, reason=reason, actor=_actor())
            out.print(f"[green]added[/] {line.line_id}: {Decimal(line.amount):,.2f} correcting {line.corrects}")
