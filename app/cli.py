"""The `chargeback` command: one typer app with a sub-app per domain."""

from __future__ import annotations

import typer

from app.auth.cli import app as auth_app
from app.billing.budget_alerts import budget_task
from app.billing.cli import app as billing_app
from app.billing.hour_rates import hour_rates_task
from app.billing.issuing import issue_task
from app.billing.reconcile_cli import app as reconcile_app
from app.metrics.cli import app as metrics_app
from app.metrics.reconcile.task import reconcile_task
from app.metrics.simulator.cli import app as simulator_app
from app.notify.mail_deliver import mail_task
from app.notify.webhook_deliver import webhook_task
from app.policy.cli import app as policy_app
from app.review.impact import configured_latency_buckets
from app.web.cli import app as web_app

# Policy validation runs below metrics: the red-line bucket source is handed down from here.
# Tasks the worker runs after each ingestion round (outbox deliveries): each domain above metrics adds its own.
# Several workers run them at once: each task claims its rows first (see app.metrics.worker.run_worker).
WORKER_TASKS: list = []
WORKER_TASKS.append(hour_rates_task)  # the rates of the pool-hours just ingested, stored once (app/billing/hour_rates.py)
WORKER_TASKS.append(budget_task)  # budget.threshold events, before mail plans them (app/billing/budget_alerts.py)
WORKER_TASKS.append(issue_task)  # documents of months just closed, then period.finalized (app/billing/issuing.py)
WORKER_TASKS.append(mail_task)  # e-mailed statements and budget alerts (app/notify/mail_deliver.py)
WORKER_TASKS.append(webhook_task)  # signed webhooks to admin-configured subscriptions (app/notify/webhook_deliver.py)
WORKER_TASKS.append(reconcile_task)  # each ingested day checked against the source again (app/metrics/reconcile/task.py)
app = typer.Typer(help="GPU co-location chargeback portal", no_args_is_help=True,
                  context_settings={"obj": {"latency_buckets": configured_latency_buckets,
                                            "worker_tasks": WORKER_TASKS}})


# Commands that never open the database: no schema check before them (see main).
NO_DATABASE = frozenset({"db", "simulator", "demo", "doctor"})


@app.callback()
def _configuration_first() -> None:
    """Wrong settings stop every command with one line each, naming the variable (secrets never shown): exit 2."""
    from pydantic import ValidationError

    from app.core.clusters import ClusterConfigError
    from app.core.settings import get_settings, settings_errors

    try:
        get_settings()
    except ClusterConfigError as exc:
        typer.echo(f"configuration error: {exc}", err=True)
        raise typer.Exit(2) from None
    except ValidationError as exc:
        for line in settings_errors(exc):
            typer.echo(f"configuration error: {line}", err=True)
        raise typer.Exit(2) from None


db_app = typer.Typer(help="Database schema", no_args_is_help=True)
app.add_typer(db_app, name="db")
app.add_typer(policy_app, name="policy")
app.add_typer(simulator_app, name="simulator")
# Domain apps register top-level commands too (ingest, worker, rate, close, reconcile, export, user, token, serve).
for sub in (metrics_app, billing_app, reconcile_app, auth_app, web_app):
    for command in sub.registered_commands:
        app.registered_commands.append(command)
    for group in sub.registered_groups:
        app.registered_groups.append(group)


@db_app.command("upgrade")
def db_upgrade(revision: str = typer.Argument("head")) -> None:
    """Apply migrations up to REVISION (default: head)."""
    from app.core.migrate import upgrade
    from app.core.settings import get_settings

    upgrade(get_settings().database_url, revision)
    typer.echo(f"database at {revision}")


@db_app.command("downgrade")
def db_downgrade(revision: str = typer.Argument(...)) -> None:
    """Revert migrations down to REVISION ("base" for an empty database)."""
    from app.core.migrate import downgrade
    from app.core.settings import get_settings

    downgrade(get_settings().database_url, revision)
    typer.echo(f"database at {revision}")


@app.command("demo")
def demo(
    host: str = typer.Option("127.0.0.1", "--host"),
    port: int = typer.Option(8000, "--port"),
    days: int = typer.Option(30, "--days", min=1, max=400, help="days of simulated history to ingest"),
) -> None:
    """SQLite + the built-in simulator: ingest the last DAYS days, rate them, create an admin, serve."""
    from app.demo import run

    run(host=host, port=port, days=days)


def _opens_database(argv: list[str]) -> bool:
    """Whether the command line `argv` runs a command that opens the database (help never does)."""
    if "--help" in argv or "-h" in argv:
        return False
    words = [a for a in argv if not a.startswith("-")]
    if not words or words[0] in NO_DATABASE:
        return False
    return words[:2] != ["policy", "validate"]  # validating a file needs no database


def _schema_first(argv: list[str]) -> None:
    """A database this version cannot use (never migrated, an older schema, unreachable) stops a command that opens
    it before it starts, with one line naming the fix: exit 2."""
    from app.core.migrate import schema_problem
    from app.core.settings import get_settings

    if not _opens_database(argv):
        return
    try:
        url = get_settings().database_url
    except Exception:  # malformed settings: the app's callback reports them, one line each
        return
    problem = schema_problem(url)
    if problem is not None:
        typer.echo(f"error: {problem}", err=True)
        raise SystemExit(2)


def main() -> None:
    """The console script: a database this version cannot use ends any command with one line and exit 2, not a
    traceback (an unmigrated or older schema: `chargeback db upgrade`; an unreachable server: the URL to check)."""
    import sys

    from sqlalchemy.exc import DBAPIError

    _schema_first(sys.argv[1:])
    try:
        app()
    except DBAPIError:
        from app.core.migrate import schema_problem
        from app.core.settings import get_settings

        problem = schema_problem(get_settings().database_url)
        if problem is None:
            raise
        typer.echo(f"error: {problem}", err=True)
        raise SystemExit(2) from None
