"""Tamper-evident issued documents (issue 25 item 7): whoever can write to the database swaps a document's
bytes and its hash, deletes one, adds one, or rewrites the manifest and its seal on the period row; the
download refuses it (500 naming the document, logged) and `chargeback verify` reports it as corruption.

The audit entry of the issue is the second witness: only rewriting it too would pass. Both databases.
"""

from __future__ import annotations

import hashlib
import json
import logging
from datetime import UTC, datetime

import pytest
from sqlalchemy import delete, insert, select, update
from typer.testing import CliRunner

from app.billing import manifest
from app.billing.cli import app as billing_cli
from app.billing.models import BillingPeriod, IssuedDocument
from app.core import db
from app.core.audit import AuditEntry
from app.core.db import unit_of_work
from tests.support.billing import add_hour, issue_documents, record_gaps, store_policy

OCT1 = datetime(2026, 10, 1, tzinfo=UTC)
FORGED = b"%PDF-1.7 a forged invoice"
INVOICE, REPORT, CSV = "/billing/2026-10/vision/invoice.pdf", "/billing/2026-10/report.pdf", "/api/v1/periods/2026-10/export"


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def issued_october(fresh_engine, api, monkeypatch):
    with unit_of_work(fresh_engine) as s:
        add_hour(s, hour=OCT1, version=store_policy(s).id)
        record_gaps(s, "2026-10")
    response = api.post("/api/v1/periods/2026-10/close", json={"accept_gaps": True, "reason": "one test hour"})
    assert response.status_code == 200, response.text
    issue_documents(fresh_engine, "2026-10")
    monkeypatch.setattr(db, "get_engine", lambda: fresh_engine)
    return fresh_engine


def _verify():
    return CliRunner().invoke(billing_cli, ["verify", "--period", "2026-10"])


def _forge(s, kind: str, tenant: str = "", data: bytes = FORGED) -> None:
    """Swap a stored document's bytes and its hash together, as someone with database write access would."""
    changed = s.execute(update(IssuedDocument).where(IssuedDocument.kind == kind, IssuedDocument.tenant == tenant)
                        .values(content=data, sha256=sha(data)))
    assert changed.rowcount == 1


def _assert_refused(response, document: str, problem: str, caplog) -> None:
    assert response.status_code == 500, (response.status_code, response.headers)
    assert b"%PDF" not in response.content and response.headers.get("x-document") != "issued"
    assert f"issued document {document} {problem}" in response.text
    assert any(document in r.getMessage() and "not served" in r.getMessage() for r in caplog.records)


def test_the_issue_seals_a_manifest_of_every_document_on_the_row_and_in_the_audit_log(issued_october, api):
    with unit_of_work(issued_october) as s:
        row = s.execute(select(BillingPeriod).where(BillingPeriod.month == "2026-10")).scalars().one()
        docs = {manifest.name(d.kind, d.tenant): d for d in s.execute(select(IssuedDocument)).scalars()}
        entry = s.execute(select(AuditEntry).where(AuditEntry.action == "billing.issue")).scalars().one()
        assert row.manifest_sha256 == sha(row.manifest.encode()) == json.loads(entry.after)["manifest_sha256"]
        sealed = json.loads(row.manifest)["documents"]
        assert sorted(sealed) == sorted(docs) == ["csv", "focus", "invoice_pdf etl", "invoice_pdf search",
                                                  "invoice_pdf vision", "pdf", "report_pdf"]
        for name, doc in docs.items():
            assert sealed[name] == {"sha256": sha(doc.content), "size": len(doc.content)}
        # Canonical: the same documents give the same text, whatever order they come in.
        documents = {(d.kind, d.tenant): d.content for d in docs.values()}
        assert manifest.canonical(dict(reversed(documents.items()))) == row.manifest
    assert all(api.get(path).status_code == 200 for path in (INVOICE, REPORT, CSV + "?format=csv"))
    clean = _verify()
    assert clean.exit_code == 0 and "7 issued document(s) intact, 0 corrupt" in clean.output, clean.output


def test_an_invoice_pdf_swapped_with_its_hash_is_refused_and_reported(issued_october, api, caplog):
    caplog.set_level(logging.ERROR, logger="app.billing.manifest")
    with unit_of_work(issued_october) as s:
        _forge(s, "invoice_pdf", "vision")
    _assert_refused(api.get(INVOICE), "invoice_pdf vision", "does not match its sealed hash", caplog)
    assert api.get("/billing/2026-10/etl/invoice.pdf").status_code == 200  # the others are still served
    result = _verify()
    assert result.exit_code == 1, result.output
    line = next(line for line in result.output.splitlines() if "invoice_pdf vision" in line)
    assert "CORRUPT: changed" in line and "rendering changed" not in line
    assert "1 corrupt" in result.output


def test_a_report_pdf_swapped_with_its_hash_is_refused_and_reported(issued_october, api, caplog):
    caplog.set_level(logging.ERROR, logger="app.billing.manifest")
    with unit_of_work(issued_october) as s:
        _forge(s, "report_pdf")
    _assert_refused(api.get(REPORT), "report_pdf", "does not match its sealed hash", caplog)
    result = _verify()
    assert result.exit_code == 1 and "1 corrupt" in result.output, result.output
    assert "CORRUPT: changed" in next(line for line in result.output.splitlines() if "report_pdf" in line)


def test_a_deleted_document_is_not_re_rendered_but_refused_and_reported_missing(issued_october, api, caplog):
    caplog.set_level(logging.ERROR, logger="app.billing.manifest")
    with unit_of_work(issued_october) as s:
        s.execute(delete(IssuedDocument).where(IssuedDocument.kind == "invoice_pdf", IssuedDocument.tenant == "vision"))
        s.execute(delete(IssuedDocument).where(IssuedDocument.kind == "csv"))
    _assert_refused(api.get(INVOICE), "invoice_pdf vision", "is missing", caplog)
    refused = api.get(CSV, params={"format": "csv"})
    _assert_refused(refused, "csv", "is missing", caplog)
    assert refused.headers["content-type"].startswith("application/problem+json")
    assert refused.json()["status"] == 500 and refused.json()["title"] == "Issued document corrupt"
    result = _verify()
    assert result.exit_code == 1 and "2 corrupt" in result.output, result.output
    for name in ("csv", "invoice_pdf vision"):
        line = next(line for line in result.output.splitlines() if line.split("  ")[1:2] == [name] or
                    line.strip().startswith(name + " "))
        assert "CORRUPT: missing" in line, line


def test_an_added_document_is_reported(issued_october):
    with unit_of_work(issued_october) as s:
        period_id = s.execute(select(BillingPeriod.id).where(BillingPeriod.month == "2026-10")).scalar_one()
        s.execute(insert(IssuedDocument).values(period_id=period_id, kind="invoice_pdf", tenant="ghost", content=FORGED,
                                                sha256=sha(FORGED), created_at=datetime.now(UTC)))
    result = _verify()
    assert result.exit_code == 1 and "1 corrupt" in result.output, result.output
    assert "CORRUPT: added" in next(line for line in result.output.splitlines() if "invoice_pdf ghost" in line)


def test_a_manifest_rewritten_with_its_seal_on_the_row_but_not_in_the_audit_log_is_refused(issued_october, api,
                                                                                             caplog):
    caplog.set_level(logging.ERROR, logger="app.billing.manifest")
    forged_csv = b"line_id,amount\nforged,0.00\n"
    with unit_of_work(issued_october) as s:  # every trace on the rows agrees with the forged CSV
        _forge(s, "csv", data=forged_csv)
        documents = {(d.kind, d.tenant): d.content for d in s.execute(select(IssuedDocument)).scalars()}
        forged = manifest.canonical(documents)
        s.execute(update(BillingPeriod).where(BillingPeriod.month == "2026-10").values(
            manifest=forged, manifest_sha256=manifest.seal(forged), csv_sha256=sha(forged_csv)))
    refused = api.get(CSV, params={"format": "csv"})
    _assert_refused(refused, "manifest", "has a seal on the period row that differs from the audit record", caplog)
    assert b"forged" not in refused.content
    _assert_refused(api.get(INVOICE), "manifest", "has a seal on the period row that differs", caplog)  # nothing is trusted
    result = _verify()
    assert result.exit_code == 1, result.output
    line = next(line for line in result.output.splitlines() if line.strip().startswith("manifest"))
    assert "CORRUPT" in line and "differs from the audit record of the issue" in line
    assert "1 corrupt" in result.output


def test_a_manifest_changed_without_its_seal_is_refused(issued_october, api, caplog):
    caplog.set_level(logging.ERROR, logger="app.billing.manifest")
    with unit_of_work(issued_october) as s:
        row = s.execute(select(BillingPeriod).where(BillingPeriod.month == "2026-10")).scalars().one()
        row.manifest = row.manifest.replace('"version":1', '"version":2')
    _assert_refused(api.get(REPORT), "manifest", "does not match the seal on the period row", caplog)
    assert _verify().exit_code == 1


def test_a_swapped_invoice_is_never_mailed(issued_october):
    from app.notify.mail_compose import issued_pdf

    with unit_of_work(issued_october) as s:
        assert issued_pdf(session=s, month="2026-10", kind="invoice_pdf", tenant="vision").startswith(b"%PDF")
        _forge(s, "invoice_pdf", "vision")
    with unit_of_work(issued_october) as s, pytest.raises(manifest.DocumentTampered) as refused:
        issued_pdf(session=s, month="2026-10", kind="invoice_pdf", tenant="vision")
    assert refused.value.document == "invoice_pdf vision" and refused.value.status == 500
