"""The live fleet view in chromium, fed by a real Prometheus scraping the simulator's exporter: driving the
simulator's state (a free GPU taken by a training pod) shows on the page within a minute, through the page's
own htmx refresh; MIG instances by their profile. Waits for the state shown, never for a time."""

from __future__ import annotations

import os
from datetime import timedelta

import pytest
from playwright.sync_api import expect

from app.auth import service
from app.core.db import make_engine, unit_of_work
from app.core.timeutil import floor_hour, utcnow
from app.metrics.simulator import Simulator, serve_exporter
from app.metrics.simulator.policy import seed_policy
from app.metrics.simulator.workload import Pod
from app.policy.service import import_version
from tests.support.browser import SHOTS, sign_in
from tests.support.databases import migrated, new_sqlite_database
from tests.support.prometheus import PrometheusServer
from tests.support.server import running_portal

MINUTE_MS = 60_000
PASSWORD = "live-view-passphrase"


@pytest.fixture(scope="module")
def live_portal(tmp_path_factory):
    """A portal whose Prometheus scrapes the simulator's exporter every 2 s; yields (base URL, simulator)."""
    sim = Simulator(seed=11, gpus=32, scrape_interval_s=30)
    root = tmp_path_factory.mktemp("live")
    url = migrated(new_sqlite_database(root))
    engine = make_engine(url)
    with unit_of_work(engine) as session:
        import_version(session=session, document=seed_policy(sim), actor="seed",
                       effective_from=floor_hour(utcnow()) - timedelta(days=1))
        service.create_user(session=session, name="ada", role="admin", password=PASSWORD, actor="seed")
    engine.dispose()
    exporter = serve_exporter(sim)
    target = f"127.0.0.1:{exporter.server_address[1]}"
    try:
        with PrometheusServer(root / "prom", scrape_target=target, scrape_interval_s=2) as prom:
            env = {**os.environ, "CHARGEBACK_PROMETHEUS_URL": prom.url}
            with running_portal(url, log_dir=root, env=env) as portal:
                yield portal.base, sim
                log = portal.log()
    finally:
        exporter.shutdown()
    assert "Traceback" not in log, log[-5000:]


def test_live_view_follows_the_simulator(live_portal, browser):
    base, sim = live_portal
    page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
    sign_in(page, base, "ada", PASSWORD)
    page.goto(f"{base}/fleet/live")
    # A MIG instance by its profile (once Prometheus has its first scrapes, the refresh shows them).
    mig = next(g for g in sim.topology.gpus if g.mig)
    row = page.locator(f'tr[data-uuid="{mig.uuid}"][data-instance="1"]')
    expect(row).to_contain_text("3g.40gb", timeout=MINUTE_MS)
    expect(page.locator(f'section[data-node="{mig.node.name}"]')).to_contain_text("matches")
    # A GPU the schedule never uses: idle, until the simulator marks it busy for a training tenant.
    unit = next(u for u in sim.topology.units if u.role.kind == "none")
    free = page.locator(f'tr[data-uuid="{unit.gpu.uuid}"] td.holder')
    expect(free).to_contain_text("idle", timeout=MINUTE_MS)
    sim.hold(unit.index, (Pod("vision-probe-worker-0", "vision-train", "trainer", 90),), utcnow())
    expect(free).to_contain_text("vision", timeout=MINUTE_MS)  # within a minute of the change
    expect(free).to_contain_text("vision-probe-worker-0")
    # Its memory is the pod's, not the free series' 0 still inside the last minute (the newest sample wins).
    memory = page.locator(f'tr[data-uuid="{unit.gpu.uuid}"] td').nth(3)
    expect(memory).to_contain_text(f"{unit.memory_mib * 92 // 100:,} / {unit.memory_mib:,} MiB", timeout=MINUTE_MS)
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / "fleet-live.png"), full_page=True)
    page.goto(f"{base}/fleet")
    expect(page.locator("main")).to_contain_text("Live fleet view")
    page.screenshot(path=str(SHOTS / "fleet-history.png"), full_page=True)
    page.context.close()


@pytest.mark.parametrize("width", [1280, 390])
def test_pool_states_p99_and_the_doctor_fit_the_screen(live_portal, browser, width):
    """Each pool's state and figures, each service's P99 and red line inside the viewport at both widths; the
    Fleet page's doctor link leads to findings in readable text, each with a next step."""
    base, _ = live_portal
    page = browser.new_context(viewport={"width": width, "height": 900}).new_page()
    sign_in(page, base, "ada", PASSWORD)
    page.goto(f"{base}/fleet/live")
    expect(page.locator("#live-sla tr[data-service] td.p99").first).to_contain_text("ms", timeout=MINUTE_MS)
    cells = page.locator("#live-pools tr[data-pool] > *, #live-sla tr[data-service] > *")
    assert cells.count() >= 3 * 4
    for i in range(cells.count()):
        box = cells.nth(i).bounding_box()
        assert box and box["x"] >= 0 and box["x"] + box["width"] <= width + 0.5, (width, i, cells.nth(i).inner_text(), box)
    states = page.locator("#live-pools tr[data-pool]")
    for i in range(states.count()):
        row = states.nth(i)
        if row.locator("td").nth(1).inner_text().startswith("0 /"):  # nothing occupied: idle, never busy
            assert row.get_attribute("data-state") == "idle", row.inner_text()
    assert "within in" not in page.locator("#live-sla").inner_text()
    page.screenshot(path=str(SHOTS / f"fleet-live-{width}.png"), full_page=True)
    page.goto(f"{base}/fleet")
    page.click("#doctor-link")
    expect(page.locator("table.doctor")).to_be_visible(timeout=MINUTE_MS)
    rows = page.locator("table.doctor tbody tr")
    assert rows.count() >= 1
    for i in range(rows.count()):
        text = rows.nth(i).inner_text()
        assert "`" not in text and "{'" not in text, text
        assert rows.nth(i).locator("td.next-step").inner_text().strip(), text
    page.screenshot(path=str(SHOTS / f"doctor-{width}.png"), full_page=True)
    page.context.close()
