"""Invoices ready to forward (issue 30 item 4): a number, an issue date and a due date, each from stored data.

The number is derived from the period and the tenant; the issue date is the day the period was finalized
(billing timezone); the due date adds the payment terms stored on the period at finalization. So an issued
invoice re-renders to the bytes the sealed manifest holds even after the setting and the clock have moved,
and a draft says it is neither issued nor due.
"""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime

import pytest

from app.billing import exports, issued, periods
from app.billing.invoices import load_view, tenant_invoice
from app.billing.models import DocumentKind, IssuedDocument
from app.core.settings import get_settings
from tests.support.billing import issue_documents, record_gaps

FINALIZED_AT = datetime(2026, 11, 3, 23, 30, tzinfo=UTC)


def _text(data: bytes) -> str:
    return subprocess.run(["pdftotext", "-layout", "-", "-"], input=data, check=True, capture_output=True).stdout.decode()


@pytest.fixture
def terms(monkeypatch):
    """Set CHARGEBACK_PAYMENT_TERMS_DAYS for the rest of the test."""
    def set_terms(days: int) -> None:
        monkeypatch.setenv("CHARGEBACK_PAYMENT_TERMS_DAYS", str(days))
        get_settings.cache_clear()
    yield set_terms
    get_settings.cache_clear()


def _close(session, monkeypatch):
    monkeypatch.setattr(periods, "utcnow", lambda: FINALIZED_AT)  # the finalization's clock, read once, at close
    record_gaps(session, "2026-10")  # the month's other hours: gaps the source could not answer
    return periods.close(session=session, period="2026-10", actor="fin", accept_gaps=True, reason="two hours only")


def test_a_draft_names_its_number_and_says_it_is_not_issued_nor_due(session, october):
    invoice = tenant_invoice(load_view(session=session, period=october), "vision")
    assert invoice["invoice_number"] == "CB-2026-10-vision"
    assert (invoice["issue_date"], invoice["due_date"], invoice["payment_terms_days"]) == (None, None, None)
    text = _text(exports.render_invoice(session=session, period=october, tenant="vision"))
    assert "Draft: not issued, not due" in text and "Invoice number: CB-2026-10-vision" in text
    assert "Issue date" not in text and "Due date" not in text and "Total due" not in text


def test_issued_invoice_dates_come_from_the_period_and_re_render_to_the_sealed_bytes(session, october, monkeypatch,
                                                                                     terms):
    terms(45)
    row = _close(session, monkeypatch)
    assert row.payment_terms_days == 45
    invoice = tenant_invoice(load_view(session=session, period=row), "vision")
    assert (invoice["invoice_number"], invoice["issue_date"], invoice["payment_terms_days"], invoice["due_date"]) == (
        "CB-2026-10-vision", "2026-11-03", 45, "2026-12-18")
    issue_documents(session, "2026-10")
    stored = session.get(IssuedDocument, (row.id, DocumentKind.INVOICE_PDF.value, "vision"))
    assert ("Issue date: 2026-11-03 Due date: 2026-12-18 (45 days) Invoice number: CB-2026-10-vision"
            in " ".join(_text(stored.content).split()))
    period_pdf = " ".join(_text(session.get(IssuedDocument, (row.id, "pdf", "")).content).split())
    for tenant in ("etl", "search", "vision"):
        assert f"Issue date: 2026-11-03 Due date: 2026-12-18 (45 days) Invoice number: CB-2026-10-{tenant}" in period_pdf

    terms(10)  # a later change of the terms moves no issued invoice's due date
    session.refresh(row)
    again = issued.render(session=session, period=row, kind=DocumentKind.INVOICE_PDF, tenant="vision")
    assert again == stored.content
    checks = issued.verify(session=session, period=row)
    assert checks and all(c.intact and c.rendered_sha256 == c.stored_sha256 for c in checks), checks


def test_payment_terms_are_recorded_when_the_period_is_finalized(session, october, monkeypatch, terms):
    terms(14)
    rated = tenant_invoice(load_view(session=session, period=october), "vision")
    assert rated["due_date"] is None  # a draft is not due, whatever the terms
    row = _close(session, monkeypatch)
    terms(30)
    invoice = tenant_invoice(load_view(session=session, period=row), "vision")
    assert (invoice["issue_date"], invoice["due_date"]) == ("2026-11-03", "2026-11-17")


def test_a_period_finalized_before_terms_were_stored_names_no_due_date(session, october, monkeypatch):
    row = _close(session, monkeypatch)
    row.payment_terms_days = None  # what migration 0032 leaves on a period finalized before it
    invoice = tenant_invoice(load_view(session=session, period=row), "vision")
    assert (invoice["issue_date"], invoice["due_date"]) == ("2026-11-03", None)
    text = " ".join(_text(exports.render_invoice(session=session, period=row, tenant="vision")).split())
    assert "Due date: not recorded (finalized before payment terms were stored)" in text
