"""Read side of a rated period: tenant invoices, department roll-ups and the platform statement.

Everything here reads the stored lines of one period (never re-rates), so a finalized period
always shows the same figures.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from decimal import Decimal

from sqlalchemy import select
from sqlmodel import Session

from app.billing.invoice_lines import (
    GROUP_LABELS,
    VersionTerms,
    billing_dates,
    coverage,
    explain,
    invoice_dates,
    invoice_number,
    order_key,
    status_of,
)
from app.billing.loader import DocumentCache
from app.billing.models import (
    BillingPeriod,
    ChargeLineRecord,
    LineSource,
    PoolCostRecord,
    TenantUsageRecord,
    UnattributedBreachRecord,
    UnmeasuredCapacityRecord,
    UnpooledUsageRecord,
)
from app.billing.totals import BILLED_KINDS, NOT_TENANTS, account_totals, department_rollup, fold_totals
from app.billing.types import BALANCE_KINDS, PLATFORM, QUANTITY, TRANSFER_KINDS, LineKind
from app.core.clusters import DEFAULT_CLUSTER
from app.core.errors import NotFound
from app.core.settings import get_settings
from app.core.timeutil import SECONDS_PER_HOUR
from app.metrics.breaches_read import breach_minute_counts
from app.metrics.efficiency import mean_activity
from app.metrics.quality import FindingsSummary, findings_summary

ZERO = Decimal(0)


@dataclass
class PeriodView:
    """Everything stored for one rated period, in a stable order."""

    period: BillingPeriod
    lines: list[ChargeLineRecord]
    usage: list[TenantUsageRecord]
    unattributed: list[UnattributedBreachRecord]
    costs: dict[str, Decimal]
    unpooled: list[UnpooledUsageRecord]
    # What ingestion cut rather than billed in the period's hours (read from the hourly rollups).
    findings: FindingsSummary = field(default_factory=FindingsSummary)
    # The prices lines quote (dark-time multiplier, penalties), per policy version the lines name.
    terms: dict[int, VersionTerms] = field(default_factory=dict)
    # Breach minutes stored for the period's hours per (service, pool): the SLA page's count.
    breach_minutes: dict[tuple[str, str], int] = field(default_factory=dict)
    # Per (cluster, pool) the gap hours and the capacity they left unmeasured, as rated (SPEC 5.8).
    unmeasured: list[UnmeasuredCapacityRecord] = field(default_factory=list)

    @property
    def tenants(self) -> list[str]:
        names = {l.account for l in self.lines} | {u.tenant for u in self.usage}
        return sorted(names - NOT_TENANTS)

    def cluster_of(self, pool: str, version: int | None = None) -> str:
        """The cluster of a pool as the policy version says (its latest version when none is given); "" if unknown."""
        if version is not None and pool in self.terms.get(version, VersionTerms(ZERO)).clusters:
            return self.terms[version].clusters[pool]
        for number in sorted(self.terms, reverse=True):
            if pool in self.terms[number].clusters:
                return self.terms[number].clusters[pool]
        return ""

    @property
    def clusters(self) -> list[str]:
        """The clusters the period's lines are in."""
        return sorted({self.cluster_of(l.pool, l.policy_version) for l in self.lines} - {""})

    @property
    def several_clusters(self) -> bool:
        """Lines of a cluster other than the single default one: pages and exports then name each line's cluster."""
        return any(c != DEFAULT_CLUSTER for c in self.clusters)


def load_view(*, session: Session, period: BillingPeriod) -> PeriodView:
    """Read a period's stored rows (lines by account, pool, kind, class, service, start)."""
    pid = period.id
    lines = list(
        session.execute(
            select(ChargeLineRecord)
            .where(ChargeLineRecord.period_id == pid)
            .order_by(
                ChargeLineRecord.account, ChargeLineRecord.pool, ChargeLineRecord.kind, ChargeLineRecord.klass,
                ChargeLineRecord.service, ChargeLineRecord.charge_start, ChargeLineRecord.line_id,
            )
        ).scalars()
    )
    usage = list(
        session.execute(
            select(TenantUsageRecord)
            .where(TenantUsageRecord.period_id == pid)
            .order_by(TenantUsageRecord.tenant, TenantUsageRecord.pool, TenantUsageRecord.klass)
        ).scalars()
    )
    unattributed = list(
        session.execute(
            select(UnattributedBreachRecord)
            .where(UnattributedBreachRecord.period_id == pid)
            .order_by(UnattributedBreachRecord.service, UnattributedBreachRecord.minute_end)
        ).scalars()
    )
    costs = dict(
        session.execute(
            select(PoolCostRecord.pool, PoolCostRecord.cost)
            .where(PoolCostRecord.period_id == pid)
            .order_by(PoolCostRecord.pool)
        ).all()
    )
    unpooled = list(
        session.execute(
            select(UnpooledUsageRecord)
            .where(UnpooledUsageRecord.period_id == pid)
            .order_by(UnpooledUsageRecord.tenant, UnpooledUsageRecord.klass)
        ).scalars()
    )
    unmeasured = list(
        session.execute(
            select(UnmeasuredCapacityRecord)
            .where(UnmeasuredCapacityRecord.period_id == pid)
            .order_by(UnmeasuredCapacityRecord.cluster, UnmeasuredCapacityRecord.pool)
        ).scalars()
    )
    findings = findings_summary(session=session, start=period.starts_at, end=period.ends_at)
    return PeriodView(period=period, lines=lines, usage=usage, unattributed=unattributed, costs=costs,
                      unpooled=unpooled, findings=findings, terms=version_terms(session, {l.policy_version for l in lines}),
                      breach_minutes=breach_minute_counts(session=session, start=period.starts_at, end=period.ends_at),
                      unmeasured=unmeasured)


def version_terms(session: Session, versions: set[int]) -> dict[int, VersionTerms]:
    """Dark-time multiplier and penalties per breach minute of each policy version (unknown versions skipped)."""
    docs = DocumentCache(session)
    out = {}
    for number in sorted(versions):
        try:
            doc = docs.get(number)
        except NotFound:
            continue
        out[number] = VersionTerms(doc.pricing.dark_time_multiplier,
                                   {s.service: s.penalty_per_breach_minute for s in doc.sla},
                                   {p.name: p.cluster for p in doc.pools})
    return out


def line_dict(line: ChargeLineRecord) -> dict:
    return {
        "line_id": line.line_id, "account": line.account, "department": line.department, "pool": line.pool,
        "kind": line.kind, "class": line.klass, "service": line.service, "policy_version": line.policy_version,
        "charge_start": line.charge_start, "charge_end": line.charge_end, "quantity": line.quantity,
        "unit": line.unit, "amount": line.amount, "correction": line.source == LineSource.CORRECTION,
        "corrects": line.corrects or None, "reason": line.reason or None,
    }


def _efficiency(rows: list[TenantUsageRecord]) -> float | None:
    """The tenant's efficiency over its pools and classes: weighted by occupied samples, as SPEC section 4 defines it."""
    if any(u.efficiency is not None and not u.activity_samples for u in rows):
        return _issued_hour_weighted(rows)
    activity = sum(u.efficiency * u.activity_samples for u in rows if u.activity_samples)
    return mean_activity(activity, sum(u.activity_samples for u in rows))


def _issued_hour_weighted(rows: list[TenantUsageRecord]) -> float | None:
    """What invoices showed before usage rows kept sample counts (rated before migration 0008): the
    GPU-hour weighted mean. A closed period is a document already issued; its exports must keep
    matching the hashes stored at closing. Efficiency is a reported ratio, not money: float as issued."""
    measured = [(u.efficiency, float(u.busy_gpu_hours + u.dark_gpu_hours)) for u in rows if u.efficiency is not None]
    weight = sum(hours for _, hours in measured)
    return round(sum(eff * hours for eff, hours in measured) / weight, 4) if weight else None


def tenant_invoice(view: PeriodView, tenant: str) -> dict:
    """One tenant's invoice: its lines, GPU-hours per pool and class, efficiency, penalties, credits, total."""
    lines = sorted((l for l in view.lines if l.account == tenant), key=order_key)
    usage = [u for u in view.usage if u.tenant == tenant]
    if tenant in NOT_TENANTS or (not lines and not usage):
        raise NotFound(f"No invoice for tenant {tenant!r} in {view.period.month}")
    department = next((l.department for l in lines if l.department), "") or next((u.department for u in usage), "")
    penalties = sum((l.amount for l in lines if l.kind == LineKind.SLA_PENALTY), ZERO)
    credits = ZERO - sum((l.amount for l in lines if l.kind == LineKind.SLA_CREDIT), ZERO)
    currency = view.period.currency
    explained = [{**line_dict(l), **explain(l, view.terms.get(l.policy_version), currency),
                  "cluster": view.cluster_of(l.pool, l.policy_version)} for l in lines]
    groups: dict[str, list[dict]] = {}
    for line in explained:
        groups.setdefault(line["group"], []).append(line)
    return {
        "period": view.period.month,
        "status": view.period.status,
        **status_of(view.period),
        "tenant": tenant,
        "department": department,
        "currency": currency,
        "invoice_number": invoice_number(view.period.month, tenant),
        **invoice_dates(view.period, get_settings().tz),
        "billing_dates": billing_dates(view.period, get_settings().tz),
        "coverage": coverage(view.period),
        "clusters": sorted({line["cluster"] for line in explained} - {""}),
        "several_clusters": view.several_clusters,
        "lines": explained,
        "groups": [
            {"group": g, "label": GROUP_LABELS.get(g, g), "subtotal": sum((l["amount"] for l in ls), ZERO),
             "line_ids": [l["line_id"] for l in ls]}
            for g, ls in groups.items()
        ],
        "gpu_hours": [
            {"pool": u.pool, "cluster": view.cluster_of(u.pool), "class": u.klass, "busy": u.busy_gpu_hours,
             "dark": u.dark_gpu_hours,
             "total": u.busy_gpu_hours + u.dark_gpu_hours, "efficiency": u.efficiency}
            for u in usage
        ],
        "gpu_hours_total": sum((u.busy_gpu_hours + u.dark_gpu_hours for u in usage), ZERO),
        "efficiency": _efficiency(usage),
        "penalties_paid": penalties,
        "credits_received": credits,
        "corrections": sum((l.amount for l in lines if l.source == LineSource.CORRECTION), ZERO),
        "total": account_totals(lines).get(tenant, ZERO),
    }


def invoice_line(view: PeriodView, tenant: str, line_id: str) -> ChargeLineRecord:
    """One line of a tenant's invoice by its id; 404 for any other tenant's line."""
    for line in view.lines:
        if line.account == tenant and line.line_id == line_id and tenant not in NOT_TENANTS:
            return line
    raise NotFound(f"No line {line_id!r} on the invoice of {tenant!r} in {view.period.month}")


def invoice_summaries(view: PeriodView, visible: frozenset[str] | None) -> dict:
    """Invoice totals per visible tenant and their department roll-ups."""
    invoices = fold_totals(
        ((l.account, l.department, l.amount) for l in view.lines if l.kind in BILLED_KINDS),
        ((u.tenant, u.department, u.busy_gpu_hours + u.dark_gpu_hours) for u in view.usage),
        visible,
    )
    return {
        "period": view.period.month,
        "status": view.period.status,
        "currency": view.period.currency,
        "invoices": invoices,
        "departments": department_rollup(invoices),
    }


def sla_reconciliation(view: PeriodView) -> list[dict]:
    """Per service and pool: the breach minutes stored for the period (what the SLA page counts) against the
    minutes its credit covers; the rest are unattributed (nobody co-located: nobody to charge) or were not rated
    (hours ingested again after rating, or hours rating skipped). Unresolved minutes are never breach minutes."""
    credited: dict[tuple[str, str], int] = {}
    for l in view.lines:
        if l.kind == LineKind.SLA_CREDIT and l.source == LineSource.RATING:
            credited[(l.service, l.pool)] = credited.get((l.service, l.pool), 0) + int(l.quantity)
    unattributed: dict[tuple[str, str], int] = {}
    for b in view.unattributed:
        unattributed[(b.service, b.pool)] = unattributed.get((b.service, b.pool), 0) + 1
    out = []
    for key in sorted(set(credited) | set(unattributed) | set(view.breach_minutes)):
        stored, paid, nobody = view.breach_minutes.get(key, 0), credited.get(key, 0), unattributed.get(key, 0)
        out.append({"service": key[0], "pool": key[1], "breach_minutes": stored, "credited_minutes": paid,
                    "unattributed_minutes": nobody, "not_rated_minutes": stored - paid - nobody})
    return out


def _pool_row(pool: str) -> dict:
    return {"pool": pool, "charges": ZERO, "transfers": ZERO, "unallocated": ZERO, **{k: ZERO for k in BALANCE_KINDS}}


def platform_statement(view: PeriodView) -> dict:
    """Balance lines, unallocated use, gaps, unattributed breaches, C per pool and the conservation check."""
    rating = [l for l in view.lines if l.source == LineSource.RATING]
    by_kind: dict[str, Decimal] = {k: ZERO for k in BALANCE_KINDS}
    pools: dict[str, dict] = {}
    unallocated_hours = unallocated_amount = ZERO
    for l in rating:
        pool = pools.setdefault(l.pool, _pool_row(l.pool))
        if l.kind in BALANCE_KINDS:
            by_kind[l.kind] += l.amount
            pool[l.kind] += l.amount
        elif l.kind in TRANSFER_KINDS:
            pool["transfers"] += l.amount
        else:
            pool["charges"] += l.amount
        if l.kind == LineKind.UNALLOCATED:
            unallocated_hours += l.quantity
            unallocated_amount += l.amount
            pool["unallocated"] += l.amount
    rows = []
    for name in sorted(set(pools) | set(view.costs)):
        pool = pools.get(name) or _pool_row(name)
        cost = view.costs.get(name, ZERO)
        balance = sum((pool[k] for k in BALANCE_KINDS), ZERO)
        pool.update(cost=cost, balance=balance, difference=pool["charges"] + balance - cost, cluster=view.cluster_of(name),
                    tenant_charges=pool["charges"] - pool["unallocated"], carried=balance + pool["unallocated"])
        pool["conserved"] = pool["difference"] == ZERO and pool["transfers"] == ZERO
        rows.append(pool)
    breaches = [
        {"service": b.service, "pool": b.pool, "minute_end": b.minute_end, "penalty": b.penalty}
        for b in view.unattributed
    ]
    return {
        "period": view.period.month,
        "status": view.period.status,
        "currency": view.period.currency,
        "sla_minutes": sla_reconciliation(view),
        "balance": {k: by_kind[k] for k in BALANCE_KINDS},
        "balance_total": sum(by_kind.values(), ZERO),
        "unallocated": {"gpu_hours": unallocated_hours.quantize(QUANTITY), "amount": unallocated_amount},
        # What the platform carries: the part of C billed to no tenant, i.e. the platform balance (SPEC 5.5) plus
        # the unallocated use billed to the platform (SPEC 5.6). Per pool: cost = tenant_charges + carried.
        "carried_total": sum(by_kind.values(), ZERO) + unallocated_amount,
        "tenant_charges_total": sum((r["tenant_charges"] for r in rows), ZERO),
        "pools": rows,
        "several_clusters": view.several_clusters,
        "cost_total": sum(view.costs.values(), ZERO),
        "conserved": all(r["conserved"] for r in rows),
        "hours_expected": view.period.hours_expected,
        "hours_ok": view.period.hours_ok,
        "gap_hours": json.loads(view.period.gap_hours),
        "missing_hours": json.loads(view.period.missing_hours),
        # Per pool the gap hours and what their capacity would have cost (GPUs last seen x hours x cost per
        # GPU-hour at default power): an estimate the platform absorbs, never billed (SPEC 5.8).
        "unmeasured": [{"cluster": u.cluster, "pool": u.pool, "gap_hours": u.gap_hours, "gpus": u.gpus,
                        "gpu_hours": Decimal(u.gpu_hours).quantize(QUANTITY), "amount": Decimal(u.amount)}
                       for u in view.unmeasured],
        "unmeasured_total": sum((Decimal(u.amount) for u in view.unmeasured), ZERO),
        "accept_gaps_reason": view.period.accept_gaps_reason,
        "unpooled": {
            "hours": view.period.unpooled_hours, "max_gpus": view.period.unpooled_gpus,
            "capacity_gpu_hours": Decimal(view.period.unpooled_gpu_hours).quantize(QUANTITY),
            "used_gpu_hours": sum((Decimal(u.gpu_hours) for u in view.unpooled), ZERO).quantize(QUANTITY),
            "usage": [{"tenant": u.tenant, "class": u.klass, "gpu_hours": u.gpu_hours} for u in view.unpooled],
            "accept_reason": view.period.accept_unpooled_reason,
        },
        "unattributed_breaches": breaches,
        "unattributed_penalty_total": sum((b.penalty for b in view.unattributed), ZERO),
        "platform_lines": [line_dict(l) for l in view.lines if l.account == PLATFORM],
        # Never billed: GPU-seconds a unit reported above its capacity, cut at ingestion.
        "data_quality": {
            "findings": view.findings.count,
            "gpu_hours_cut": (view.findings.gpu_seconds_cut / SECONDS_PER_HOUR).quantize(QUANTITY),
            "by_pool": {p: {"findings": n, "gpu_hours_cut": (cut / SECONDS_PER_HOUR).quantize(QUANTITY)}
                        for p, (n, cut) in sorted(view.findings.by_pool.items())},
        },
    }
