"""A real portal for browser tests: PostgreSQL built by migrations, seeded by the simulator through ingestion and
rating, served by a uvicorn subprocess on a free loopback port; one headless chromium for the module."""

from __future__ import annotations

from datetime import timedelta

import pytest
from playwright.sync_api import sync_playwright

from app.auth import service
from app.billing import periods
from app.core.db import make_engine, unit_of_work
from app.core.settings import Settings, get_settings
from app.core.timeutil import floor_hour, utcnow
from app.metrics.ingest import ingest_hours
from app.metrics.simulator import Simulator
from app.metrics.simulator.policy import seed_policy
from app.notify.webhook_deliver import webhook_task
from app.notify.webhook_subscriptions import create_subscription
from app.policy.service import import_version
from tests.support.browser import SHOTS, sign_in
from tests.support.databases import drop_postgres_database, migrated, new_postgres_database
from tests.support.server import running_portal

CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync"]
PASSWORD = "browser-suite-passphrase"
UNREACHABLE_HOOK = "http://127.0.0.1:9/erp"  # the discard port: nothing listens, the connection is refused
DAYS = 7
# name -> (role, tenants)
USERS = {"ada": ("admin", []), "olga": ("operator", []), "rex": ("reviewer", []), "fin": ("finance", []),
         "tess": ("tenant", ["search"]), "vic": ("tenant", ["vision"])}


def _months(start, end) -> list[str]:
    tz = get_settings().tz
    out, h = [], start
    while h < end:
        m = h.astimezone(tz).strftime("%Y-%m")
        if m not in out:
            out.append(m)
        h += timedelta(hours=1)
    return out


@pytest.fixture(scope="module")
def portal(tmp_path_factory):
    """Base URL of a seeded portal: DAYS days of a 32-GPU simulated cluster, every touched month rated."""
    url = migrated(new_postgres_database("cbbrowser"))
    engine = make_engine(url)
    sim = Simulator(seed=7, gpus=32, scrape_interval_s=30)
    end = floor_hour(utcnow())
    start = end - timedelta(days=DAYS)
    with unit_of_work(engine) as session:
        import_version(session=session, document=seed_policy(sim), actor="seed", effective_from=start - timedelta(days=1))
        for name, (role, tenants) in USERS.items():
            service.create_user(session=session, name=name, role=role, password=PASSWORD, tenants=tenants, actor="seed")
    with unit_of_work(engine) as session:
        report = ingest_hours(session=session, source=sim.source(), start=start, end=end, scrape_interval_s=30)
    assert len(report.ok) == DAYS * 24 and not report.gaps
    months = _months(start, end)
    with unit_of_work(engine) as session:  # a receiver nobody listens at: its page shows failed attempts
        create_subscription(session=session, actor="seed", url=UNREACHABLE_HOOK, event_types=["period.rated"],
                            description="ERP (unreachable)")
    with unit_of_work(engine) as session:
        for month in months:
            periods.rate(session=session, period=month, actor="seed")
    webhook_task(engine, settings=Settings(webhook_connect_timeout_s=1, webhook_deadline_s=2))
    engine.dispose()

    try:
        with running_portal(url, log_dir=tmp_path_factory.mktemp("uvicorn")) as portal:
            yield {"base": portal.base, "months": months, "month": months[-1], "start": start, "end": end, "url": url}
        server_log = portal.log()
    finally:
        drop_postgres_database(url)
    assert "Traceback" not in server_log, server_log[-5000:]
    assert PASSWORD not in server_log


# Module scope: a sync Playwright left running would make the next module's sync_playwright() fail
# ("Sync API inside the asyncio loop").
@pytest.fixture(scope="module")
def engine(portal):
    """An engine on the module's portal database, for tests that set up their scene directly."""
    engine = make_engine(portal["url"])
    yield engine
    engine.dispose()


@pytest.fixture(scope="module")
def browser():
    SHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


class Console:
    """Console errors and uncaught page errors of every page opened through `open_as`."""

    def __init__(self):
        self.problems: list[str] = []

    def watch(self, page, who: str) -> None:
        page.on("console", lambda m: self.problems.append(f"{who} console {m.type}: {m.text} @ {page.url}")
                if m.type == "error" and not _expected(m.text) else None)
        page.on("pageerror", lambda e: self.problems.append(f"{who} page error: {e} @ {page.url}"))


def _expected(text: str) -> bool:
    # A deliberate 403/404 page load is reported by chromium as a failed resource; that is the test, not a bug.
    return "Failed to load resource: the server responded with a status of 40" in text


@pytest.fixture(scope="module")
def console():
    return Console()


@pytest.fixture(scope="module")
def sessions(portal, browser, console):
    """Signed-in browser contexts by user name (each signs in once, through the login form)."""
    contexts = {}

    def open_as(name: str, *, width: int = 1280, height: int = 900):
        key = (name, width)
        if key not in contexts:
            ctx = browser.new_context(viewport={"width": width, "height": height}, accept_downloads=True)
            page = ctx.new_page()
            console.watch(page, name)
            page.goto(f"{portal['base']}/login")
            sign_in(page, portal["base"], name, PASSWORD)
            contexts[key] = page
        return contexts[key]

    yield open_as
    for page in contexts.values():
        page.context.close()
