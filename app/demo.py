"""`chargeback demo`: the embedded default — SQLite + the simulator, 30 days ingested and rated, then served."""

from __future__ import annotations

import os
import secrets
import threading
from dataclasses import dataclass
from datetime import timedelta

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from sqlmodel import Session, select

from app.core.db import get_engine, unit_of_work
from app.core.errors import AppError
from app.core.migrate import upgrade
from app.core.settings import Settings, get_settings
from app.core.timeutil import floor_hour, hours_between, utcnow

ADMIN = "admin"
PASSWORD_ENV = "CHARGEBACK_ADMIN_PASSWORD"


@dataclass
class DemoState:
    hours_ingested: int
    periods_rated: list[str]
    admin_password: str | None  # None when the admin existed already


def prepare(*, settings: Settings, days: int = 30, console: Console | None = None) -> DemoState:
    """Migrate, bootstrap the simulator's policy, ingest the last `days` days, rate their months, create an admin."""
    from app.metrics.simulator.policy import clusters_policy
    from app.metrics.worker import run_worker
    from app.policy.service import import_version, latest_version

    console = console or Console(stderr=True)
    upgrade(settings.database_url)
    engine = get_engine()
    end = floor_hour(utcnow() - timedelta(seconds=settings.ingest_delay_s))
    start = end - timedelta(days=days)
    sims = simulators(settings)
    with unit_of_work(engine) as session:
        if latest_version(session=session) is None:
            import_version(session=session, document=clusters_policy(sims), actor="demo", effective_from=start,
                           comment="demo bootstrap: the simulator's seed policy")

    columns = (TextColumn("[bold]ingest"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[state]}"),
               TimeElapsedColumn())
    with Progress(*columns, console=console) as bar:
        task = bar.add_task("ingest", total=len(hours_between(start, end)) * len(sims), state="")
        report = run_worker(engine=engine, sources={c: s.source() for c, s in sims.items()}, settings=settings, once=True,
                            backfill_start=start,
                            progress=lambda hour, state: bar.update(task, advance=1, state=f"{hour:%Y-%m-%d %H:%M}"))

    rated = []
    for month in sorted({f"{h:%Y-%m}" for h in (start, end - timedelta(hours=1))}):
        rated.append(_rate(engine=engine, month=month, console=console))
    password = _ensure_admin(engine=engine)
    return DemoState(hours_ingested=len(report.ingested), periods_rated=[m for m in rated if m], admin_password=password)


def simulators(settings: Settings) -> dict:
    """The simulated clusters: each configured cluster when every one is a simulator (CHARGEBACK_CLUSTERS with
    `simulator` entries: a demo of several clusters), else the one built-in simulator as the default cluster."""
    from app.core.clusters import DEFAULT_CLUSTER, SimulatorCluster
    from app.metrics.simulator import Simulator

    interval = settings.scrape_interval_s or 30
    configs = settings.cluster_configs()
    if not all(c.is_simulator for c in configs):
        return {DEFAULT_CLUSTER: Simulator(seed=settings.simulator_seed, gpus=settings.simulator_gpus,
                                           scrape_interval_s=interval)}
    out = {}
    for c in configs:
        sim = c.simulator or SimulatorCluster(seed=settings.simulator_seed, gpus=settings.simulator_gpus)
        out[c.name] = Simulator(seed=sim.seed, gpus=sim.gpus, scrape_interval_s=interval)
    return out


def _rate(*, engine, month: str, console: Console) -> str | None:
    from app.billing.periods import rate

    try:
        with unit_of_work(engine) as session:
            rate(session=session, period=month, actor="demo")
        return month
    except AppError as exc:
        console.print(f"[yellow]period {month} not rated: {exc.detail}")
        return None


def _ensure_admin(*, engine) -> str | None:
    from app.auth.models import User
    from app.auth.service import create_user

    with Session(engine) as session:
        if session.exec(select(User).where(User.name == ADMIN)).first():
            return None
    password = os.environ.get(PASSWORD_ENV) or secrets.token_urlsafe(12)
    with unit_of_work(engine) as session:
        create_user(session=session, name=ADMIN, role="admin", password=password, actor="demo")
    return password


def keep_ingesting(*, settings: Settings, stop: threading.Event) -> threading.Thread:
    """A background worker so that the demo keeps up as the simulated cluster runs on."""
    from app.billing.issuing import issue_task
    from app.metrics.worker import run_worker

    sources = {c: sim.source() for c, sim in simulators(settings).items()}
    thread = threading.Thread(
        target=run_worker, name="demo-worker", daemon=True,
        # A month closed in the demo gets its documents from this worker's next round.
        kwargs={"engine": get_engine(), "sources": sources, "settings": settings, "poll_seconds": 60, "stop": stop,
                "tasks": [issue_task]},
    )
    thread.start()
    return thread


def run(*, host: str, port: int, days: int) -> None:
    """Prepare the demo database, print how to log in, and serve until interrupted."""
    import uvicorn

    from app.web.cli import refuse_placeholder_secret_off_loopback

    refuse_placeholder_secret_off_loopback(host)  # before minutes of ingest, not after
    settings = get_settings()
    console = Console(stderr=True)
    if any(c.url for c in settings.cluster_configs()):
        console.print("[yellow]A Prometheus URL is configured; the demo uses the built-in simulator regardless")
    state = prepare(settings=settings, days=days, console=console)
    console.print(f"ingested {state.hours_ingested} hours; rated {', '.join(state.periods_rated) or 'nothing'}")
    if state.admin_password:
        console.print(f"[bold]log in as {ADMIN} with password: {state.admin_password}[/bold] (shown once)")
    else:
        console.print(f"log in as {ADMIN} (existing account; set {PASSWORD_ENV} on a fresh database to choose its password)")
    console.print(f"[bold green]portal: http://{host}:{port}/[/bold green]")
    stop = threading.Event()
    keep_ingesting(settings=settings, stop=stop)
    try:
        uvicorn.run("app.main:app", host=host, port=port, access_log=False)
    finally:
        stop.set()
