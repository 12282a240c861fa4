"""`chargeback policy ...` commands: import (the audited bootstrap path), show, validate, list."""

from __future__ import annotations

from pathlib import Path

import typer

from app.core.errors import AppError, FieldError

app = typer.Typer(help="policy commands", no_args_is_help=True)


def _read(file: Path) -> str:
    try:
        return file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        typer.echo(f"error: cannot read {file}: {exc}", err=True)
        raise typer.Exit(1) from None


def _print_problems(problems: list[FieldError]) -> None:
    for problem in problems:
        where = problem.path or "(document)"
        typer.echo(f"{problem.severity}: {where}: {problem.message}", err=True)


def _fail(exc: AppError) -> None:
    typer.echo(f"error: {exc.detail}", err=True)
    _print_problems(exc.errors)
    raise typer.Exit(1)


@app.command("import")
def import_(
    file: Path = typer.Argument(..., help="policy document, YAML or JSON"),
    effective_from: str | None = typer.Option(None, "--effective-from", help="ISO time on the hour, e.g. 2026-12-03T05:00Z (default: this hour)"),
    actor: str = typer.Option("cli", "--actor", help="who imports (recorded in the audit log)"),
    comment: str = typer.Option("", "--comment"),
) -> None:
    """Store FILE as a new immutable policy version and print its number (a document identical to the latest
    version stores nothing: that version's number is printed, and 'unchanged' on stderr)."""
    from app.core.db import unit_of_work
    from app.core.timeutil import parse_iso
    from app.policy.parsing import parse_document
    from app.policy.service import import_if_changed

    when = None
    if effective_from:
        try:
            when = parse_iso(effective_from)
        except ValueError:
            typer.echo(f"error: --effective-from: '{effective_from}' is not an ISO 8601 time", err=True)
            raise typer.Exit(1) from None
    try:
        document = parse_document(_read(file))
        with unit_of_work() as session:
            version, stored = import_if_changed(session=session, document=document, actor=actor, effective_from=when,
                                                comment=comment)
            number, sha = version.id, version.sha256
    except AppError as exc:
        _fail(exc)
    if not stored:
        typer.echo(f"unchanged: {file} is version {number}'s document (sha256 {sha[:12]}); nothing stored", err=True)
    typer.echo(str(number))


@app.command("show")
def show(
    version: int | None = typer.Option(None, "--version", help="version number (default: the active one)"),
    fmt: str = typer.Option("yaml", "--format", help="yaml or json"),
) -> None:
    """Print one stored version (default: the one in effect now)."""
    from app.core.db import unit_of_work
    from app.policy.service import active_version, dump_json, dump_yaml, get_version, load_document

    if fmt not in ("yaml", "json"):
        typer.echo("error: --format must be yaml or json", err=True)
        raise typer.Exit(1)
    try:
        with unit_of_work() as session:
            found = get_version(session=session, number=version) if version is not None else active_version(session=session)
    except AppError as exc:
        _fail(exc)
    if found is None:
        typer.echo("error: no policy version is in effect yet (import one with `chargeback policy import`)", err=True)
        raise typer.Exit(1)
    document = load_document(found)
    typer.echo(dump_yaml(document) if fmt == "yaml" else dump_json(document), nl=fmt == "json")


@app.command("validate")
def validate_(ctx: typer.Context, file: Path = typer.Argument(..., help="policy document, YAML or JSON")) -> None:
    """Check FILE: print every error and warning with its path; exit 1 on errors."""
    from app.policy.parsing import check_document

    # Red lines are checked against the histograms' real buckets when the `chargeback` command
    # supplies a source (the Prometheus client lives above policy, in metrics).
    source = (ctx.obj or {}).get("latency_buckets")
    _, problems = check_document(_read(file), latency_buckets=source() if source else None)
    _print_problems(problems)
    errors = sum(1 for p in problems if p.severity == "error")
    typer.echo(f"{errors} error(s), {len(problems) - errors} warning(s)")
    if errors:
        raise typer.Exit(1)


@app.command("list")
def list_() -> None:
    """List stored versions: number, effective from, source, author, sha256."""
    from app.core.db import unit_of_work
    from app.policy.service import list_versions

    with unit_of_work() as session:
        versions = list_versions(session=session)
    if not versions:
        typer.echo("no policy versions")
        return
    for v in versions:
        typer.echo(f"{v.id}\t{v.effective_from.isoformat()}\t{v.source}\t{v.created_by}\t{v.sha256[:12]}\t{v.comment}")
