"""A tenant's month total and the department roll-up: the one definition the API, pages, PDF and preview show.

A tenant's total for a period is the sum of its charge and SLA transfer lines (rating lines and
corrections alike); the platform and unallocated use are on the platform statement, not an invoice.
The SQL forms sum in PostgreSQL (exact numerics); SQLite (NUMERIC as floating point) hands back the
rows and Python sums them as Decimals, so both give the figure the in-memory fold gives.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal

from sqlalchemy import func, select
from sqlmodel import Session

from app.billing.models import BillingPeriod, ChargeLineRecord, PeriodStatus, TenantUsageRecord
from app.billing.readable import Viewer, readable_lines, readable_usage
from app.billing.types import CHARGE_KINDS, PLATFORM, TRANSFER_KINDS, LineKind
from app.policy.document import UNALLOCATED

ZERO = Decimal(0)
NOT_TENANTS = frozenset({PLATFORM, UNALLOCATED})  # their use is on the platform statement, not an invoice
BILLED_KINDS = CHARGE_KINDS + TRANSFER_KINDS  # what an account owes; balance lines only explain C


def account_totals(lines: Iterable) -> dict[str, Decimal]:
    """Each account's total of charge and transfer lines (ChargeLine or ChargeLineRecord), pure."""
    sums: dict[str, Decimal] = {}
    for line in lines:
        if line.kind in BILLED_KINDS:
            sums[line.account] = sums.get(line.account, ZERO) + line.amount
    return sums


def fold_totals(
    lines: Iterable[tuple[str, str, Decimal]], usage: Iterable[tuple[str, str, Decimal]], visible: frozenset[str] | None
) -> list[dict]:
    """Invoice totals from (account, department, amount) and (tenant, department, GPU-hours), per visible tenant."""
    totals: dict[str, Decimal] = defaultdict(lambda: ZERO)
    hours: dict[str, Decimal] = defaultdict(lambda: ZERO)
    departments: dict[str, str] = {}
    for account, department, amount in lines:
        totals[account] += Decimal(str(amount))
        departments[account] = min(departments.get(account, department), department)
    for tenant, department, used in usage:
        hours[tenant] += Decimal(str(used))
        totals[tenant] += ZERO
        departments.setdefault(tenant, department)
    return [
        {"tenant": t, "department": departments.get(t, ""), "gpu_hours": hours[t], "total": totals[t]}
        for t in sorted(totals)
        if t not in NOT_TENANTS and (visible is None or t in visible)
    ]


def department_rollup(invoices: list[dict]) -> list[dict]:
    """Tenants and their totals summed per department, by department name."""
    rollup: dict[str, dict] = {}
    for inv in invoices:
        dept = rollup.setdefault(inv["department"], {"department": inv["department"], "tenants": [], "total": ZERO})
        dept["tenants"].append(inv["tenant"])
        dept["total"] += inv["total"]
    return [rollup[d] for d in sorted(rollup)]


def _sums(session: Session, stmt, key) -> list[tuple[str, str, Decimal]]:
    """(key, department, value) summed per key: by PostgreSQL, or row by row on SQLite."""
    if session.get_bind().dialect.name == "postgresql":
        key_col, department, value = stmt.selected_columns
        grouped = stmt.with_only_columns(key_col, func.min(department), func.sum(value)).group_by(key)
        return [(k, d, Decimal(v)) for k, d, v in session.execute(grouped)]
    return list(session.execute(stmt.order_by(key)))


def tenant_totals(*, session: Session, period: BillingPeriod, viewer: Viewer | None) -> list[dict]:
    """Every tenant the viewer may see: its invoice total and GPU-hours in `period`, sorted by tenant name."""
    lines = readable_lines(
        select(ChargeLineRecord.account, ChargeLineRecord.department, ChargeLineRecord.amount).where(
            ChargeLineRecord.period_id == period.id, ChargeLineRecord.kind.in_(BILLED_KINDS)
        ),
        viewer,
    )
    used = TenantUsageRecord.busy_gpu_hours + TenantUsageRecord.dark_gpu_hours
    usage = readable_usage(
        select(TenantUsageRecord.tenant, TenantUsageRecord.department, used).where(TenantUsageRecord.period_id == period.id),
        viewer,
    )
    return fold_totals(_sums(session, lines, ChargeLineRecord.account), _sums(session, usage, TenantUsageRecord.tenant), None)


def has_lines(*, session: Session, account: str) -> bool:
    """Whether any period holds a line of `account`."""
    stmt = select(ChargeLineRecord.id).where(ChargeLineRecord.account == account).limit(1)
    return session.execute(stmt).first() is not None


@dataclass
class MonthTotal:
    """One tenant's invoice in one rated period, for its history."""

    month: str
    status: str
    total: Decimal
    penalties_paid: Decimal
    credits_received: Decimal  # positive: what the tenant was credited


def tenant_history(*, session: Session, tenant: str, viewer: Viewer | None) -> list[MonthTotal]:
    """Every rated period's total for one tenant, newest first, with SLA penalties paid and credits received."""
    rows = session.execute(readable_lines(
        select(BillingPeriod.month, BillingPeriod.status, ChargeLineRecord.kind, ChargeLineRecord.amount)
        .join(BillingPeriod, BillingPeriod.id == ChargeLineRecord.period_id)
        .where(ChargeLineRecord.account == tenant, BillingPeriod.status != PeriodStatus.OPEN,
               ChargeLineRecord.kind.in_(BILLED_KINDS)),
        viewer,
    ))
    out: dict[str, MonthTotal] = {}
    for month, status, kind, amount in rows:
        row = out.setdefault(month, MonthTotal(month, status, ZERO, ZERO, ZERO))
        amount = Decimal(str(amount))
        row.total += amount
        if kind == LineKind.SLA_PENALTY:
            row.penalties_paid += amount
        elif kind == LineKind.SLA_CREDIT:
            row.credits_received -= amount
    return sorted(out.values(), key=lambda r: r.month, reverse=True)
