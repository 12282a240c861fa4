"""Issued documents: close leaves them pending, the issuing step stores them, and a finalized period is
served those bytes forever.

The renderers are swapped after issuing (as a release that changes a layout would) and every way out
(API export, web invoice and report PDFs, `chargeback export`, `chargeback verify`) must still give
the issued bytes and hashes. Both databases, through the fixtures.
"""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime

import pytest
from sqlalchemy import delete, func, inspect, select, text, update
from typer.testing import CliRunner

from app.billing import exports, issued, issuing, pdf, periods, report_pdf
from app.billing.cli import app as billing_cli
from app.billing.invoices import load_view
from app.billing.models import BillingPeriod, IssuedDocument
from app.core import db
from app.core.audit import AuditEntry
from app.core.db import make_engine, unit_of_work
from app.core.events import Event
from app.core.migrate import downgrade, upgrade
from tests.support.billing import add_hour, issue_documents, record_gaps, store_policy

OCT1 = datetime(2026, 10, 1, tzinfo=UTC)
CHANGED = b"%PDF-1.7 a later renderer's bytes"
EXPORTS = ("csv", "focus", "pdf")


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _change_every_renderer(monkeypatch) -> None:
    """What a release that changes any renderer does to a live render."""
    for module, name in ((exports, "render_csv"), (exports, "render_focus"), (exports, "render_pdf"),
                         (pdf, "render_invoice_pdf"), (report_pdf, "render_report_pdf")):
        monkeypatch.setattr(module, name, lambda *args, **kwargs: CHANGED)


def _documents(session, month="2026-10") -> dict[tuple[str, str], IssuedDocument]:
    rows = session.execute(
        select(IssuedDocument).join(BillingPeriod, BillingPeriod.id == IssuedDocument.period_id)
        .where(BillingPeriod.month == month)
    ).scalars()
    return {(d.kind, d.tenant): d for d in rows}


def _finalized_events(session) -> list[Event]:
    return list(session.execute(select(Event).where(Event.type == "period.finalized")).scalars())


def test_close_leaves_documents_pending_and_the_issuing_step_stores_every_one(session, october):
    record_gaps(session, "2026-10")  # the month's other hours: gaps the source could not answer
    row = periods.close(session=session, period="2026-10", actor="fin", accept_gaps=True, reason="two test hours")
    assert row.status == "finalized" and issued.is_pending(row) and _documents(session) == {}
    assert (row.csv_sha256, row.focus_sha256, row.pdf_sha256) == (None, None, None)
    assert periods.period_summary(row)["documents"] == "pending"
    assert _finalized_events(session) == []  # mail attaches the documents: no event before they exist
    with pytest.raises(issued.DocumentsPending) as pending:
        issued.serve(session=session, period=row, kind="csv")
    assert pending.value.status == 503 and pending.value.headers["Retry-After"] == str(issued.RETRY_AFTER_S)

    done = issue_documents(session, "2026-10")
    docs = _documents(session)
    tenants = load_view(session=session, period=row).tenants
    assert tenants == ["etl", "search", "vision"] and done.documents == len(docs) == 7
    assert set(docs) == {("csv", ""), ("focus", ""), ("pdf", ""), ("report_pdf", "")} | {
        ("invoice_pdf", t) for t in tenants}
    for doc in docs.values():
        assert sha(doc.content) == doc.sha256 and doc.created_at >= row.finalized_at
    session.refresh(row)
    assert (docs[("csv", "")].sha256, docs[("focus", "")].sha256, docs[("pdf", "")].sha256) == (
        row.csv_sha256, row.focus_sha256, row.pdf_sha256) == tuple(done.sha256.values())
    assert not issued.is_pending(row) and periods.period_summary(row)["documents"] == "issued"
    # Reproducible from the stored lines: what was stored is what a lone render gives now.
    assert docs[("csv", "")].content == exports.render(session=session, period=row, fmt="csv")
    assert docs[("invoice_pdf", "vision")].content == exports.render_invoice(session=session, period=row, tenant="vision")
    assert docs[("report_pdf", "")].content == issued.render_report(session=session, period=row)
    assert all(d.content.startswith(b"%PDF") for (kind, _), d in docs.items() if kind != "csv" and kind != "focus")
    [event] = _finalized_events(session)
    assert event.data["sha256"] == done.sha256 and event.data["finalized_by"] == "fin"
    assert event.data["total"] == str(periods.billed_total(session=session, period=row))
    assert issue_documents(session, "2026-10") is None  # once: nothing pending any more
    assert len(_finalized_events(session)) == 1


def test_a_crash_while_issuing_leaves_the_period_finalized_and_pending_and_the_next_round_issues_it_once(
        fresh_engine, monkeypatch):
    with unit_of_work(fresh_engine) as s:
        add_hour(s, hour=OCT1, version=store_policy(s).id)
        record_gaps(s, "2026-10")
        periods.rate(session=s, period="2026-10", actor="fin")
    with unit_of_work(fresh_engine) as s:  # step 1 commits on its own
        periods.close(session=s, period="2026-10", actor="fin", accept_gaps=True, reason="one test hour")
    original, rendered = pdf.render_invoice_pdf, []

    def dies_on_the_second(view, tenant):
        if rendered:
            raise RuntimeError("killed while rendering")
        rendered.append(tenant)
        return original(view, tenant)

    monkeypatch.setattr(pdf, "render_invoice_pdf", dies_on_the_second)
    assert issuing.issue_task(fresh_engine) == []  # logged, left for the next round
    with unit_of_work(fresh_engine) as s:
        row = periods.get_period(session=s, month="2026-10")
        assert row.status == "finalized" and issued.is_pending(row)
        assert s.execute(select(func.count()).select_from(IssuedDocument)).scalar_one() == 0
        assert _finalized_events(s) == [] and issuing.pending_months(s) == ["2026-10"]
    monkeypatch.undo()
    [done] = issuing.issue_task(fresh_engine)
    assert done.month == "2026-10" and done.documents == 4 + 3
    assert issuing.issue_task(fresh_engine) == []
    with unit_of_work(fresh_engine) as s:
        assert len(_documents(s)) == 4 + 3 and len(_finalized_events(s)) == 1 and issuing.pending_months(s) == []


def test_two_workers_issuing_one_month_at_once_store_it_once(fresh_engine, monkeypatch):
    """The first worker is held inside rendering; the second runs meanwhile. On PostgreSQL it skips the locked
    row; on SQLite it renders too and stores first, and the first then finds nothing pending. Once either way."""
    import threading

    with unit_of_work(fresh_engine) as s:
        add_hour(s, hour=OCT1, version=store_policy(s).id)
        record_gaps(s, "2026-10")
        periods.close(session=s, period="2026-10", actor="fin", accept_gaps=True, reason="one test hour")
    original, inside, release = report_pdf.render_report_pdf, threading.Event(), threading.Event()
    holder: list[int] = []

    def held(*args, **kwargs):
        if not holder:
            holder.append(threading.get_ident())
            inside.set()
            assert release.wait(60)
        return original(*args, **kwargs)

    monkeypatch.setattr(report_pdf, "render_report_pdf", held)
    results: dict[str, object] = {}
    worker = threading.Thread(target=lambda: results.setdefault("a", issuing.issue_period(engine=fresh_engine,
                                                                                         month="2026-10")))
    worker.start()
    assert inside.wait(60)
    results["b"] = issuing.issue_period(engine=fresh_engine, month="2026-10")
    release.set()
    worker.join(60)
    issues = [r for r in results.values() if r is not None]
    assert len(results) == 2 and len(issues) == 1 and issues[0].documents == 7
    with unit_of_work(fresh_engine) as s:
        assert len(_documents(s)) == 7 and len(_finalized_events(s)) == 1


def test_downloads_answer_503_while_documents_are_pending(api, fresh_engine):
    with unit_of_work(fresh_engine) as s:
        add_hour(s, hour=OCT1, version=store_policy(s).id)
        record_gaps(s, "2026-10")
    closed = api.post("/api/v1/periods/2026-10/close", json={"accept_gaps": True, "reason": "one test hour"})
    assert closed.status_code == 200 and closed.json()["documents"] == "pending"
    assert closed.json()["hashes"] == {"csv": None, "focus": None, "pdf": None}
    pending = [api.get("/api/v1/periods/2026-10/export", params={"format": fmt}) for fmt in EXPORTS]
    for response in pending:
        assert response.status_code == 503 and response.headers["retry-after"] == str(issued.RETRY_AFTER_S)
        assert response.headers["content-type"].startswith("application/problem+json")
        assert "being issued" in response.json()["detail"]
    for path in ("/billing/2026-10/vision/invoice.pdf", "/billing/2026-10/report.pdf"):
        page = api.get(path, headers={"Accept": "text/html"})
        assert page.status_code == 503 and page.headers["retry-after"] and b"%PDF" not in page.content
        assert "being issued" in page.text
    period_page = api.get("/billing/2026-10", headers={"Accept": "text/html"})
    assert period_page.status_code == 200 and "Documents being issued" in period_page.text
    assert 'id="downloads-pending"' in period_page.text
    issue_documents(fresh_engine, "2026-10")
    assert api.get("/api/v1/periods/2026-10/export", params={"format": "csv"}).status_code == 200
    issued_page = api.get("/billing/2026-10", headers={"Accept": "text/html"})
    assert "Documents being issued" not in issued_page.text and 'id="downloads-pending"' not in issued_page.text
    assert _summary(api)["documents"] == "issued"


@pytest.fixture
def closed(fresh_engine, api):
    with unit_of_work(fresh_engine) as s:
        add_hour(s, hour=OCT1, version=store_policy(s).id)
        record_gaps(s, "2026-10")
    response = api.post("/api/v1/periods/2026-10/close", json={"accept_gaps": True, "reason": "one test hour"})
    assert response.status_code == 200, response.text
    issue_documents(fresh_engine, "2026-10")
    return _summary(api)


def _summary(api, month="2026-10") -> dict:
    return next(p for p in api.get("/api/v1/periods").json()["items"] if p["period"] == month)


def _downloads(api) -> dict[str, object]:
    out = {fmt: api.get("/api/v1/periods/2026-10/export", params={"format": fmt}) for fmt in EXPORTS}
    out["invoice_pdf"] = api.get("/billing/2026-10/vision/invoice.pdf")
    out["report_pdf"] = api.get("/billing/2026-10/report.pdf")
    for name, response in out.items():
        assert response.status_code == 200, (name, response.text)
    return out


def test_finalized_downloads_do_not_follow_a_changed_renderer(api, closed, fresh_engine, monkeypatch, tmp_path):
    before = _downloads(api)
    _change_every_renderer(monkeypatch)
    with unit_of_work(fresh_engine) as s:  # a live render is different now
        row = periods.get_period(session=s, month="2026-10")
        assert issued.render(session=s, period=row, kind="csv") == CHANGED
        stored = {key: doc.sha256 for key, doc in _documents(s).items()}

    after = _downloads(api)
    for name, response in after.items():
        digest = sha(response.content)
        assert response.content == before[name].content != CHANGED, name
        assert response.headers["x-content-sha256"] == digest and response.headers["etag"] == f'"{digest}"'
        assert response.headers["x-document"] == "issued" and "x-document-notice" not in response.headers
    for fmt in EXPORTS:
        assert sha(after[fmt].content) == closed["hashes"][fmt] == stored[(fmt, "")]
    assert sha(after["invoice_pdf"].content) == stored[("invoice_pdf", "vision")]
    assert sha(after["report_pdf"].content) == stored[("report_pdf", "")]
    again = api.get("/billing/2026-10/vision/invoice.pdf", headers={"If-None-Match": after["invoice_pdf"].headers["etag"]})
    assert again.status_code == 304 and not again.content

    # The CLI, in process (so the swapped renderers apply), on the same database.
    monkeypatch.setattr(db, "get_engine", lambda: fresh_engine)
    runner = CliRunner()
    for fmt in EXPORTS:
        out = tmp_path / f"october.{fmt}"
        result = runner.invoke(billing_cli, ["export", "--period", "2026-10", "--format", fmt, "--out", str(out)])
        assert result.exit_code == 0, result.output
        assert out.read_bytes() == before[fmt].content and "the issued document" in result.output
    verified = runner.invoke(billing_cli, ["verify", "--period", "2026-10"])
    assert verified.exit_code == 0, verified.output
    assert "7 issued document(s) intact, 0 corrupt, 7 whose rendering changed since issue" in verified.output
    assert "rendering changed since issue" in verified.output and "CORRUPT" not in verified.output


def test_verify_finds_corrupt_bytes_and_is_quiet_when_nothing_changed(closed, fresh_engine, monkeypatch):
    monkeypatch.setattr(db, "get_engine", lambda: fresh_engine)
    runner = CliRunner()
    clean = runner.invoke(billing_cli, ["verify", "--period", "2026-10"])
    assert clean.exit_code == 0, clean.output
    assert "7 issued document(s) intact, 0 corrupt, 0 whose rendering changed" in clean.output
    with unit_of_work(fresh_engine) as s:
        s.execute(update(IssuedDocument).where(IssuedDocument.tenant == "etl").values(content=b"%PDF tampered"))
    corrupt = runner.invoke(billing_cli, ["verify", "--period", "2026-10"])
    assert corrupt.exit_code == 1 and "CORRUPT" in corrupt.output and "1 corrupt" in corrupt.output
    rated = runner.invoke(billing_cli, ["verify", "--period", "2026-09"])
    assert rated.exit_code == 4 and "not been rated" in rated.output


def _past_the_append_only_trigger(s) -> None:
    """Let this transaction rewrite the audit log as an older release wrote it (PostgreSQL refuses by trigger)."""
    if db.is_postgres(s):
        s.execute(text("SET LOCAL session_replication_role = replica"))


def _as_issued_before_manifests(s, month="2026-10") -> None:
    """What a period issued before migration 0031 has: no manifest on its row, no seal in its audit entry."""
    s.execute(update(BillingPeriod).where(BillingPeriod.month == month).values(manifest=None, manifest_sha256=None))
    _past_the_append_only_trigger(s)
    entry = s.execute(select(AuditEntry).where(AuditEntry.action == "billing.issue",
                                               AuditEntry.entity_id == month)).scalars().one()
    after = json.loads(entry.after)
    assert after.pop("manifest_sha256") is not None
    entry.after = json.dumps(after, sort_keys=True)


def test_a_period_finalized_before_documents_were_stored_is_served_as_a_marked_rerender(api, closed, fresh_engine,
                                                                                         monkeypatch):
    with unit_of_work(fresh_engine) as s:  # what migrations 0011 and 0031 leave on a period finalized before them
        s.execute(delete(IssuedDocument))
        _as_issued_before_manifests(s)
    same = api.get("/api/v1/periods/2026-10/export", params={"format": "csv"})
    assert same.headers["x-document"] == "re-rendered"
    assert same.headers["x-issued-sha256"] == closed["hashes"]["csv"] == same.headers["x-content-sha256"]
    assert "matches" in same.headers["x-document-notice"]
    _change_every_renderer(monkeypatch)
    differs = api.get("/api/v1/periods/2026-10/export", params={"format": "csv"})
    assert differs.content == CHANGED and differs.headers["x-content-sha256"] == sha(CHANGED)
    assert differs.headers["x-issued-sha256"] == closed["hashes"]["csv"]
    assert "differs from the issued document" in differs.headers["x-document-notice"]
    invoice = api.get("/billing/2026-10/vision/invoice.pdf")
    assert invoice.headers["x-document"] == "re-rendered" and invoice.headers["x-issued-sha256"] == "unknown"
    monkeypatch.setattr(db, "get_engine", lambda: fresh_engine)
    verified = CliRunner().invoke(billing_cli, ["verify", "--period", "2026-10"])
    assert verified.exit_code == 0, verified.output
    assert "not stored" in verified.output and "DIFFERS from the issued hash" in verified.output


def test_open_and_rated_periods_render_live(api, fresh_engine, monkeypatch):
    with unit_of_work(fresh_engine) as s:
        add_hour(s, hour=OCT1, version=store_policy(s).id)
        record_gaps(s, "2026-10")
    assert api.post("/api/v1/periods/2026-10/rate").status_code == 200
    _change_every_renderer(monkeypatch)
    live = api.get("/api/v1/periods/2026-10/export", params={"format": "pdf"})
    assert live.content == CHANGED and live.headers["x-document"] == "live"
    assert api.get("/billing/2026-10/vision/invoice.pdf").content == CHANGED
    with unit_of_work(fresh_engine) as s:
        assert s.execute(select(func.count()).select_from(IssuedDocument)).scalar_one() == 0


def test_migration_0011_up_and_down(fresh_engine):
    with unit_of_work(fresh_engine) as s:
        add_hour(s, hour=OCT1, version=store_policy(s).id)
        record_gaps(s, "2026-10")
        periods.close(session=s, period="2026-10", actor="fin", accept_gaps=True, reason="one test hour")
    issue_documents(fresh_engine, "2026-10")
    url = fresh_engine.url.render_as_string(hide_password=False)
    fresh_engine.dispose()
    downgrade(url, "0010")
    engine = make_engine(url)
    with unit_of_work(engine) as s:
        assert "issued_document" not in inspect(s.connection()).get_table_names()
        assert "manifest" not in {c["name"] for c in inspect(s.connection()).get_columns("billing_period")}
        # An issue before 0031 sealed nothing in the audit log either.
        _past_the_append_only_trigger(s)
        s.execute(text("UPDATE audit_log SET after = '{}' WHERE action = 'billing.issue'"))
        # Read as the 0010 schema has it (the current model's later columns are not there yet).
        status, csv_sha256 = s.execute(text("SELECT status, csv_sha256 FROM billing_period WHERE month = '2026-10'")).one()
        assert status == "finalized" and csv_sha256  # the hashes stay on the period
    engine.dispose()
    upgrade(url)
    engine = make_engine(url)
    with unit_of_work(engine) as s:
        assert s.execute(select(func.count()).select_from(IssuedDocument)).scalar_one() == 0  # bytes not recreated
        served = issued.serve(session=s, period=periods.get_period(session=s, month="2026-10"), kind="focus")
        assert served.origin == "re-rendered" and served.issued_sha256 == periods.get_period(
            session=s, month="2026-10").focus_sha256
    engine.dispose()
