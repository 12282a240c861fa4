"""SLA penalties paid and lost per service, from the rated months overlapping a range (the SLA page's money),
and the evidence behind a tenant's own penalty lines."""

from __future__ import annotations

from decimal import Decimal

from sqlalchemy import func
from sqlmodel import Session, col, select

from app.billing.loader import DocumentCache
from app.billing.models import BillingPeriod, ChargeLineRecord, PeriodStatus, UnattributedBreachRecord
from app.billing.types import LineKind
from app.core.errors import NotFound
from app.core.settings import get_settings
from app.metrics.breaches_read import ServiceSla, paid_breach_minutes
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


def paid_penalties(*, session: Session, months: list[str] | None, tenants: frozenset[str] | None,
                   service: str | None = None) -> list[dict]:
    """The SLA penalty lines the visible tenants were charged in the given rated months (None: every month), per
    month, tenant and service.

    Read from the tenant's own invoice lines only: a tenant learns the service it paid for, never whose it is.
    """
    stmt = (
        select(BillingPeriod.month, ChargeLineRecord.account, ChargeLineRecord.service,
               func.sum(ChargeLineRecord.quantity), func.sum(ChargeLineRecord.amount))
        .join(BillingPeriod, col(BillingPeriod.id) == col(ChargeLineRecord.period_id))
        .where(BillingPeriod.status != PeriodStatus.OPEN, ChargeLineRecord.kind == LineKind.SLA_PENALTY)
        .group_by(BillingPeriod.month, ChargeLineRecord.account, ChargeLineRecord.service)
        .order_by(BillingPeriod.month, ChargeLineRecord.account, ChargeLineRecord.service)
    )
    if months is not None:
        stmt = stmt.where(col(BillingPeriod.month).in_(months))
    if tenants is not None:
        stmt = stmt.where(col(ChargeLineRecord.account).in_(sorted(tenants)))
    if service is not None:
        stmt = stmt.where(ChargeLineRecord.service == service)
    return [{"month": month, "tenant": tenant, "service": svc, "share_minutes": Decimal(q or 0), "amount": Decimal(a or 0)}
            for month, tenant, svc, q, a in session.exec(stmt)]


def breach_evidence(*, session: Session, period: BillingPeriod, tenant: str, service: str) -> dict:
    """What a penalty line of `tenant` stands for: the breach minutes it was co-located in, their P99, its own
    GPU-seconds in each; 404 when the tenant paid no penalty for `service` in the period."""
    paid = paid_penalties(session=session, months=[period.month], tenants=frozenset({tenant}), service=service)
    if not paid:
        raise NotFound(f"{tenant!r} paid no SLA penalty for {service!r} in {period.month}")
    versions = sorted(set(session.exec(
        select(ChargeLineRecord.policy_version)
        .where(ChargeLineRecord.period_id == period.id, ChargeLineRecord.account == tenant,
               ChargeLineRecord.kind == LineKind.SLA_PENALTY, ChargeLineRecord.service == service)
    )))
    docs = DocumentCache(session)
    terms = []
    for v in versions:
        sla = next((s for s in docs.get(v).sla if s.service == service), None)
        if sla is not None:
            terms.append({"policy_version": v, "p99_ms": sla.p99_ms, "penalty": sla.penalty_per_breach_minute})
    minutes, total = paid_breach_minutes(session=session, start=period.starts_at, end=period.ends_at, tenant=tenant,
                                         service=service)
    tz = get_settings().tz
    days: dict[str, dict] = {}
    for m in minutes:
        day = days.setdefault(m.minute_end.astimezone(tz).date().isoformat(),
                              {"minutes": 0, "alone": 0, "gpu_seconds": Decimal(0)})
        day["minutes"] += 1
        day["alone"] += not m.shared
        day["gpu_seconds"] += m.gpu_seconds
    return {
        "period": period.month, "status": period.status, "currency": period.currency, "tenant": tenant,
        "days": [{"day": d, **v} for d, v in sorted(days.items())],
        "service": service, "terms": terms, "minutes": minutes, "minute_count": total,
        "gpu_seconds": sum((m.gpu_seconds for m in minutes), Decimal(0)),
        "alone_minutes": sum(1 for m in minutes if not m.shared),
        "share_minutes": paid[0]["share_minutes"], "amount": paid[0]["amount"],
    }
