"""The sealed manifest of a period's issued documents: what makes swapping one of them evident.

At issue, every stored document's name, SHA-256 and size go into one canonical JSON manifest; its own
SHA-256 (the seal) is kept on the period row *and* in the audit entry of the issue. Someone with write
access to the database who swaps a document's bytes and its hash must then also rewrite the manifest, the
seal on the period row and the append-only audit log, or the download and `chargeback verify` say so.

A period issued before migration 0031 has no manifest anywhere (row and audit both silent): it is checked
as before, each stored document against its own stored hash.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass

from sqlalchemy import select
from sqlmodel import Session

from app.billing.models import BillingPeriod
from app.core.audit import AuditEntry
from app.core.errors import AppError

log = logging.getLogger(__name__)
ISSUE_ACTION = "billing.issue"  # the audit entry that witnesses the seal


@dataclass(frozen=True)
class Entry:
    sha256: str
    size: int


def name(kind: str, tenant: str) -> str:
    """A document's name in the manifest and in messages: its kind, then its tenant if it has one."""
    return f"{kind} {tenant}" if tenant else kind


def canonical(documents: dict[tuple[str, str], bytes]) -> str:
    """The manifest of these documents as canonical JSON (sorted keys, no spaces, UTF-8 kept)."""
    entries = {name(kind, tenant): {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
               for (kind, tenant), data in documents.items()}
    return json.dumps({"documents": entries, "version": 1}, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def seal(manifest: str) -> str:
    """The SHA-256 of a manifest's canonical text."""
    return hashlib.sha256(manifest.encode()).hexdigest()


def entries(manifest: str) -> dict[str, Entry]:
    """The documents a manifest names."""
    return {key: Entry(value["sha256"], value["size"]) for key, value in json.loads(manifest)["documents"].items()}


class DocumentTampered(AppError):
    """An issued document, or the manifest that seals them, is not what was issued: never served as issued."""

    def __init__(self, month: str, document: str, problem: str):
        super().__init__(detail=f"Billing period {month}: issued document {document} {problem}",
                         status=500, title="Issued document corrupt")
        self.document = document
        self.reason = problem


def audit_seal(*, session: Session, month: str) -> str | None:
    """The seal recorded by the first audit entry of the month's issue (None: issued before manifests, or never)."""
    entry = session.execute(
        select(AuditEntry).where(AuditEntry.action == ISSUE_ACTION, AuditEntry.entity == "billing_period",
                                 AuditEntry.entity_id == month).order_by(AuditEntry.id).limit(1)  # type: ignore[arg-type]
    ).scalars().first()
    if entry is None or not entry.after:
        return None
    try:
        after = json.loads(entry.after)
    except ValueError:
        return "unreadable"
    return after.get("manifest_sha256") if isinstance(after, dict) else "unreadable"


def seal_problem(*, session: Session, period: BillingPeriod) -> str | None:
    """Why the period's manifest cannot be trusted (None when its seal holds on the row and in the audit log,
    or when neither has one: issued before manifests)."""
    witnessed = audit_seal(session=session, month=period.month)
    if period.manifest is None and period.manifest_sha256 is None and witnessed is None:
        return None
    if period.manifest is None:
        return "is missing from the period row (the audit log recorded a sealed manifest)"
    if period.manifest_sha256 is None or seal(period.manifest) != period.manifest_sha256:
        return "does not match the seal on the period row"
    if witnessed != period.manifest_sha256:
        return "has a seal on the period row that differs from the audit record of the issue"
    try:
        entries(period.manifest)
    except (ValueError, KeyError, TypeError):
        return "cannot be read"
    return None


def sealed_entries(*, session: Session, period: BillingPeriod) -> dict[str, Entry] | None:
    """The manifest's documents once its seal is checked (None: issued before manifests); DocumentTampered if not."""
    problem = seal_problem(session=session, period=period)
    if problem is not None:
        raise tampered(period.month, "manifest", problem)
    return None if period.manifest is None else entries(period.manifest)


def tampered(month: str, document: str, problem: str) -> DocumentTampered:
    """The error for a download that found a document (or the manifest) not as issued, logged as it is made."""
    log.error("billing period %s: issued document %s %s; not served", month, document, problem)
    return DocumentTampered(month, document, problem)
