"""The second step of closing a month: issue a finalized period's documents, then announce it.

`periods.close` finalizes in one short transaction (re-rate, lines, status, audit) and leaves the
documents pending. `issue_period` renders every document from the stored lines (CSV, FOCUS, period
PDF, each tenant's invoice PDF, report PDF: app/billing/issued.py), stores them with their hashes,
audits and emits `period.finalized` (mail attaches the stored PDFs, so the event comes after them),
all in one transaction: a crash or a failing render leaves the period pending, whole, and the next
worker round issues it from the start.

Several workers run `issue_task` at once. On PostgreSQL the period row is claimed with
`SELECT ... FOR NO KEY UPDATE SKIP LOCKED` and held for the whole issuing transaction: another worker skips
it (and issues the next pending month, if any). On SQLite the documents are rendered without the
write lock (rendering a large month takes minutes, and every other writer would wait), then the
write lock is taken and the period read again: stored only if it is still pending. Either way a
period's documents are stored once, and the event key `period.finalized:<month>` records one event.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.engine import Engine
from sqlmodel import Session

from app.billing import issued, manifest
from app.billing.models import BillingPeriod, PeriodStatus
from app.billing.periods import billed_total
from app.core.audit import record
from app.core.db import is_postgres, sqlite_write_lock, unit_of_work
from app.core.event_payloads import PeriodFinalized
from app.core.events import emit

log = logging.getLogger(__name__)
WORKER = "worker"


@dataclass(frozen=True)
class Issue:
    """What one issuing run stored."""

    month: str
    documents: int
    sha256: dict[str, str]  # csv, focus, pdf


def _pending():
    return select(BillingPeriod).where(BillingPeriod.status == PeriodStatus.FINALIZED,
                                       BillingPeriod.pdf_sha256.is_(None))  # type: ignore[union-attr]


def pending_months(session: Session) -> list[str]:
    """Finalized months whose documents are not issued yet, the earliest finalized first."""
    statement = _pending().order_by(BillingPeriod.finalized_at, BillingPeriod.id)
    return [row.month for row in session.execute(statement).scalars()]


def _store(session: Session, row: BillingPeriod, documents: dict[tuple[str, str], bytes], actor: str) -> Issue:
    """Store the documents and hashes, audit, and emit `period.finalized` (flush only)."""
    hashes = issued.store(session=session, period=row, documents=documents)
    total = billed_total(session=session, period=row)
    record(session=session, actor=actor, action=manifest.ISSUE_ACTION, entity="billing_period", entity_id=row.month,
           before={"documents": "pending"}, after={"documents": "issued", "count": len(documents), **hashes,
                  "manifest_sha256": row.manifest_sha256})  # the seal's second, append-only witness
    emit(session=session, type="period.finalized", key=f"period.finalized:{row.month}",
         payload=PeriodFinalized(period=row.month, revision=row.revision, total=str(total),
                                 finalized_at=row.finalized_at, finalized_by=row.finalized_by or "", sha256=hashes))
    return Issue(row.month, len(documents), hashes)


def issue(*, session: Session, month: str, actor: str = WORKER, progress: issued.Progress | None = None) -> Issue | None:
    """In the caller's transaction: claim `month` if its documents are pending (on PostgreSQL a row lock,
    skipped when another worker holds it), render them, store them, emit. None when there is nothing to do."""
    statement = _pending().where(BillingPeriod.month == month)
    if is_postgres(session):
        # NO KEY UPDATE: held for minutes, it must not block inserts that merely reference the row (FOR KEY SHARE).
        statement = statement.with_for_update(skip_locked=True, key_share=True)
    row = session.execute(statement).scalars().first()
    if row is None:
        return None
    documents = issued.render_all(session=session, period=row, progress=progress)
    return _store(session, row, documents, actor)


def issue_period(*, engine: Engine, month: str, actor: str = WORKER,
                 progress: issued.Progress | None = None) -> Issue | None:
    """Issue `month`'s pending documents in a transaction of their own; None when it is not pending (issued
    already, not finalized) or another worker holds it."""
    if is_postgres(engine):
        with unit_of_work(engine) as session:
            return issue(session=session, month=month, actor=actor, progress=progress)
    with Session(engine) as session:  # SQLite: render without holding the write lock ...
        row = session.execute(_pending().where(BillingPeriod.month == month)).scalars().first()
        if row is None:
            return None
        documents = issued.render_all(session=session, period=row, progress=progress)
    with unit_of_work(engine) as session:  # ... then take it, and store only if nobody did meanwhile
        sqlite_write_lock(session)
        row = session.execute(_pending().where(BillingPeriod.month == month)).scalars().first()
        if row is None:
            return None
        return _store(session, row, documents, actor)


def issue_pending(engine: Engine, *, actor: str = WORKER) -> list[Issue]:
    """Issue every pending month; one that fails to render is logged and left pending, the others go on."""
    with Session(engine) as session:
        months = pending_months(session)
    out = []
    for month in months:
        try:
            done = issue_period(engine=engine, month=month, actor=actor)
        except Exception:
            log.exception("issuing the documents of %s failed; it stays pending and is retried next round", month)
            continue
        if done is not None:
            log.info("issued %d documents of %s", done.documents, done.month)
            out.append(done)
    return out


def issue_task(engine: Engine, clock: Callable[[], datetime] | None = None) -> list[Issue]:
    """The worker task: issue the documents of every finalized month still pending (then mail and webhooks
    deliver its `period.finalized`). Issuing dates nothing by the worker's clock."""
    return issue_pending(engine)
