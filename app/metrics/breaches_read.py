"""Breach read side: SLA breach minutes per service and day, unresolved minutes, and who was co-located."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal

from sqlalchemy import func
from sqlmodel import Session, col, select

from app.core.timeutil import aware
from app.metrics.date_ranges import DateRange, DayOf, day_column, days_of
from app.metrics.models import BreachMinuteRollup, BreachShare, SlaUnresolvedHour
from app.metrics.visibility import readable
from app.policy.document import PolicyDocument

ZERO = Decimal(0)
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
    rows = session.exec(readable(
        select(BreachMinuteRollup.service, BreachMinuteRollup.service_tenant, BreachMinuteRollup.pool,
               bucket, func.count())
        .where(BreachMinuteRollup.hour >= period.start_utc, BreachMinuteRollup.hour < period.end_utc)
        .group_by(BreachMinuteRollup.service, BreachMinuteRollup.service_tenant, BreachMinuteRollup.pool, bucket),
        BreachMinuteRollup, tenants,
    ))
    for service, tenant, pool, hour, count in rows:
        s = found.setdefault(service, ServiceSla(service, tenant, pool, None, None))
        if not s.daily:
            s.daily = [0] * len(days)
        i = index.get(day_of(hour))
        if i is not None:
            s.daily[i] += int(count)
    unresolved = session.exec(readable(
        select(SlaUnresolvedHour.service, SlaUnresolvedHour.service_tenant, SlaUnresolvedHour.pool,
               func.sum(SlaUnresolvedHour.minutes))
        .where(SlaUnresolvedHour.hour >= period.start_utc, SlaUnresolvedHour.hour < period.end_utc)
        .group_by(SlaUnresolvedHour.service, SlaUnresolvedHour.service_tenant, SlaUnresolvedHour.pool),
        SlaUnresolvedHour, tenants,
    ))
    for service, tenant, pool, minutes in unresolved:
        found.setdefault(service, ServiceSla(service, tenant, pool, None, None)).unresolved = int(minutes or 0)
    out = []
    for s in found.values():
        if tenants is not None and s.tenant not in tenants:  # the policy's own SLAs: a document, not a table
            continue
        s.daily = s.daily or [0] * len(days)
        out.append(s)
    return sorted(out, key=lambda s: s.service)


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
        # Every share is read (the count of hidden ones is shown); only the visible ones are named.
        visible = [s for s in mine if tenants is None or s[0] in tenants]
        out.append(Breach(aware(h.minute_end), Decimal(h.p99_ms), h.pool, visible, len(mine) - len(visible)))
    return out, int(total)


def breach_minute_counts(*, session: Session, start: datetime, end: datetime) -> dict[tuple[str, str], int]:
    """Stored breach minutes per (service, pool) of the hours [start, end): what the SLA page counts."""
    rows = session.exec(
        select(BreachMinuteRollup.service, BreachMinuteRollup.pool, func.count())
        .where(BreachMinuteRollup.hour >= start, BreachMinuteRollup.hour < end)
        .group_by(BreachMinuteRollup.service, BreachMinuteRollup.pool)
    )
    return {(service, pool): int(n) for service, pool, n in rows}


@dataclass(frozen=True)
class PaidBreach:
    """A breach minute one tenant was co-located in: only that tenant's own figure, never another's."""

    minute_end: datetime
    p99_ms: Decimal
    pool: str
    gpu_seconds: Decimal  # the tenant's own GPU-seconds in the pool during the minute
    shared: bool  # other tenants were co-located too (neither named nor counted)


PAID_LIST_LIMIT = 5000


def paid_breach_minutes(*, session: Session, start: datetime, end: datetime, tenant: str, service: str,
                        limit: int = PAID_LIST_LIMIT) -> tuple[list[PaidBreach], int]:
    """Breach minutes of `service` in the hours [start, end) in which `tenant` had GPU-seconds (oldest first)."""
    mine = readable(
        select(BreachMinuteRollup.id, BreachMinuteRollup.minute_end, BreachMinuteRollup.p99_ms, BreachMinuteRollup.pool,
               BreachShare.gpu_seconds)
        .join(BreachShare, col(BreachShare.breach_id) == col(BreachMinuteRollup.id))
        .where(BreachShare.tenant == tenant, BreachMinuteRollup.service == service, BreachShare.gpu_seconds > 0,
               BreachMinuteRollup.hour >= start, BreachMinuteRollup.hour < end),
        BreachShare, frozenset({tenant}),
    )
    total = session.exec(select(func.count()).select_from(mine.subquery())).one()
    rows = list(session.exec(mine.order_by(BreachMinuteRollup.minute_end).limit(limit)))
    others: set[int] = set()
    if rows:
        # Only whether someone else shared the minute is read (for the penalty split), not who or how much.
        others = set(session.exec(
            select(BreachShare.breach_id)
            .where(col(BreachShare.breach_id).in_([r[0] for r in rows]), BreachShare.tenant != tenant,
                   BreachShare.gpu_seconds > 0)
            .distinct()
        ))
    return [PaidBreach(aware(m), Decimal(p99), pool, Decimal(gs), bid in others) for bid, m, p99, pool, gs in rows], int(total)
