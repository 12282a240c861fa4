"""Invoice totals per tenant straight from SQL, for the paged finance API (no full period view loaded).

Same figures as `invoices.invoice_summaries`: lines summed per account and GPU-hours per tenant,
platform and unallocated left out. PostgreSQL sums exact numerics in the database; SQLite (which
keeps NUMERIC as floating point) hands back the rows and Python sums them as Decimals.
"""

from __future__ import annotations

from collections import defaultdict
from decimal import Decimal

from sqlalchemy import func, select
from sqlmodel import Session

from app.billing.invoices import NOT_TENANTS
from app.billing.models import BillingPeriod, ChargeLineRecord, TenantUsageRecord

ZERO = Decimal(0)


def _sums(session: Session, key, department, value, period_id: int) -> list[tuple[str, str, Decimal]]:
    table_period = key.class_.period_id
    if session.get_bind().dialect.name == "postgresql":
        stmt = select(key, func.min(department), func.sum(value)).where(table_period == period_id).group_by(key)
        return [(k, d, Decimal(v)) for k, d, v in session.execute(stmt)]
    totals: dict[str, Decimal] = defaultdict(lambda: ZERO)
    departments: dict[str, str] = {}
    for k, d, v in session.execute(select(key, department, value).where(table_period == period_id).order_by(key)):
        totals[k] += Decimal(str(v))
        departments.setdefault(k, d)
    return [(k, departments[k], totals[k]) for k in totals]


def tenant_totals(*, session: Session, period: BillingPeriod, visible: frozenset[str] | None) -> list[dict]:
    """Every visible tenant's invoice total and GPU-hours in `period`, sorted by tenant name."""
    totals: dict[str, Decimal] = {}
    departments: dict[str, str] = {}
    hours: dict[str, Decimal] = defaultdict(lambda: ZERO)
    for account, department, amount in _sums(
        session, ChargeLineRecord.account, ChargeLineRecord.department, ChargeLineRecord.amount, period.id
    ):
        totals[account] = amount
        departments[account] = department
    busy = TenantUsageRecord.busy_gpu_hours + TenantUsageRecord.dark_gpu_hours
    for tenant, department, used in _sums(session, TenantUsageRecord.tenant, TenantUsageRecord.department, busy,
                                          period.id):
        hours[tenant] = used
        totals.setdefault(tenant, ZERO)
        departments.setdefault(tenant, department)
    return [
        {"tenant": t, "department": departments.get(t, ""), "gpu_hours": hours[t], "total": totals[t]}
        for t in sorted(totals)
        if t not in NOT_TENANTS and (visible is None or t in visible)
    ]
