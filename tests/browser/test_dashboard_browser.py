"""The portal in headless chromium against a real uvicorn + PostgreSQL seeded by the simulator.

Every view is screenshotted to artifacts/screenshots/ (1280 px; the overview also at 375 px).
"""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from playwright.sync_api import expect

from app.billing import issuing, periods
from app.core.db import make_engine, unit_of_work
from app.core.timeutil import floor_hour, utcnow
from tests.support.billing import record_gaps
from tests.support.browser import SHOTS, ask, submit

pytestmark = pytest.mark.browser

CHARTS_JS = """() => Array.from(document.querySelectorAll('main canvas')).map(c => {
    const chart = Chart.getChart(c);
    const ctx = c.getContext('2d');
    const pixels = ctx.getImageData(0, 0, c.width, c.height).data;
    let painted = 0;
    for (let i = 3; i < pixels.length; i += 4) if (pixels[i] > 0) painted++;
    return {id: c.id, rendered: c.dataset.rendered === 'true', width: c.clientWidth, height: c.clientHeight,
            labels: chart ? chart.data.labels.length : 0,
            total: chart ? chart.data.datasets.reduce((s, d) => s + d.data.reduce((a, b) => a + (+b || 0), 0), 0) : 0,
            painted: painted};
})"""


def shot(page, name: str) -> None:
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def charts(page) -> list[dict]:
    page.wait_for_load_state("load")
    page.wait_for_function("() => Array.from(document.querySelectorAll('main canvas')).every(c => c.dataset.rendered === 'true')",
                           timeout=15000)
    return page.evaluate(CHARTS_JS)


def assert_charts_drawn(page, minimum: int) -> list[dict]:
    found = charts(page)
    assert len(found) >= minimum, found
    for c in found:
        assert c["labels"] > 0 and c["total"] > 0, c
        assert c["painted"] > 500 and c["width"] > 200, c  # pixels really drawn, not an empty canvas
    return found


def no_overflow(page) -> int:
    return page.evaluate("document.documentElement.scrollWidth - window.innerWidth")


def test_overview_charts_and_phone_width(portal, sessions, console):
    page = sessions("ada")
    page.goto(f"{portal['base']}/")
    assert_charts_drawn(page, 1)
    shot(page, "overview")
    phone = sessions("ada", width=375, height=812)
    phone.goto(f"{portal['base']}/")
    assert_charts_drawn(phone, 1)
    assert no_overflow(phone) <= 0, "the overview is wider than a 375 px phone"
    shot(phone, "overview-375")
    assert not console.problems, console.problems


def test_views_render_with_data_and_keyboard(portal, sessions, console):
    page = sessions("ada")
    base = portal["base"]
    page.goto(f"{base}/fleet")
    cells = page.locator(".heat-cell[title*='%']").count()
    assert cells >= len(portal["months"]) * 3  # three pools, at least one ingested day each
    assert page.get_by_text("no measurement").count() == 0  # memory headroom is measured from stored FB_USED peaks
    shot(page, "fleet")

    page.goto(f"{base}/tenants")
    rows = page.locator("#tenant-table tbody tr")
    assert rows.count() >= 5
    # Sort by name through the htmx partial: only the table is swapped, the URL follows.
    page.locator("#tenant-table thead a.sort", has_text="Tenant").click()
    page.wait_for_url(re.compile(r"sort=tenant"))
    page.wait_for_function("() => document.querySelector('#tenant-table th[aria-sort]')?.textContent.includes('Tenant')")
    names = page.locator("#tenant-table tbody th a").all_inner_texts()
    assert names == sorted(names, reverse=True) or names == sorted(names)
    # Filter as you type (keyboard only).
    page.locator("#tenant-filter").focus()
    page.keyboard.type("vis")
    page.wait_for_function("() => document.querySelectorAll('#tenant-table tbody th a').length === 1")
    assert page.locator("#tenant-table tbody th a").inner_text() == "vision"
    assert page.evaluate("document.activeElement.id") == "tenant-filter"  # focus survives the swap
    page.fill("#tenant-filter", "")
    page.wait_for_function("() => document.querySelectorAll('#tenant-table tbody th a').length >= 5")
    shot(page, "tenants")

    page.goto(f"{base}/sla")
    assert_charts_drawn(page, 1)
    assert page.locator("table").first.is_visible()
    shot(page, "sla")

    # Date-range presets are real links reachable by keyboard; the picker swaps #main in place.
    page.goto(f"{base}/tenants")
    preset = page.locator(".range-presets a", has_text="Last 30 days")
    preset.focus()
    outline = page.evaluate("getComputedStyle(document.activeElement).outlineStyle")
    assert outline != "none"  # focus is visible
    page.keyboard.press("Enter")
    page.wait_for_url(re.compile(r"start=.*end="))
    assert "Last 30 days" in page.locator(".range-presets a[aria-current=true]").all_inner_texts()
    # Back to an htmx-pushed URL restores a whole page (header and navigation included), not a bare fragment.
    pushed = page.url
    page.locator(".range-presets a", has_text="Last month").click()
    page.wait_for_function(f"() => location.href !== {pushed!r}")
    page.evaluate("window.__restored = false; document.addEventListener('htmx:historyRestore', () => { window.__restored = true; })")
    page.go_back()
    page.wait_for_url(pushed)
    page.wait_for_function("() => window.__restored === true")
    page.wait_for_selector("nav.site-nav a[aria-current=page]")
    assert page.locator("main h1").inner_text() == "Tenants" and page.locator("header.site-header").count() == 1
    assert not console.problems, console.problems


def test_drill_overview_to_tenant_to_invoice_pdf(portal, sessions, console):
    page = sessions("ada")
    base, month = portal["base"], portal["month"]
    page.goto(f"{base}/")
    page.locator("main a[href^='/tenants/vision']").first.click()
    page.wait_for_url(re.compile(r"/tenants/vision"))
    assert_charts_drawn(page, 1)
    shot(page, "tenant-detail")
    # the Invoices table's row (the month's card links the same draft beside what the tenant owes)
    page.locator(f"section[aria-labelledby=invoices-title] a[href='/billing/{month}/vision']").click()
    page.wait_for_url(f"{base}/billing/{month}/vision")
    assert page.locator("h1").inner_text().startswith(f"Invoice {month}")
    shot(page, "invoice")
    with page.expect_download() as download:
        page.locator("main a", has_text="Download PDF").click()
    assert download.value.suggested_filename == f"invoice-{month}-vision.pdf"
    pdf = download.value.path().read_bytes()
    assert pdf.startswith(b"%PDF") and len(pdf) > 1000
    page.goto(f"{base}/billing")
    shot(page, "billing")
    assert not console.problems, console.problems


def test_change_request_review_release_history(portal, sessions, console):
    base = portal["base"]
    op = sessions("olga")
    op.goto(f"{base}/policy/changes/new")
    op.fill("#title", "Shrink the vision guarantee")
    op.fill("#justification", "Vision trains mostly in dark time; free guaranteed GPUs for etl.")
    op.click("main button:has-text('Save draft')")
    op.wait_for_url(re.compile(r"/policy/changes/\d+$"))
    change_url = op.url
    change_id = change_url.rsplit("/", 1)[1]
    op.fill("input[name=path]", "quotas[vision/mixed-a100].guaranteed_gpus")
    op.fill("input[name=value]", "8")  # from 10; the lending limit (2) still fits
    submit(op, "main button:has-text('Set field')", shows="guaranteed_gpus")  # the diff against the base version
    submit(op, "main button:has-text('Submit for review')")
    expect(op.locator("main p").first).to_contain_text("submitted")

    reviewer = sessions("rex")
    reviewer.goto(change_url)
    reviewer.fill("#review-comment", "Fine: etl needs it.")
    ask(reviewer, "main button:has-text('Approve')", shows="Approve change request")  # the confirm step
    submit(reviewer, "main button:has-text('Approve')")
    expect(reviewer.locator("main p").first).to_contain_text("approved")
    shot(reviewer, "change-request")

    op.goto(f"{base}/policy/releases")
    planned = (utcnow() + timedelta(days=1)).strftime("%Y-%m-%dT%H:%M")
    op.fill("input[name=name]", "search-chat 2.4")
    op.fill("input[name=service]", "search-chat")
    op.fill("input[name=planned_at]", planned)
    op.click("main button:has-text('Plan')")
    op.wait_for_selector("text=search-chat 2.4")
    op.select_option("select[name=change_id]", change_id)
    op.click("main button:has-text('Attach')")
    op.wait_for_selector(f"main a[href='/policy/changes/{change_id}']")
    effective = (floor_hour(utcnow()) + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M")
    op.fill("input[name=effective_from]", effective)
    ask(op, "main button:has-text('Apply policy')", shows="Apply search-chat 2.4?")  # the confirm step
    submit(op, "main form button:has-text('Apply policy')", shows="Applied as")
    shot(op, "releases")

    op.goto(f"{base}/policy/versions")
    history = op.locator("main").inner_text()
    assert "Version 2" in history and "guaranteed_gpus" in history
    op.goto(f"{base}/policy")
    shot(op, "policy")
    op.goto(f"{base}/policy/audit")
    assert "release" in op.locator("main").inner_text().lower()
    shot(op, "audit")
    assert not console.problems, console.problems


def test_finance_closes_a_period(portal, sessions, console):
    fin = sessions("fin")
    month = portal["month"]
    fin.goto(f"{portal['base']}/billing/{month}")
    assert "rated" in fin.locator("main").inner_text()
    # The current month is still running: its hours to come are never ingested, which no acceptance covers.
    expect(fin.locator('#checklist li[data-key="coverage"]')).to_contain_text("the month has not ended")
    assert fin.locator("input[name=accept_gaps]").count() == 0
    assert fin.locator(f"main button:has-text('Review and finalize {month}')").count() == 0

    # The month before has ended; the worker tried its hours before the simulated week and the source could not
    # answer them (gaps), so finance closes it with the gaps accepted and a reason.
    year, number = (int(part) for part in month.split("-"))
    previous = f"{year - 1}-12" if number == 1 else f"{year}-{number - 1:02d}"
    engine = make_engine(portal["url"])
    try:
        with unit_of_work(engine) as session:
            assert record_gaps(session, previous) > 0
        with unit_of_work(engine) as session:
            periods.rate(session=session, period=previous, actor="seed")
    finally:
        engine.dispose()
    fin.goto(f"{portal['base']}/billing/{previous}")
    expect(fin.locator('#checklist li[data-key="coverage"]')).to_contain_text("the source could not answer")
    fin.check("input[name=accept_gaps]")
    fin.fill("#reason", "Browser test: the cluster was not yet exported to Prometheus")
    fin.click(f"main button:has-text('Review and finalize {previous}')")
    expect(fin.locator("#close-confirm")).to_contain_text("This cannot be undone")
    submit(fin, "#confirm-finalize", shows=f"{previous} is finalized.")
    assert fin.locator("main button:has-text('inalize')").count() == 0
    # The documents follow from the worker's issuing step (run here, as the worker would).
    expect(fin.locator("#documents-pending")).to_contain_text("Documents being issued")
    engine = make_engine(portal["url"])
    try:
        assert issuing.issue_task(engine)
    finally:
        engine.dispose()
    fin.reload()
    expect(fin.locator("main")).to_contain_text("finalized")
    assert fin.locator("#documents-pending").count() == 0
    assert not console.problems, console.problems


def test_tenant_member_cannot_reach_other_tenants(portal, sessions, console):
    page = sessions("tess")
    base, month = portal["base"], portal["month"]
    page.goto(f"{base}/tenants")
    assert page.locator("#tenant-table tbody th a").all_inner_texts() == ["search"]
    for path in ("/tenants/vision", f"/billing/{month}/vision", "/tenants/etl"):
        response = page.goto(f"{base}{path}")
        assert response.status == 404, path
        assert "vision" not in page.locator("main").inner_text().replace("'vision'", "") or path.endswith("vision")
    assert page.goto(f"{base}/fleet").status == 403
    assert page.goto(f"{base}/tenants/search").status == 200
    assert "vision" not in page.content()


def test_admin_users_screenshot(portal, sessions, console):
    page = sessions("ada")
    page.goto(f"{portal['base']}/admin/users")
    assert page.locator("main table").count() >= 1
    shot(page, "admin-users")
    assert not console.problems, console.problems


def test_monthly_report_page_charts_and_pdf(portal, sessions, console):
    page = sessions("fin")
    base, month = portal["base"], portal["month"]
    page.goto(f"{base}/billing/{month}")
    page.locator("#report-link").click()
    page.wait_for_url(f"{base}/billing/{month}/report")
    assert page.locator("main h1").inner_text() == f"Monthly report {month}"
    assert_charts_drawn(page, 2)  # cost per month, utilisation per month
    assert page.locator("#top-tenants tbody tr").count() >= 3
    shot(page, "report")
    with page.expect_download() as download:
        page.locator("main a", has_text="Download PDF").click()
    assert download.value.suggested_filename == f"report-{month}.pdf"
    assert download.value.path().read_bytes().startswith(b"%PDF")
    assert not console.problems, console.problems
    assert sessions("tess").goto(f"{base}/billing/{month}/report").status == 403
