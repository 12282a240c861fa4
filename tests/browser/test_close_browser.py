"""Finance closes a month with gaps in headless chromium: the checklist says what blocks the close and what to do
(hours never ingested first, which no acceptance lifts, then the gaps left once they are tried), a refused close keeps the input and says why beside the field, Finalize goes through a confirmation step, and a
success banner names what became final. Real uvicorn + PostgreSQL, seeded with the billing example's month."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from app.auth import service
from app.billing import periods
from app.core.db import make_engine, unit_of_work
from tests.support.billing import fill_month, issue_documents, record_gaps, store_policy
from tests.support.browser import SHOTS, sign_in, submit
from tests.support.databases import drop_postgres_database, migrated, new_postgres_database
from tests.support.server import running_portal

pytestmark = pytest.mark.browser
PASSWORD = "close-suite-passphrase"
MONTH = "2026-10"


@pytest.fixture(scope="module")
def close_portal(tmp_path_factory):
    """A portal whose October has 3 gap hours and 2 hours never ingested, rated as a draft; finance user `fin`.
    Yields its base URL and database URL (the test runs the worker's issuing step on it)."""
    url = migrated(new_postgres_database("cbclose"))
    engine = make_engine(url)
    with unit_of_work(engine) as session:
        v = store_policy(session)
        fill_month(session, MONTH, v.id, gap={100, 101, 102}, skip={200, 201})
        service.create_user(session=session, name="fin", role="finance", password=PASSWORD, tenants=[], actor="seed")
    with unit_of_work(engine) as session:
        periods.rate(session=session, period=MONTH, actor="seed")
    engine.dispose()
    try:
        with running_portal(url, log_dir=tmp_path_factory.mktemp("uvicorn-close")) as portal:
            yield portal.base, url
        log = portal.log()
    finally:
        drop_postgres_database(url)
    assert "Traceback" not in log, log[-5000:]


def test_finance_closes_a_month_with_gaps_through_the_checklist_and_confirmation(close_portal, browser):
    close_portal, url = close_portal
    SHOTS.mkdir(parents=True, exist_ok=True)
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    problems: list[str] = []
    page.on("pageerror", lambda e: problems.append(str(e)))
    try:
        sign_in(page, close_portal, "fin", PASSWORD)
        page.goto(f"{close_portal}/billing")
        expect(page.locator("main")).to_contain_text("739 of 744 hours")  # the periods list flags the month
        page.goto(f"{close_portal}/billing/{MONTH}")

        # hours never ingested block whatever is accepted: the checklist names them and the command, no checkbox
        coverage = page.locator('#checklist li[data-key="coverage"]')
        expect(coverage).to_contain_text("blocks close")
        expect(coverage).to_contain_text("hours never ingested, which no acceptance covers")
        expect(coverage).to_contain_text("default: 2 hours (2026-10-09T08:00..2026-10-09T09:00)")
        expect(coverage).to_contain_text("What to do: Ingest 2026-10-09T08:00..2026-10-09T09:00 for default first")
        expect(page.locator('input[name="accept_gaps"]')).to_have_count(0)
        page.screenshot(path=str(SHOTS / "close-never-ingested.png"), full_page=True)

        # the worker tries them and the source cannot answer: now they are gaps, which a close can accept
        engine = make_engine(url)
        try:
            with unit_of_work(engine) as session:
                assert record_gaps(session, MONTH) == 2
        finally:
            engine.dispose()
        page.reload()
        expect(coverage).to_contain_text("blocks close")
        expect(coverage).to_contain_text("5 hours the source could not answer")
        expect(coverage).not_to_contain_text("never ingested")
        expect(coverage).to_contain_text("What to do: Wait for the retries to fill them, or tick")
        expect(page.locator('#checklist li[data-key="unpooled"]')).to_contain_text("ok")
        expect(page.locator("#checklist")).not_to_contain_text("--accept")
        expect(page.locator("#invoices-table tfoot")).to_contain_text("All 3 invoices")
        page.screenshot(path=str(SHOTS / "close-checklist.png"), full_page=True)

        # a refused close: the form again, the reason beside the field, the typed reason kept
        page.fill("#reason", "exporter outage on 5 October")
        with page.expect_response(lambda r: r.request.method == "POST") as refused:
            page.click("#close-form button[type=submit]")
        assert refused.value.status == 409
        page.wait_for_load_state("load")
        expect(page.locator("#accept_gaps-error")).to_contain_text("Accept the gap hours")
        expect(page.locator("#reason")).to_have_value("exporter outage on 5 October")
        expect(page.locator("#close-refused")).to_contain_text(f"{MONTH} was not finalized")
        page.screenshot(path=str(SHOTS / "close-refused.png"), full_page=True)

        # accept with the kept reason -> the confirmation step names what becomes immutable
        page.check('input[name="accept_gaps"]')
        with page.expect_response(lambda r: r.request.method == "POST") as confirm:
            page.click("#close-form button[type=submit]")
        assert confirm.value.status == 200
        page.wait_for_load_state("load")
        step = page.locator("#close-confirm")
        expect(step).to_contain_text("This cannot be undone")
        expect(step).to_contain_text("SHA-256 hashes recorded")
        expect(step).to_contain_text("the platform statement")
        expect(step).to_contain_text("exporter outage on 5 October")
        page.screenshot(path=str(SHOTS / "close-confirm.png"), full_page=True)

        submit(page, "#confirm-finalize", shows=f"{MONTH} is finalized.")
        expect(page.locator("#documents-pending")).to_contain_text("Documents being issued")
        expect(page.locator("#downloads-pending")).to_contain_text("documents being issued")
        page.screenshot(path=str(SHOTS / "close-issuing.png"), full_page=True)
        engine = make_engine(url)  # the worker's issuing step, then the page again
        try:
            assert issue_documents(engine, MONTH) is not None
        finally:
            engine.dispose()
        page.reload()
        banner = page.locator("#close-success")
        expect(banner).to_contain_text("SHA-256 of the exports")
        expect(page.locator("#documents-pending")).to_have_count(0)
        expect(page.locator("main")).to_contain_text("Closed with gap hours accepted: exporter outage on 5 October")
        expect(page.locator("#close-form")).to_have_count(0)
        page.screenshot(path=str(SHOTS / "close-finalized.png"), full_page=True)
    finally:
        page.close()
    assert not problems, problems
