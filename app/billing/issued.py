"""Issued documents: what a finalized period issued, stored at close and served byte for byte after.

`issue` renders every document of the period inside close's transaction, so the caller's unit of
work commits them together with the finalized status, or neither. `serve` answers a download: a
finalized period's stored bytes (whatever the renderers have become since), an open or rated
period's live render, and, for a period finalized before migration 0011 stored documents (hashes
only), a live re-render marked as one, with the hash stored at issue beside it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from sqlalchemy import insert, select
from sqlmodel import Session

from app.billing import exports, report_pdf
from app.billing.models import BillingPeriod, DocumentKind, IssuedDocument, PeriodStatus
from app.billing.report import assemble_report, read_inputs

ISSUED, LIVE, RERENDERED = "issued", "live", "re-rendered"
PERIOD_WIDE = (DocumentKind.CSV, DocumentKind.FOCUS, DocumentKind.PDF)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class Served:
    """A document as downloaded: its bytes, their SHA-256, and where they come from."""

    content: bytes
    sha256: str
    origin: str  # issued (stored at close) | live (not finalized yet) | re-rendered (finalized, nothing stored)
    issued_sha256: str | None = None  # re-rendered: the hash stored at issue, if one was

    @property
    def notice(self) -> str | None:
        """Why a finalized period's download is not the issued document (None when it is, or not finalized)."""
        if self.origin != RERENDERED:
            return None
        base = "Re-rendered: this period was finalized before issued documents were stored"
        if self.issued_sha256 is None:
            return base + "; no hash of the issued document was kept"
        if self.issued_sha256 != self.sha256:
            return base + "; its SHA-256 differs from the issued document's (X-Issued-SHA256)"
        return base + "; its SHA-256 matches the issued document's"

    def headers(self) -> dict[str, str]:
        """ETag and X-Content-SHA256 name the bytes sent; X-Document says whether they are the issued ones."""
        out = {"ETag": f'"{self.sha256}"', "X-Content-SHA256": self.sha256, "X-Document": self.origin}
        if self.origin == RERENDERED:
            out["X-Issued-SHA256"] = self.issued_sha256 or "unknown"
            out["X-Document-Notice"] = self.notice
        return out


def render_report(*, session: Session, period: BillingPeriod) -> bytes:
    """The managers' monthly report as PDF."""
    inputs = read_inputs(session=session, period=period)
    return report_pdf.render_report_pdf(inputs.view, assemble_report(inputs))


def render(*, session: Session, period: BillingPeriod, kind: str, tenant: str = "") -> bytes:
    """A live render of one document (404 for a tenant without an invoice in the period)."""
    if kind == DocumentKind.INVOICE_PDF:
        return exports.render_invoice(session=session, period=period, tenant=tenant)
    if kind == DocumentKind.REPORT_PDF:
        return render_report(session=session, period=period)
    return exports.render(session=session, period=period, fmt=kind)


def render_all(*, session: Session, period: BillingPeriod) -> dict[tuple[str, str], bytes]:
    """Every document the period issues, keyed (kind, tenant)."""
    out = exports.render_period(session=session, period=period)
    out[(DocumentKind.REPORT_PDF.value, "")] = render_report(session=session, period=period)
    return out


def issue(*, session: Session, period: BillingPeriod) -> dict[str, str]:
    """Render and store (flush, never commit) every document of a period being finalized.

    Returns the SHA-256 of the CSV, FOCUS and PDF exports (also kept on the period row).
    """
    documents = render_all(session=session, period=period)
    issued_at = period.finalized_at
    session.execute(insert(IssuedDocument), [
        {"period_id": period.id, "kind": kind, "tenant": tenant, "content": data, "sha256": sha256(data),
         "created_at": issued_at}
        for (kind, tenant), data in sorted(documents.items())
    ])
    return {kind.value: sha256(documents[(kind.value, "")]) for kind in PERIOD_WIDE}


def stored_hash(period: BillingPeriod, kind: str) -> str | None:
    """The hash kept on the period row at finalize (CSV, FOCUS, PDF only; None for other kinds)."""
    return {DocumentKind.CSV: period.csv_sha256, DocumentKind.FOCUS: period.focus_sha256,
            DocumentKind.PDF: period.pdf_sha256}.get(kind)


def serve(*, session: Session, period: BillingPeriod, kind: str, tenant: str = "") -> Served:
    """The document to download: the issued bytes once finalized, else a live render."""
    if period.status != PeriodStatus.FINALIZED:
        data = render(session=session, period=period, kind=kind, tenant=tenant)
        return Served(data, sha256(data), LIVE)
    stored = session.get(IssuedDocument, (period.id, kind, tenant))
    if stored is not None:
        return Served(stored.content, stored.sha256, ISSUED)
    # Finalized before documents were stored (migration 0011), or a tenant with no invoice (404 here).
    data = render(session=session, period=period, kind=kind, tenant=tenant)
    return Served(data, sha256(data), RERENDERED, stored_hash(period, kind))


@dataclass(frozen=True)
class Check:
    """One document of a finalized period, checked: stored bytes against stored hash, and a fresh render."""

    kind: str
    tenant: str
    stored_sha256: str | None  # None: nothing stored (finalized before migration 0011)
    intact: bool | None  # stored bytes hash to the stored hash (and to the period row's hash); None: nothing stored
    rendered_sha256: str

    @property
    def rendering_changed(self) -> bool:
        """A render today differs from what was issued (informational: the issued bytes are what is served)."""
        return self.stored_sha256 is not None and self.rendered_sha256 != self.stored_sha256


def verify(*, session: Session, period: BillingPeriod) -> list[Check]:
    """Check every issued document of a finalized period, and compare it with a render today."""
    stored = {(d.kind, d.tenant): d for d in session.execute(
        select(IssuedDocument).where(IssuedDocument.period_id == period.id)).scalars()}
    rendered = render_all(session=session, period=period)
    checks = []
    for key in sorted(set(stored) | set(rendered)):
        kind, tenant = key
        doc, fresh = stored.get(key), rendered.get(key)
        fresh_hash = sha256(fresh) if fresh is not None else ""
        if doc is None:  # legacy period: only the period row's hash, if any, says what was issued
            checks.append(Check(kind, tenant, stored_hash(period, kind), None, fresh_hash))
            continue
        row_hash = stored_hash(period, kind)
        intact = sha256(doc.content) == doc.sha256 and row_hash in (None, doc.sha256)
        checks.append(Check(kind, tenant, doc.sha256, intact, fresh_hash))
    return checks
