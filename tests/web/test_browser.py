"""A real uvicorn and headless chromium: sign in, the overview draws its chart from ingested simulator data.

Screenshots go to artifacts/screenshots/: overview.png (1280 px), overview-phone.png (390 px), admin-tokens.png,
admin-users.png.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import sync_playwright

from app.auth import service
from app.core.db import make_engine, unit_of_work
from app.core.timeutil import floor_hour, utcnow
from app.metrics.ingest import ingest_hours
from app.metrics.simulator import Simulator
from app.metrics.simulator.policy import seed_policy
from app.policy.service import import_version
from tests.support.browser import sign_in
from tests.support.databases import migrated, new_sqlite_database
from tests.support.server import running_portal

pytestmark = pytest.mark.browser
ROOT = Path(__file__).resolve().parents[2]
SHOTS = ROOT / "artifacts" / "screenshots"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync"]
PASSWORD = "browser-test-passphrase"


@pytest.fixture(scope="module")
def portal(tmp_path_factory):
    """A seeded SQLite portal (48 simulator hours, an admin) served by a real uvicorn process."""
    url = migrated(new_sqlite_database(tmp_path_factory.mktemp("browser")))
    engine = make_engine(url)
    sim = Simulator(seed=42, gpus=32, scrape_interval_s=30)
    end = floor_hour(utcnow())
    start = end - timedelta(hours=48)
    with unit_of_work(engine) as session:
        import_version(session=session, document=seed_policy(sim), actor="test", effective_from=start - timedelta(days=1))
        service.create_user(session=session, name="ada", role="admin", password=PASSWORD, actor="test")
    with unit_of_work(engine) as session:
        report = ingest_hours(session=session, source=sim.source(), start=start, end=end, scrape_interval_s=30)
    assert len(report.ok) == 48 and not report.gaps
    engine.dispose()

    with running_portal(url, log_dir=tmp_path_factory.mktemp("uvicorn")) as portal:
        yield portal.base
    server_log = portal.log()
    assert "Traceback" not in server_log, server_log
    assert PASSWORD not in server_log


def _sign_in(page, base: str) -> None:
    page.goto(f"{base}/")
    assert page.url.startswith(f"{base}/login?next=")
    sign_in(page, base, "ada", PASSWORD)
    page.wait_for_url(f"{base}/")  # back where the visit started


def _chart_totals(page) -> dict:
    page.wait_for_selector("canvas#overview-chart[data-rendered=true]", timeout=15000)
    return page.evaluate(
        """() => {
            const chart = Chart.getChart(document.getElementById('overview-chart'));
            const total = chart.data.datasets.reduce((s, d) => s + d.data.reduce((a, b) => a + b, 0), 0);
            return {labels: chart.data.labels, datasets: chart.data.datasets.length, total: total,
                    width: chart.width, height: chart.height};
        }"""
    )


def test_sign_in_and_overview_chart(portal):
    SHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            problems: list[str] = []
            page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
            page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
            _sign_in(page, portal)
            chart = _chart_totals(page)
            assert chart["datasets"] >= 2 and len(chart["labels"]) >= 3
            assert chart["total"] > 100  # 32 GPUs for 48 hours: well over 100 GPU-hours attributed
            assert chart["width"] > 600 and chart["height"] >= 220
            assert page.locator("table.numbers tbody tr").count() == len(chart["labels"])
            page.screenshot(path=str(SHOTS / "overview.png"), full_page=True)

            # The range picker swaps the content in place (htmx) and redraws the chart.
            page.fill("#start", (utcnow() - timedelta(days=1)).date().isoformat())
            page.click(".range-picker button")
            page.wait_for_function("() => location.search.includes('start=')")
            narrowed = _chart_totals(page)
            assert 0 < narrowed["total"] <= chart["total"]

            # Keyboard users: the first Tab lands on the skip link.
            page.goto(f"{portal}/")
            page.keyboard.press("Tab")
            assert page.evaluate("document.activeElement.className") == "skip-link"

            # Admin: create an API token with an htmx form (CSRF travels in hx-headers), shown once, then revoke it.
            page.goto(f"{portal}/admin/tokens")
            page.fill("#nt-label", "browser smoke")
            page.click("text=Create token")
            page.wait_for_selector("#new-token")
            token = page.input_value("#new-token")
            assert token.startswith("cbt_") and len(token) > 40
            assert httpx.get(f"{portal}/api/v1/me", headers={"Authorization": f"Bearer {token}"}).json()["name"] == "ada"
            page.screenshot(path=str(SHOTS / "admin-tokens.png"), full_page=True)
            page.once("dialog", lambda dialog: dialog.accept())
            page.click("button.button-danger")
            page.wait_for_selector("text=revoked")
            assert page.locator("#new-token").count() == 0  # gone after the next render
            assert httpx.get(f"{portal}/api/v1/me", headers={"Authorization": f"Bearer {token}"}).status_code == 401

            page.goto(f"{portal}/admin/users")
            assert page.locator("tbody th[scope=row]", has_text="ada").count() == 1
            page.screenshot(path=str(SHOTS / "admin-users.png"), full_page=True)

            phone = browser.new_page(viewport={"width": 390, "height": 844}, device_scale_factor=2)
            phone.on("pageerror", lambda e: problems.append(f"phone page error: {e}"))
            _sign_in(phone, portal)
            _chart_totals(phone)
            overflow = phone.evaluate("document.documentElement.scrollWidth - window.innerWidth")
            assert overflow <= 0, f"page is {overflow}px wider than a phone screen"
            phone.screenshot(path=str(SHOTS / "overview-phone.png"), full_page=True)
            assert not problems, problems
        finally:
            browser.close()
