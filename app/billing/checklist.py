"""The pre-close checklist of a billing period: what finance must know, accept or do before Finalize.

`checklist(state)` is a pure function of the period's state (`CloseState`, read by `close_state`), so the
period page, the API and the tests see one answer. Each item says in plain words what to do: a button on
the period page or an acceptance with a reason, never a command-line flag. The period page refuses a
close while an item blocks it unless the close accepts that item with a reason, exactly as `periods.close` does.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from enum import StrEnum

from sqlalchemy import func, select
from sqlmodel import Session

from app.billing.models import BillingPeriod, ChargeLineRecord, LineSource, PeriodStatus, UnattributedBreachRecord
from app.billing.period import Period, get_period
from app.billing.periods import hour_status, unpooled_status
from app.billing.reconciliation import findings, period_reconciliation
from app.core.timeutil import aware, floor_hour, format_runs
from app.metrics.cluster_hours import latest_ingest
from app.metrics.reconcile.store import ReconcileState
from app.metrics.usage_read import Coverage, hours_coverage

ZERO = Decimal(0)


class ItemStatus(StrEnum):
    OK = "ok"
    ATTENTION = "needs attention"
    BLOCKS = "blocks close"


@dataclass(frozen=True)
class CloseState:
    """Everything the checklist looks at, as plain data (no session)."""

    month: str
    status: str  # a PeriodStatus; "open" when never rated
    coverage: Coverage  # hours of the month: expected, finished, ingested (ok), gaps
    unpooled_hours: int = 0  # hours with GPUs on nodes no policy pool names
    unpooled_gpus: int = 0
    unpooled_gpu_hours: Decimal = ZERO
    unattributed_minutes: int = 0  # SLA breach minutes with no co-located tenant (as last rated)
    unattributed_penalty: Decimal = ZERO
    corrections: int = 0  # correction lines recorded in this period
    corrections_total: Decimal = ZERO
    rated_at: datetime | None = None
    latest_ingest: datetime | None = None  # newest ingestion of an hour of the month
    accept_gaps_reason: str | None = None  # recorded at close
    accept_unpooled_reason: str | None = None
    currency: str = "USD"
    reconcile: ReconcileState = ReconcileState()  # the source check (default: no cluster to check)
    accept_unreconciled_reason: str | None = None
    gap_hours: tuple[datetime, ...] = ()  # finished hours a cluster could not answer (acceptable with a reason)
    # Cluster -> its finished hours never attempted (no acceptance covers them: ingest them first).
    missing_by_cluster: dict[str, list[datetime]] = field(default_factory=dict)


@dataclass(frozen=True)
class ChecklistItem:
    key: str  # coverage | reconcile | unpooled | rating | unattributed | corrections
    title: str
    status: ItemStatus
    detail: str  # what the state is
    action: str  # what to do, in plain words
    accept: str | None = None  # the close form's acceptance that lifts a block (accept_gaps | accept_unpooled | accept_unreconciled)


@dataclass(frozen=True)
class Checklist:
    month: str
    status: str
    items: list[ChecklistItem] = field(default_factory=list)

    @property
    def needs(self) -> list[str]:
        """The acceptances (each with a reason) a close needs: what the close form asks for."""
        return [i.accept for i in self.items if i.status == ItemStatus.BLOCKS and i.accept]

    @property
    def blocked(self) -> bool:
        """Blocked for good: a block no acceptance lifts (hours never ingested, a month not ended; the page then offers no
        Finalize)."""
        return any(i.status == ItemStatus.BLOCKS and not i.accept for i in self.items)

    @property
    def ready(self) -> bool:
        """Nothing blocks: Finalize needs no acceptance."""
        return not any(i.status == ItemStatus.BLOCKS for i in self.items)

    def refusal(self, *, accept_gaps: bool, accept_unpooled: bool, reason: str,
                accept_unreconciled: bool = False) -> dict[str, str]:
        """Why a close with these inputs would be refused, by form field ({} when it may go ahead)."""
        errors: dict[str, str] = {}
        given = {"accept_gaps": accept_gaps, "accept_unpooled": accept_unpooled, "accept_unreconciled": accept_unreconciled}
        for item in self.items:
            if item.status != ItemStatus.BLOCKS:
                continue
            if item.accept is None:
                errors["period"] = item.detail + " " + item.action
            elif not given[item.accept]:
                errors[item.accept] = item.detail + " " + item.action
        if (accept_gaps or accept_unpooled or accept_unreconciled) and not reason.strip():
            errors["reason"] = "Give a reason for what you accept; it is audited and printed on the statement."
        return errors


def _plural(n: int, word: str) -> str:
    return f"{n:,} {word}{'' if n == 1 else 's'}"


def _coverage_item(state: CloseState) -> ChecklistItem:
    c = state.coverage
    title = "Hours ingested"
    detail = f"{c.ok:,} of {c.total:,} hours ingested" + (" in every cluster" if c.clusters else "")
    if state.status == PeriodStatus.FINALIZED:
        if state.accept_gaps_reason:
            return ChecklistItem("coverage", title, ItemStatus.OK, detail + ".",
                                 f"Closed with gap hours accepted: {state.accept_gaps_reason}")
        return ChecklistItem("coverage", title, ItemStatus.OK, detail + ".", "Nothing to do.")
    if c.in_progress:
        return ChecklistItem(
            "coverage", title, ItemStatus.BLOCKS,
            detail + f"; the month has not ended ({_plural(c.total - c.hours, 'hour')} still to come)." + _by_cluster(c),
            "Close the month after it has ended and its last hours are ingested.",
        )
    if state.missing_by_cluster or c.missing:
        never = "; ".join(f"{cluster}: {_plural(len(hours), 'hour')} ({format_runs(hours, limit=3)})"
                          for cluster, hours in state.missing_by_cluster.items()) or _plural(c.missing, "hour")
        todo = "; ".join(f"ingest {format_runs(hours)} for {cluster}" for cluster, hours in state.missing_by_cluster.items())
        return ChecklistItem(
            "coverage", title, ItemStatus.BLOCKS,
            detail + f": hours never ingested, which no acceptance covers \u2014 {never}." + _by_cluster(c),
            (f"{todo[0].upper()}{todo[1:]} first" if todo else "Ingest them first")
            + " (the worker catches up on its own). Hours the source then cannot answer become gaps, which a close "
            "can accept with a reason.",
        )
    if c.gaps:
        return ChecklistItem(
            "coverage", title, ItemStatus.BLOCKS,
            detail + f": {_plural(c.gaps, 'hour')} the source could not answer (gaps, retried automatically: "
            f"{format_runs(list(state.gap_hours), limit=3)}). They are not billed; the statement shows the capacity "
            "they leave unmeasured." + _by_cluster(c),
            "Wait for the retries to fill them, or tick \u201cAccept the gap hours\u201d below and give a reason.",
            accept="accept_gaps",
        )
    return ChecklistItem("coverage", title, ItemStatus.OK, detail + ".", "Nothing to do.")


def _by_cluster(c: Coverage) -> str:
    """With several clusters, those behind the others or with gaps (an hour is ingested when every cluster's is)."""
    most = max((h.ok for h in c.clusters), default=0)
    short = [f"{h.cluster}: {h.ok:,} ingested" + (f", {_plural(h.gaps, 'gap')}" if h.gaps else "")
             for h in c.clusters if h.gaps or h.ok < most]
    if not short:
        return ""
    return (" Behind by cluster (the other clusters' use in those hours is billed, theirs is not): "
            + "; ".join(short) + ".")


def _unpooled_item(state: CloseState) -> ChecklistItem:
    title = "GPUs outside the policy's pools"
    if not state.unpooled_hours:
        return ChecklistItem("unpooled", title, ItemStatus.OK, "Every GPU is on a node a pool names.", "Nothing to do.")
    detail = (f"Up to {_plural(state.unpooled_gpus, 'GPU')} on nodes no pool names, in "
              f"{_plural(state.unpooled_hours, 'hour')} ({state.unpooled_gpu_hours:,.1f} GPU-hours of capacity); "
              "their use is not priced.")
    if state.status == PeriodStatus.FINALIZED:
        return ChecklistItem("unpooled", title, ItemStatus.OK, detail,
                             f"Closed with unpooled GPUs accepted: {state.accept_unpooled_reason or '(no reason)'}")
    return ChecklistItem(
        "unpooled", title, ItemStatus.BLOCKS, detail,
        "Ask an operator to add the nodes to a pool (a policy change) and re-ingest those hours, or tick "
        "\u201cAccept unpooled GPUs\u201d below and give a reason.",
        accept="accept_unpooled",
    )


def _reconcile_item(state: CloseState) -> ChecklistItem:
    title = "Source reconciled"
    r = state.reconcile
    if state.status == PeriodStatus.FINALIZED:
        if state.accept_unreconciled_reason:
            return ChecklistItem("reconcile", title, ItemStatus.OK, "Finalized.",
                                 f"Closed with unreconciled hours accepted: {state.accept_unreconciled_reason}")
        return ChecklistItem("reconcile", title, ItemStatus.OK, "Finalized.", "Nothing to do.")
    if not r.applicable:
        return ChecklistItem("reconcile", title, ItemStatus.OK,
                             "Every cluster is read from the built-in simulator: there is no second source to check.",
                             "Nothing to do.")
    if r.reconciled:
        return ChecklistItem("reconcile", title, ItemStatus.OK,
                             f"All {_plural(r.hours, 'hour')} checked against Prometheus by a second, independent count "
                             "agree with the stored figures (gaps and missing hours aside: see above).", "Nothing to do.")
    detail = (f"Of {_plural(r.hours, 'hour')} checked against Prometheus by a second, independent count: "
              + "; ".join(findings(r)) + "." + (" For example: " + " | ".join(r.examples) if r.examples else ""))
    if r.problems:
        action = ("Ask an operator to ingest those hours again; the worker then checks them again (it checks each day "
                  "once ingested). To close anyway, tick \u201cAccept unreconciled hours\u201d below and give a reason.")
    else:
        action = ("Wait for the worker to check them (it checks each day once ingested), or ask an operator to "
                  "reconcile the month now. To close anyway, tick \u201cAccept unreconciled hours\u201d below and give "
                  "a reason.")
    return ChecklistItem("reconcile", title, ItemStatus.BLOCKS, detail, action, accept="accept_unreconciled")


def _rating_item(state: CloseState) -> ChecklistItem:
    title = "Draft invoices"
    if state.status == PeriodStatus.FINALIZED:
        return ChecklistItem("rating", title, ItemStatus.OK, "Finalized; the invoices no longer change.", "Nothing to do.")
    if state.status != PeriodStatus.RATED or state.rated_at is None:
        return ChecklistItem("rating", title, ItemStatus.ATTENTION, "The month has not been rated yet.",
                             "Press \u201cRate\u201d to draft the invoices and review them before you finalize.")
    if state.latest_ingest is not None and aware(state.latest_ingest) > aware(state.rated_at):
        return ChecklistItem(
            "rating", title, ItemStatus.ATTENTION,
            "Hours were ingested after the last rating: the drafts below do not show them yet.",
            "Press \u201cRate\u201d again to review the figures that Finalize will fix (Finalize rates once more anyway).",
        )
    return ChecklistItem("rating", title, ItemStatus.OK, "Rated after the last ingested hour.", "Nothing to do.")


def _unattributed_item(state: CloseState) -> ChecklistItem:
    title = "SLA breaches nobody pays"
    if not state.unattributed_minutes:
        return ChecklistItem("unattributed", title, ItemStatus.OK, "Every SLA breach minute is charged to a tenant.",
                             "Nothing to do.")
    return ChecklistItem(
        "unattributed", title, ItemStatus.ATTENTION,
        f"{_plural(state.unattributed_minutes, 'breach minute')} had no training or preprocessing tenant in the pool; "
        f"their penalty ({state.unattributed_penalty:,.2f} {state.currency}) is charged to nobody.",
        "Review them on the platform statement below; they do not stop the close.",
    )


def _corrections_item(state: CloseState) -> ChecklistItem:
    title = "Corrections of earlier months"
    if not state.corrections:
        return ChecklistItem("corrections", title, ItemStatus.OK, "No correction lines in this month.", "Nothing to do.")
    verb = "were billed" if state.status == PeriodStatus.FINALIZED else "will be billed"
    return ChecklistItem(
        "corrections", title, ItemStatus.OK if state.status == PeriodStatus.FINALIZED else ItemStatus.ATTENTION,
        f"{_plural(state.corrections, 'correction line')} ({state.corrections_total:+,.2f} {state.currency}) {verb} "
        "with this month.",
        "Check them on the tenants' invoices; once finalized they can only be corrected in a later month.",
    )


def checklist(state: CloseState) -> Checklist:
    """The pre-close checklist of one period, each item with its status and what to do."""
    items = [_coverage_item(state), _reconcile_item(state), _unpooled_item(state), _rating_item(state),
             _unattributed_item(state), _corrections_item(state)]
    return Checklist(month=state.month, status=state.status, items=items)


# --- reading the state ---------------------------------------------------------------------------------


def period_coverage(*, session: Session, period: Period, row: BillingPeriod | None, now: datetime) -> Coverage:
    """Hours of the month ingested: as finalized (stored, never moved by a later re-ingest), else as they stand now."""
    if row is not None and row.status == PeriodStatus.FINALIZED and row.hours_expected:
        return Coverage(hours=row.hours_expected, ok=row.hours_ok, gaps=len(json.loads(row.gap_hours)),
                        expected=row.hours_expected)
    return hours_coverage(session=session, start=period.start, end=period.end, now=now)


def close_state(*, session: Session, period: Period, now: datetime) -> CloseState:
    """The period's state as the checklist needs it, from the stored rows (live hours, last rating's findings)."""
    row: BillingPeriod | None = get_period(session=session, month=period.month)
    coverage = period_coverage(session=session, period=period, row=row, now=now)
    unpooled = unpooled_status(session=session, period=period)
    latest = latest_ingest(session=session, start=period.start, end=period.end)
    hours = hour_status(session=session, period=period)
    finished = floor_hour(now)
    base = {"month": period.month, "coverage": coverage, "latest_ingest": latest, "unpooled_hours": unpooled.hours,
            "gap_hours": tuple(hours.gaps),
            "missing_by_cluster": {cluster: [h for h in missed if h < finished]
                                   for cluster, missed in hours.missing_by_cluster.items() if missed[0] < finished},
            "unpooled_gpus": unpooled.max_gpus, "unpooled_gpu_hours": unpooled.capacity_gpu_hours,
            "reconcile": period_reconciliation(session=session, period=period, now=now)}
    if row is None:
        return CloseState(status=PeriodStatus.OPEN, **base)
    minutes, penalty = session.execute(
        select(func.count(), func.sum(UnattributedBreachRecord.penalty)).where(UnattributedBreachRecord.period_id == row.id)
    ).one()
    corrections, corrections_total = session.execute(
        select(func.count(), func.sum(ChargeLineRecord.amount)).where(
            ChargeLineRecord.period_id == row.id, ChargeLineRecord.source == LineSource.CORRECTION)
    ).one()
    if row.status == PeriodStatus.FINALIZED:  # as closed: the stored figures, never a later re-ingest
        base.update(unpooled_hours=row.unpooled_hours, unpooled_gpus=row.unpooled_gpus,
                    unpooled_gpu_hours=row.unpooled_gpu_hours)
    return CloseState(
        status=row.status, rated_at=row.rated_at, unattributed_minutes=minutes,
        unattributed_penalty=Decimal(penalty or 0), corrections=corrections,
        corrections_total=Decimal(corrections_total or 0), accept_gaps_reason=row.accept_gaps_reason,
        accept_unpooled_reason=row.accept_unpooled_reason, currency=row.currency,
        accept_unreconciled_reason=row.accept_unreconciled_reason, **base,
    )


def period_checklist(*, session: Session, period: Period, now: datetime) -> Checklist:
    """The checklist of one started period as it stands now."""
    return checklist(close_state(session=session, period=period, now=now))


def checklist_payload(*, session: Session, period: Period, now: datetime) -> dict:
    """The checklist as plain data (the API's answer)."""
    state = close_state(session=session, period=period, now=now)
    result = checklist(state)
    return {
        "period": result.month, "status": str(result.status), "hours_expected": state.coverage.total,
        "hours_ok": state.coverage.ok, "ready": result.ready, "needs": result.needs,
        "items": [{"key": i.key, "title": i.title, "status": str(i.status), "detail": i.detail, "action": i.action,
                   "accept": i.accept} for i in result.items],
    }
