"""Issued documents: what a finalized period issued, stored by the issuing step and served byte for byte after.

Close finalizes in one short transaction and leaves the period's documents *pending* (a finalized
row without export hashes). The issuing step (app/billing/issuing.py, run by the worker or right
after `chargeback close`) calls `render_all` and `store`: every document rendered from the stored
lines and stored with its hash in one transaction, or none of them. `serve` answers a download: a
finalized period's stored bytes (whatever the renderers have become since), 503 with Retry-After
while they are pending, an open or rated period's live render, and, for a period finalized before
migration 0011 stored documents (hashes only), a live re-render marked as one, with the hash stored
at issue beside it. Every stored document is checked against the period's sealed manifest
(app/billing/manifest.py) before it is served: a changed, missing or unlisted one is a 500 naming it, never
served as issued.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from sqlalchemy import insert, select
from sqlmodel import Session

from app.billing import exports, manifest
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
    and the sealed manifest of them all, which ends its pending state. Returns the SHA-256 of the CSV, FOCUS and
    PDF exports (the seal is `period.manifest_sha256`, for the caller's audit entry)."""
    issued_at = utcnow()
    session.execute(insert(IssuedDocument), [
        {"period_id": period.id, "kind": kind, "tenant": tenant, "content": data, "sha256": sha256(data),
         "created_at": issued_at}
        for (kind, tenant), data in sorted(documents.items())
    ])
    hashes = {kind.value: sha256(documents[(kind.value, "")]) for kind in PERIOD_WIDE}
    period.csv_sha256, period.focus_sha256, period.pdf_sha256 = hashes["csv"], hashes["focus"], hashes["pdf"]
    period.manifest = manifest.canonical(documents)
    period.manifest_sha256 = manifest.seal(period.manifest)
    session.add(period)
    session.flush()
    return hashes


def stored_hash(period: BillingPeriod, kind: str) -> str | None:
    """The hash kept on the period row at finalize (CSV, FOCUS, PDF only; None for other kinds)."""
    return {DocumentKind.CSV: period.csv_sha256, DocumentKind.FOCUS: period.focus_sha256,
            DocumentKind.PDF: period.pdf_sha256}.get(kind)


def _matches(stored: IssuedDocument, entry: manifest.Entry) -> bool:
    return sha256(stored.content) == entry.sha256 == stored.sha256 and len(stored.content) == entry.size


def checked_document(*, session: Session, period: BillingPeriod, kind: str, tenant: str = "") -> IssuedDocument | None:
    """An issued period's stored document once checked against the sealed manifest (None: not stored and not
    listed, as for a period issued before documents were stored); DocumentTampered when it is not as issued."""
    sealed = manifest.sealed_entries(session=session, period=period)
    stored = session.get(IssuedDocument, (period.id, kind, tenant))
    name = manifest.name(kind, tenant)
    if sealed is not None:
        entry = sealed.get(name)
        if entry is None and stored is not None:
            raise manifest.tampered(period.month, name, "is not in the sealed manifest of what was issued")
        if entry is not None and stored is None:
            raise manifest.tampered(period.month, name, "is missing (the sealed manifest lists it)")
        if entry is not None and stored is not None and not _matches(stored, entry):
            raise manifest.tampered(period.month, name, "does not match its sealed hash")
    if stored is not None:
        if sha256(stored.content) != stored.sha256:
            raise manifest.tampered(period.month, name, "does not match its stored hash")
    return stored


def serve(*, session: Session, period: BillingPeriod, kind: str, tenant: str = "") -> Served:
    """The document to download: the issued bytes once finalized (DocumentsPending until issued), else a live render."""
    if period.status != PeriodStatus.FINALIZED:
        data = render(session=session, period=period, kind=kind, tenant=tenant)
        return Served(data, sha256(data), LIVE)
    if is_pending(period):
        raise DocumentsPending(period.month)
    stored = checked_document(session=session, period=period, kind=kind, tenant=tenant)
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
    problem: str | None = None  # why it is corrupt, against the sealed manifest (None: intact, or no manifest)

    @property
    def name(self) -> str:
        return manifest.name(self.kind, self.tenant)

    @property
    def rendering_changed(self) -> bool:
        """A render today differs from what was issued (informational: the issued bytes are what is served)."""
        return self.stored_sha256 is not None and self.rendered_sha256 != self.stored_sha256 and self.problem is None


def verify(*, session: Session, period: BillingPeriod) -> list[Check]:
    """Check every issued document of a finalized period against the sealed manifest (the manifest's seal
    against the audit record first), and compare it with a render today."""
    if is_pending(period):
        raise DocumentsPending(period.month)
    stored = {(d.kind, d.tenant): d for d in session.execute(
        select(IssuedDocument).where(IssuedDocument.period_id == period.id)).scalars()}
    checks = []
    seal_problem = manifest.seal_problem(session=session, period=period)
    if seal_problem is not None:
        checks.append(Check("manifest", "", period.manifest_sha256, False, "", seal_problem))
    sealed = _readable_entries(period)
    if sealed is not None:
        return checks + _against_manifest(session=session, period=period, stored=stored, sealed=sealed)
    rendered = render_all(session=session, period=period)
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


def _readable_entries(period: BillingPeriod) -> dict[str, manifest.Entry] | None:
    """The manifest on the period row, as far as it can be read (None: none, or unreadable)."""
    if period.manifest is None:
        return None
    try:
        return manifest.entries(period.manifest)
    except (ValueError, KeyError, TypeError):
        return None


def _against_manifest(*, session: Session, period: BillingPeriod, stored: dict[tuple[str, str], IssuedDocument],
                      sealed: dict[str, manifest.Entry]) -> list[Check]:
    """Each document the manifest lists or the database stores: missing, added, changed, or intact."""
    rendered = {manifest.name(*key): sha256(data) for key, data in render_all(session=session, period=period).items()}
    by_name = {manifest.name(*key): doc for key, doc in stored.items()}
    checks = []
    for name in sorted(set(sealed) | set(by_name)):
        entry, doc = sealed.get(name), by_name.get(name)
        kind, _, tenant = name.partition(" ")
        fresh = rendered.get(name, "")
        if doc is None:
            checks.append(Check(kind, tenant, entry.sha256 if entry else None, False, fresh,
                                "missing: the sealed manifest lists it, nothing is stored"))
        elif entry is None:
            checks.append(Check(kind, tenant, doc.sha256, False, fresh,
                                "added: stored, but not in the sealed manifest of what was issued"))
        elif not _matches(doc, entry) or stored_hash(period, kind) not in (None, entry.sha256):
            checks.append(Check(kind, tenant, doc.sha256, False, fresh,
                                f"changed: stored bytes (sha256 {sha256(doc.content)}) do not match the sealed hash "
                                f"{entry.sha256}"))
        else:
            checks.append(Check(kind, tenant, doc.sha256, True, fresh))
    return checks
