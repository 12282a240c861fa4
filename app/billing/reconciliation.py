"""Whether a billing period's stored hours reconcile with the source (the close's "Source reconciled" item).

Only clusters read from a Prometheus-compatible URL are checked: the built-in simulator has no second
source. The hours counted are the period's finished ones; every one of them, in every such cluster,
needs a current verdict (app/metrics/reconcile) and none may be a problem, or the close needs a reason.
"""

from __future__ import annotations

from datetime import datetime

from sqlmodel import Session

from app.billing.period import Period
from app.core.settings import get_settings
from app.metrics.reconcile.models import HourVerdict
from app.metrics.reconcile.store import ReconcileState, period_state
from app.metrics.reconcile.task import finished_until
from app.metrics.sources import prometheus_clusters


def period_reconciliation(*, session: Session, period: Period, now: datetime) -> ReconcileState:
    """The reconciliation of the period's finished hours in every cluster read from a Prometheus-compatible URL."""
    settings = get_settings()
    clusters = [c.name for c in prometheus_clusters(settings)]
    return period_state(session, clusters=clusters, start=period.start, end=min(period.end, finished_until(now, settings)))


def findings(state: ReconcileState) -> list[str]:
    """What keeps the period from reconciling, in plain words (empty when it does)."""
    def n(verdict: HourVerdict) -> int:
        return state.verdicts.get(verdict, 0)

    parts = []
    if n(HourVerdict.DIFFERS):
        parts.append(f"{n(HourVerdict.DIFFERS):,} with figures that differ from the source's")
    if n(HourVerdict.SOURCE_EMPTY):
        parts.append(f"{n(HourVerdict.SOURCE_EMPTY):,} stored as complete though the source holds no GPU data for them")
    if n(HourVerdict.UNSTORED):
        parts.append(f"{n(HourVerdict.UNSTORED):,} not billed (gaps or never ingested) though the source has their data")
    if state.unchecked:
        parts.append(f"{state.unchecked:,} not checked yet, or ingested again since their check")
    return parts


def unreconciled_message(month: str, state: ReconcileState) -> str:
    """Why a close without accept_unreconciled is refused."""
    return (f"Billing period {month} does not reconcile with the source: of {state.hours:,} cluster-hours, "
            + "; ".join(findings(state)) + (". " + " | ".join(state.examples) if state.examples else "")
            + ". Ingest those hours again and run `chargeback reconcile --period " + month + "`, or close with "
            "accept_unreconciled and a reason (CLI: --accept-unreconciled --reason \"...\").")
