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


@app.callback()
def _configuration_first() -> None:
    """A wrong cluster list stops every command with its own one-line message (fields named, secrets never shown)."""
    from app.core.clusters import ClusterConfigError
    from app.core.settings import get_settings

    try:
        get_settings()
    except ClusterConfigError as exc:
        typer.echo(f"configuration error: {exc}", err=True)
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


def main() -> None:
    app()
