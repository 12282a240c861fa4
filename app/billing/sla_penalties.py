"""SLA penalties paid and lost per service, from the rated months overlapping a range (the SLA page's money)."""

from __future__ import annotations

from decimal import Decimal

from sqlalchemy import func
from sqlmodel import Session, col, select

from app.billing.models import BillingPeriod, ChargeLineRecord, PeriodStatus, UnattributedBreachRecord
from app.billing.types import LineKind
from app.metrics.breaches_read import ServiceSla
from app.metrics.date_ranges import DateRange, days_of


def add_penalties(*, session: Session, period: DateRange, rows: list[ServiceSla]) -> list[str]:
    """Fill penalties from rated months overlapping the range; returns those months."""
    months = sorted({f"{d.year:04d}-{d.month:02d}" for d in days_of(period)})
    periods = {
        p.id: p.month
        for p in session.exec(
            select(BillingPeriod).where(col(BillingPeriod.month).in_(months), BillingPeriod.status != PeriodStatus.OPEN)
        )
    }
    if not periods or not rows:
        return []
    by_service = {r.service: r for r in rows}
    paid = session.exec(
        select(ChargeLineRecord.service, func.sum(ChargeLineRecord.amount))
        .where(col(ChargeLineRecord.period_id).in_(list(periods)), ChargeLineRecord.kind == LineKind.SLA_PENALTY,
               col(ChargeLineRecord.service).in_(list(by_service)))
        .group_by(ChargeLineRecord.service)
    )
    for service, amount in paid:
        by_service[service].penalties_paid = Decimal(amount or 0)
    lost = session.exec(
        select(UnattributedBreachRecord.service, func.sum(UnattributedBreachRecord.penalty))
        .where(col(UnattributedBreachRecord.period_id).in_(list(periods)),
               col(UnattributedBreachRecord.service).in_(list(by_service)))
        .group_by(UnattributedBreachRecord.service)
    )
    for service, amount in lost:
        by_service[service].unattributed = Decimal(amount or 0)
    return sorted(periods.values())
