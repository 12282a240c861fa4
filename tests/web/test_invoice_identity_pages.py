"""The invoice page, its API answer and its PDF give one invoice number, issue date and due date (issue 30 item 4)."""

from __future__ import annotations

import re
import subprocess
from datetime import UTC, datetime

from app.billing import periods
from app.core.db import unit_of_work
from tests.support.billing import add_hour, issue_documents, record_gaps, store_policy

HTML = {"accept": "text/html"}
OCT1 = datetime(2026, 10, 1, tzinfo=UTC)


def _facts(page: str) -> dict[str, str]:
    return {k: " ".join(re.sub(r"<[^>]+>", " ", v).split())
            for k, v in re.findall(r'<dd data-testid="(invoice-number|issue-date|due-date)">(.*?)</dd>', page, re.S)}


def _pdf_text(data: bytes) -> str:
    text = subprocess.run(["pdftotext", "-layout", "-", "-"], input=data, check=True, capture_output=True).stdout.decode()
    return " ".join(text.split())


def test_draft_then_issued_invoice_number_and_dates_agree_on_page_api_and_pdf(api, fresh_engine, monkeypatch):
    with unit_of_work(fresh_engine) as s:
        v = store_policy(s)
        add_hour(s, hour=OCT1, version=v.id)
        record_gaps(s, "2026-10")
    assert api.post("/billing/2026-10/rate", headers=HTML, data={}).status_code == 303

    draft = _facts(api.get("/billing/2026-10/vision", headers=HTML).text)
    assert draft["invoice-number"].startswith("CB-2026-10-vision") and "issue-date" not in draft
    assert "draft, not issued and not due" in draft["due-date"]
    body = api.get("/api/v1/periods/2026-10/invoices/vision").json()
    assert (body["invoice_number"], body["issue_date"], body["due_date"]) == ("CB-2026-10-vision", None, None)

    monkeypatch.setattr(periods, "utcnow", lambda: datetime(2026, 11, 2, 8, tzinfo=UTC))
    closed = api.post("/billing/2026-10/close", headers=HTML,
                      data={"accept_gaps": "true", "reason": "one test hour", "confirmed": "true"})
    assert closed.status_code == 303, closed.text
    issue_documents(fresh_engine, "2026-10")

    final = _facts(api.get("/billing/2026-10/vision", headers=HTML).text)
    assert final["invoice-number"] == "CB-2026-10-vision"
    assert final["issue-date"].startswith("2026-11-02") and final["due-date"].startswith("2026-12-02 (30 days after issue)")
    body = api.get("/api/v1/periods/2026-10/invoices/vision").json()
    assert (body["invoice_number"], body["issue_date"], body["payment_terms_days"], body["due_date"]) == (
        "CB-2026-10-vision", "2026-11-02", 30, "2026-12-02")
    pdf = api.get("/billing/2026-10/vision/invoice.pdf")
    assert pdf.headers["x-document"] == "issued"
    assert "Issue date: 2026-11-02 Due date: 2026-12-02 (30 days) Invoice number: CB-2026-10-vision" in _pdf_text(pdf.content)
