"""Plain billing pages (HTML): periods, a period's invoices and statement, one invoice; rate/close forms."""

from __future__ import annotations

import re
from datetime import UTC, datetime

from app.billing.period import get_period
from app.core.db import unit_of_work
from tests.support.billing import add_hour, fill_month, issue_documents, record_gaps, store_policy
from tests.support.routes import FINANCE, VISION_MEMBER, problem

OCT1 = datetime(2026, 10, 1, tzinfo=UTC)
HTML = {"accept": "text/html"}


def test_pages_show_periods_invoices_and_statement(api, fresh_engine):
    with unit_of_work(fresh_engine) as s:
        v = store_policy(s)
        add_hour(s, hour=OCT1, version=v.id)
        record_gaps(s, "2026-10")  # the rest of the month asked, and the source could not answer
    page = api.get("/billing", headers=HTML)
    assert page.status_code == 200 and "2026-10" in page.text and "open" in page.text

    rated = api.post("/billing/2026-10/rate", headers=HTML, data={})
    assert rated.status_code == 303 and rated.headers["location"] == "/billing/2026-10"
    page = api.get("/billing/2026-10", headers=HTML)
    assert page.status_code == 200
    for text in ("Billing period 2026-10", "rated", "/billing/2026-10/vision", "Platform statement", "Every cent billed?",
                 "Cost of the pool (capacity × price, USD)", "format=focus", "Review and finalize 2026-10", "Before you finalize"):
        assert text in page.text, text

    invoice = api.get("/billing/2026-10/vision", headers=HTML)
    assert invoice.status_code == 200
    assert "Invoice 2026-10: vision" in invoice.text and "2.30" in invoice.text and "SLA penalty" in invoice.text


def test_close_form_and_tenant_isolation(api, fresh_engine):
    with unit_of_work(fresh_engine) as s:
        v = store_policy(s)
        fill_month(s, "2026-10", v.id, gap={3})
    api.post("/billing/2026-10/rate", headers=HTML, data={})
    refused = api.post("/billing/2026-10/close", headers=HTML, data={})
    assert refused.status_code == 409 and "1 hour the source could not answer (gaps" in refused.text
    assert 'id="close-form"' in refused.text and "--accept-gaps" not in refused.text  # the form again, no CLI flags
    confirm = api.post("/billing/2026-10/close", headers=HTML, data={"accept_gaps": "true", "reason": "node reboot"})
    assert confirm.status_code == 200 and "Yes, finalize 2026-10" in confirm.text
    closed = api.post("/billing/2026-10/close", headers=HTML,
                      data={"accept_gaps": "true", "reason": "node reboot", "confirmed": "true"})
    assert closed.status_code == 303 and closed.headers["location"] == "/billing/2026-10?closed=1"
    page = api.get(closed.headers["location"], headers=HTML).text
    assert "finalized" in page and "node reboot" in page and "finalize 2026-10" not in page
    # The gap hour is not billed: the statement shows the capacity it left unmeasured (2 A100s x 1 h x 1.30).
    unmeasured = page[page.index('id="unmeasured-title"'):]
    assert re.search(r"mixed-a100</th><td>1</td>\s*<td>2</td><td>2\.0</td><td>2\.60 USD</td>", unmeasured), unmeasured[:900]
    assert "2026-10 is finalized." in page and "Documents being issued" in page and "SHA-256 of the exports" not in page
    issue_documents(fresh_engine, "2026-10")  # the worker's issuing step
    page = api.get(closed.headers["location"], headers=HTML).text
    assert "2026-10 is finalized." in page and "SHA-256 of the exports" in page and "Documents being issued" not in page

    api.as_(VISION_MEMBER)
    page = api.get("/billing/2026-10", headers=HTML).text
    assert "/billing/2026-10/vision" in page and "/billing/2026-10/search" not in page
    assert "Platform statement" not in page and "format=pdf" not in page
    assert api.get("/billing/2026-10/search", headers=HTML).status_code == 404
    assert api.get("/billing/2026-10/vision", headers=HTML).status_code == 200
    assert api.post("/billing/2026-10/rate", headers=HTML, data={}).status_code == 403
    api.as_(FINANCE)
    assert api.get("/billing/2026-13", headers=HTML).status_code == 422


def test_invoice_pdf_holds_only_that_tenant(api, fresh_engine, tmp_path):
    import subprocess

    with unit_of_work(fresh_engine) as s:
        v = store_policy(s)
        add_hour(s, hour=OCT1, version=v.id)
    api.post("/billing/2026-10/rate", headers=HTML, data={})
    assert "/billing/2026-10/vision/invoice.pdf" in api.get("/billing/2026-10/vision", headers=HTML).text

    api.as_(VISION_MEMBER)
    pdf = api.get("/billing/2026-10/vision/invoice.pdf")
    assert pdf.status_code == 200 and pdf.content.startswith(b"%PDF")
    assert pdf.headers["content-type"] == "application/pdf"
    (tmp_path / "invoice.pdf").write_bytes(pdf.content)
    text = subprocess.run(["pdftotext", str(tmp_path / "invoice.pdf"), "-"], capture_output=True, text=True,
                          check=True).stdout
    assert "DRAFT - Invoice 2026-10 - tenant vision" in text and "Draft total, not yet due" in text
    assert "Total due" not in text
    assert "tenant search" not in text and "Platform statement" not in text
    assert api.get("/billing/2026-10/search/invoice.pdf").status_code == 404
    api.as_(FINANCE)
    assert api.get("/billing/2026-10/nobody/invoice.pdf").status_code == 404
    again = api.get("/billing/2026-10/vision/invoice.pdf").content
    assert again == pdf.content  # reproducible bytes


def test_a_month_of_two_hours_is_marked_on_the_periods_list_and_the_period_page(api, fresh_engine):
    with unit_of_work(fresh_engine) as s:
        v = store_policy(s)
        add_hour(s, hour=OCT1, version=v.id)
        add_hour(s, hour=OCT1.replace(hour=1), version=v.id, breaches=())
        record_gaps(s, "2026-10")
        fill_month(s, "2026-09", v.id)
    api.post("/billing/2026-10/close", headers=HTML, data={})  # refused: not even rated
    api.post("/api/v1/periods/2026-10/close", json={"accept_gaps": True, "reason": "two hours only"})
    listing = api.get("/billing", headers=HTML).text
    october = listing[listing.index('href="/billing/2026-10"'):listing.index('href="/billing/2026-09"')]
    assert "2 of 744 hours" in october and "finalized" in october
    september = listing[listing.index('href="/billing/2026-09"'):]
    assert "coverage-badge" not in september.split("</tr>")[0]  # a whole month carries no badge
    page = api.get("/billing/2026-10", headers=HTML).text
    assert "2 of 744 hours" in page and "two hours only" in page


def test_refused_close_keeps_the_input_and_says_why_beside_the_field(api, fresh_engine):
    with unit_of_work(fresh_engine) as s:
        v = store_policy(s)
        fill_month(s, "2026-10", v.id, gap={100})
    api.post("/billing/2026-10/rate", headers=HTML, data={})
    page = api.get("/billing/2026-10", headers=HTML).text
    assert 'name="accept_gaps"' in page and 'name="accept_unpooled"' not in page  # only what the checklist needs
    refused = api.post("/billing/2026-10/close", headers=HTML, data={"accept_gaps": "true", "reason": "   "})
    assert refused.status_code == 422
    assert 'id="reason-error"' in refused.text and "Give a reason" in refused.text
    assert re.search(r'name="accept_gaps" value="true" checked', refused.text)
    too_long = api.post("/billing/2026-10/close", headers=HTML, data={"accept_gaps": "true", "reason": "x" * 2001})
    assert too_long.status_code == 422 and "under 2,000 characters" in too_long.text
    for reason in ("two hours\u2028=cmd", "two\rhours", "two\x85hours"):
        odd = api.post("/billing/2026-10/close", headers=HTML, data={"accept_gaps": "true", "reason": reason})
        assert odd.status_code == 422 and 'id="reason-error"' in odd.text and "line-separator" in odd.text, reason
    body = problem(api.post("/api/v1/periods/2026-10/close", json={"accept_gaps": True, "reason": "gap\u2029ok"}), 422)
    assert [e["path"] for e in body["errors"]] == ["reason"]
    refused = api.post("/billing/2026-10/close", headers=HTML, data={"reason": "kept text"})
    assert refused.status_code == 409 and 'id="accept_gaps-error"' in refused.text
    assert 'value="kept text"' in refused.text and "1 hour the source could not answer" in refused.text
    # confirming a close nobody may make any more (finalized meanwhile) shows the page with the reason, not a dead end
    api.post("/api/v1/periods/2026-10/close", json={"accept_gaps": True, "reason": "elsewhere"})
    late = api.post("/billing/2026-10/close", headers=HTML,
                    data={"accept_gaps": "true", "reason": "late", "confirmed": "true"})
    assert late.status_code == 409 and "already finalized" in late.text and "Billing period 2026-10" in late.text


def test_hours_never_ingested_block_the_close_and_no_acceptance_is_offered(api, fresh_engine):
    """SPEC 4: only gaps can be accepted; hours never attempted are named with the command that ingests them."""
    with unit_of_work(fresh_engine) as s:
        v = store_policy(s)
        fill_month(s, "2026-10", v.id, skip=set(range(700, 744)))  # the last 44 hours never ingested
    api.post("/billing/2026-10/rate", headers=HTML, data={})
    page = api.get("/billing/2026-10", headers=HTML).text
    assert 'name="accept_gaps"' not in page and "Review and finalize 2026-10" not in page
    assert "hours never ingested, which no acceptance covers" in page
    assert "Ingest 2026-10-30T04:00..2026-10-31T23:00 for default first" in page
    refused = api.post("/billing/2026-10/close", headers=HTML, data={"accept_gaps": "true", "reason": "ship it"})
    assert refused.status_code == 409 and "which no acceptance covers" in refused.text
    body = api.post("/api/v1/periods/2026-10/close", json={"accept_gaps": True, "reason": "ship it"})
    assert body.status_code == 409 and "ingest 2026-10-30T04:00..2026-10-31T23:00 for default first" in body.json()["detail"]
    assert "chargeback ingest --cluster default --start 2026-10-30T04:00Z --end 2026-11-01T00:00Z" in body.json()["detail"]
    with unit_of_work(fresh_engine) as s:
        assert get_period(session=s, month="2026-10").status == "rated"
