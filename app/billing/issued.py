"""Issued documents: what a finalized period issued, stored by the issuing step and served byte for byte after.

Close finalizes in one short transaction and leaves the period's documents *pending* (a finalized
row without export hashes). The issuing step (app/billing/issuing.py, run by the worker or right
after `chargeback close`) calls `render_all` and `store`: every document rendered from the stored
lines and stored with its hash in one transaction, or none of them. `serve` answers a download: a
finalized period's stored bytes (whatever the renderers have become since), 503 with Retry-After
while they are pending, an open or rated period's live render, and, for a period finalized before
migration 0011 stored documents (hashes only), a live re-render marked as one, with the hash stored
at issue beside it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from sqlalchemy import insert, select
from sqlmodel import Session

from app.billing import exports
from app.billing.models import BillingPeriod, DocumentKind, IssuedDocument, PeriodStatus
from app.billing.report import assemble_report, read_inputs
from app.core.errors import AppError
from app.core.timeutil import utcnow

ISSUED, LIVE, RERENDERED = "issued", "live", "re-rendered"
PERIOD_WIDE = (DocumentKind.CSV, DocumentKind.FOCUS, DocumentKind.PDF)
RETRY_AFTER_S = 30  # what a download of a pending document suggests; one worker round issues a month
Progress = Callable[[int, int, str], None]  # (documents done, documents in all, the one just done)


class DocumentsPending(AppError):
    """The period is finalized and its documents are being issued: 503, come back after Retry-After."""

    def __init__(self, month: str):
        super().__init__(
            detail=(f"Billing period {month} is finalized and its documents are being issued from the stored lines; "
                    f"try again in {RETRY_AFTER_S} seconds"),
            status=503, title="Documents being issued")
        self.headers = {"Retry-After": str(RETRY_AFTER_S)}


def is_pending(period: BillingPeriod) -> bool:
    """Finalized, and its documents not issued yet (the issuing step sets the hashes when it stores them)."""
    return period.status == PeriodStatus.FINALIZED and period.pdf_sha256 is None


def documents_state(period: BillingPeriod) -> str | None:
    """"pending" or "issued" for a finalized period, None before."""
    if period.status != PeriodStatus.FINALIZED:
        return None
    return "pending" if is_pending(period) else "issued"


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class Served:
    """A document as downloaded: its bytes, their SHA-256, and where they come from."""

    content: bytes
    sha256: str
    origin: str  # issued (stored by the issuing step) | live (not finalized yet) | re-rendered (finalized, nothing stored)
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
    from app.billing import report_pdf  # fpdf2 and fontTools on first use (exports.render_pdf says why)

    inputs = read_inputs(session=session, period=period)
    return report_pdf.render_report_pdf(inputs.view, assemble_report(inputs))


def render(*, session: Session, period: BillingPeriod, kind: str, tenant: str = "") -> bytes:
    """A live render of one document (404 for a tenant without an invoice in the period)."""
    if kind == DocumentKind.INVOICE_PDF:
        return exports.render_invoice(session=session, period=period, tenant=tenant)
    if kind == DocumentKind.REPORT_PDF:
        return render_report(session=session, period=period)
    return exports.render(session=session, period=period, fmt=kind)


def _label(kind: str, tenant: str) -> str:
    return f"{kind} {tenant}" if tenant else kind


def render_all(*, session: Session, period: BillingPeriod, progress: Progress | None = None) -> dict[tuple[str, str], bytes]:
    """Every document the period issues, keyed (kind, tenant), rendered from its stored lines.

    The invoice PDFs share the cut-down fonts (pdf.shared_fonts): the same bytes, a third of the CPU.
    """
    from app.billing import pdf  # fpdf2 and fontTools on first use (exports.render_pdf says why)

    plan = exports.period_documents(session=session, period=period)
    plan.append(((DocumentKind.REPORT_PDF.value, ""), partial(render_report, session=session, period=period)))
    out = {}
    with pdf.shared_fonts():
        for done, (key, render_one) in enumerate(plan, 1):
            out[key] = render_one()
            if progress is not None:
                progress(done, len(plan), _label(*key))
    return out


def store(*, session: Session, period: BillingPeriod, documents: dict[tuple[str, str], bytes]) -> dict[str, str]:
    """Store (flush, never commit) every document of a finalized period and set the export hashes on its row,
    which ends its pending state. Returns the SHA-256 of the CSV, FOCUS and PDF exports."""
    issued_at = utcnow()
    session.execute(insert(IssuedDocument), [
        {"period_id": period.id, "kind": kind, "tenant": tenant, "content": data, "sha256": sha256(data),
         "created_at": issued_at}
        for (kind, tenant), data in sorted(documents.items())
    ])
    hashes = {kind.value: sha256(documents[(kind.value, "")]) for kind in PERIOD_WIDE}
    period.csv_sha256, period.focus_sha256, period.pdf_sha256 = hashes["csv"], hashes["focus"], hashes["pdf"]
    session.add(period)
    session.flush()
    return hashes


def stored_hash(period: BillingPeriod, kind: str) -> str | None:
    """The hash kept on the period row at finalize (CSV, FOCUS, PDF only; None for other kinds)."""
    return {DocumentKind.CSV: period.csv_sha256, DocumentKind.FOCUS: period.focus_sha256,
            DocumentKind.PDF: period.pdf_sha256}.get(kind)


def serve(*, session: Session, period: BillingPeriod, kind: str, tenant: str = "") -> Served:
    """The document to download: the issued bytes once finalized (DocumentsPending until issued), else a live render."""
    if period.status != PeriodStatus.FINALIZED:
        data = render(session=session, period=period, kind=kind, tenant=tenant)
        return Served(data, sha256(data), LIVE)
    if is_pending(period):
        raise DocumentsPending(period.month)
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
    if is_pending(period):
        raise DocumentsPending(period.month)
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
