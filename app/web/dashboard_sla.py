"""Read-only SLA and fleet-cost aggregations: breach minutes (with co-located tenants), penalties, month cost."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import date, datetime
from decimal import Decimal

from sqlalchemy import func
from sqlmodel import Session, col, select

from app.billing.models import BillingPeriod, ChargeLineRecord, PeriodStatus, UnattributedBreachRecord
from app.billing.fleet_cost import fleet_cost
from app.billing.types import LineKind
from app.core.timeutil import SECONDS_PER_HOUR, aware
from app.metrics.models import (
    BreachMinuteRollup,
    BreachShare,
    PoolHourRollup,
    SlaUnresolvedHour,
    UsageRollup,
)
from app.policy.document import PolicyDocument
from app.web.dashboard_queries import ZERO, DayOf, day_column, days_of
from app.web.queries import DateRange

BREACH_LIST_LIMIT = 200


@dataclass
class ServiceSla:
    service: str
    tenant: str
    pool: str
    p99_ms: Decimal | None  # the red line in the active policy (None: the service left the policy)
    penalty: Decimal | None
    daily: list[int] = field(default_factory=list)  # breach minutes per day of the range
    penalties_paid: Decimal = ZERO  # charged to co-located tenants (rated months overlapping the range)
    unattributed: Decimal = ZERO  # breaches with nobody co-located
    # Minutes whose P99 bucket straddles the red line: the histogram cannot tell, so they are not billed.
    unresolved: int = 0

    @property
    def minutes(self) -> int:
        return sum(self.daily)


def services(*, session: Session, period: DateRange, doc: PolicyDocument | None,
             tenants: frozenset[str] | None) -> list[ServiceSla]:
    """Every SLA service of the policy or with breaches in the range, with breach minutes per day."""
    found: dict[str, ServiceSla] = {}
    for s in (doc.sla if doc else []):
        found[s.service] = ServiceSla(s.service, s.tenant, s.pool, s.p99_ms, s.penalty_per_breach_minute)
    days = days_of(period)
    index = {d: i for i, d in enumerate(days)}
    in_db = day_column(session, BreachMinuteRollup.hour, period.tz)
    day_of = (lambda d: d) if in_db is not None else DayOf(period.tz)
    bucket = BreachMinuteRollup.hour if in_db is None else in_db
    rows = session.exec(
        select(BreachMinuteRollup.service, BreachMinuteRollup.service_tenant, BreachMinuteRollup.pool,
               bucket, func.count())
        .where(BreachMinuteRollup.hour >= period.start_utc, BreachMinuteRollup.hour < period.end_utc)
        .group_by(BreachMinuteRollup.service, BreachMinuteRollup.service_tenant, BreachMinuteRollup.pool, bucket)
    )
    for service, tenant, pool, hour, count in rows:
        s = found.setdefault(service, ServiceSla(service, tenant, pool, None, None))
        if not s.daily:
            s.daily = [0] * len(days)
        i = index.get(day_of(hour))
        if i is not None:
            s.daily[i] += int(count)
    unresolved = session.exec(
        select(SlaUnresolvedHour.service, SlaUnresolvedHour.service_tenant, SlaUnresolvedHour.pool,
               func.sum(SlaUnresolvedHour.minutes))
        .where(SlaUnresolvedHour.hour >= period.start_utc, SlaUnresolvedHour.hour < period.end_utc)
        .group_by(SlaUnresolvedHour.service, SlaUnresolvedHour.service_tenant, SlaUnresolvedHour.pool)
    )
    for service, tenant, pool, minutes in unresolved:
        found.setdefault(service, ServiceSla(service, tenant, pool, None, None)).unresolved = int(minutes or 0)
    out = []
    for s in found.values():
        if tenants is not None and s.tenant not in tenants:
            continue
        s.daily = s.daily or [0] * len(days)
        out.append(s)
    return sorted(out, key=lambda s: s.service)


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


@dataclass
class Breach:
    minute_end: datetime
    p99_ms: Decimal
    pool: str
    colocated: list[tuple[str, Decimal]]  # (tenant, GPU-seconds in the pool during the minute)
    hidden: int = 0  # co-located tenants the viewer may not see


def breach_minutes(*, session: Session, period: DateRange, service: str, tenants: frozenset[str] | None,
                   limit: int = BREACH_LIST_LIMIT) -> tuple[list[Breach], int]:
    """The newest breach minutes of one service in the range (at most `limit`) and how many there are."""
    where = (BreachMinuteRollup.service == service, BreachMinuteRollup.hour >= period.start_utc,
             BreachMinuteRollup.hour < period.end_utc)
    total = session.exec(select(func.count()).select_from(BreachMinuteRollup).where(*where)).one()
    heads = list(session.exec(
        select(BreachMinuteRollup).where(*where).order_by(col(BreachMinuteRollup.minute_end).desc()).limit(limit)
    ))
    shares: dict[int, list[tuple[str, Decimal]]] = defaultdict(list)
    if heads:
        for breach_id, tenant, seconds in session.exec(
            select(BreachShare.breach_id, BreachShare.tenant, BreachShare.gpu_seconds)
            .where(col(BreachShare.breach_id).in_([h.id for h in heads]))
        ):
            shares[breach_id].append((tenant, Decimal(seconds)))
    out = []
    for h in heads:
        mine = sorted(shares.get(h.id, []), key=lambda s: (-s[1], s[0]))
        visible = [s for s in mine if tenants is None or s[0] in tenants]
        out.append(Breach(aware(h.minute_end), Decimal(h.p99_ms), h.pool, visible, len(mine) - len(visible)))
    return out, int(total)


# --- fleet cost and utilisation of a month ----------------------------------------------------------------


@dataclass
class MonthCost:
    month: str
    cost: Decimal | None  # C over the month's ingested hours
    source: str  # FleetCost.source: "rated" | "computed" | "unpriced" | "none"
    capacity_hours: Decimal
    used_hours: Decimal
    currency: str = "USD"

    @property
    def utilisation(self) -> Decimal | None:
        return None if not self.capacity_hours else self.used_hours / self.capacity_hours


def month_cost(*, session: Session, month: str, start: datetime, end: datetime, docs) -> MonthCost:
    """Fleet cost C (billing's one definition) and utilisation of one month."""
    capacity = session.exec(
        select(func.sum(PoolHourRollup.capacity_gpu_seconds)).where(PoolHourRollup.hour >= start, PoolHourRollup.hour < end)
    ).one()
    used = session.exec(
        select(func.sum(UsageRollup.gpu_seconds)).where(UsageRollup.hour >= start, UsageRollup.hour < end)
    ).one()
    cap_h, used_h = Decimal(capacity or 0) / SECONDS_PER_HOUR, Decimal(used or 0) / SECONDS_PER_HOUR
    c = fleet_cost(session=session, month=month, start=start, end=end, docs=docs)
    return MonthCost(month, c.cost, c.source, cap_h, used_h, c.currency)


def breach_minutes_by_service(*, session: Session, start: datetime, end: datetime) -> dict[str, int]:
    """Breach minutes per service between two instants."""
    return dict(session.exec(
        select(BreachMinuteRollup.service, func.count())
        .where(BreachMinuteRollup.hour >= start, BreachMinuteRollup.hour < end)
        .group_by(BreachMinuteRollup.service)
    ).all())


def days_label(days: list[date]) -> list[str]:
    return [d.isoformat() for d in days]
