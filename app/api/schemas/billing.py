"""Billing response schemas: periods, invoices, the platform statement, corrections (money as decimal strings)."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import Field

from app.api.schemas import DecimalText, Out
from app.billing.models import PeriodStatus

Status = Literal[PeriodStatus.OPEN, PeriodStatus.RATED, PeriodStatus.FINALIZED]


class PeriodHashes(Out):
    csv: str | None
    focus: str | None
    pdf: str | None


class PeriodSummary(Out):
    """A billing month; one never rated (status open) carries only the fields up to `finalized_at`."""

    period: str = Field(description="YYYY-MM")
    status: Status
    starts_at: datetime
    ends_at: datetime
    revision: int
    rated_at: datetime | None
    rated_by: str | None = Field(default=None, description="null for tenant members")
    finalized_at: datetime | None
    finalized_by: str | None = Field(default=None, description="null for tenant members")
    accept_gaps_reason: str | None = None
    accept_unpooled_reason: str | None = None
    accept_unreconciled_reason: str | None = None
    unpooled_gpu_hours: DecimalText | None = None
    hours_expected: int | None = None
    hours_ok: int | None = None
    gap_hours: int | None = None
    missing_hours: int | None = None
    hashes: PeriodHashes | None = Field(default=None, description="SHA-256 of each export, once its documents are issued")
    documents: Literal["pending", "issued"] | None = Field(
        default=None, description="finalized only: pending while the worker issues the documents (downloads answer "
                                  "503 with Retry-After), issued once they are stored")


class InvoiceSummary(Out):
    tenant: str
    department: str
    gpu_hours: DecimalText
    total: DecimalText


class DepartmentTotal(Out):
    department: str
    tenants: list[str]
    total: DecimalText


class InvoiceList(Out):
    period: str
    status: Status
    currency: str
    items: list[InvoiceSummary]
    invoices: list[InvoiceSummary] = Field(deprecated=True, description="Deprecated: the same list as `items`")
    departments: list[DepartmentTotal]
    next_cursor: str | None = None


class ChargeLine(Out):
    line_id: str
    account: str
    department: str
    pool: str
    kind: str
    klass: str = Field(alias="class")
    service: str
    policy_version: int
    charge_start: datetime
    charge_end: datetime = Field(description="exclusive")
    quantity: DecimalText
    unit: str
    amount: DecimalText
    correction: bool
    corrects: str | None = Field(description="The line a correction corrects")
    reason: str | None


class TenantGpuHours(Out):
    pool: str
    cluster: str = Field(description="The pool's cluster (as the latest policy version of the period says)")
    klass: str = Field(alias="class")
    busy: DecimalText
    dark: DecimalText
    total: DecimalText
    efficiency: float | None


InvoiceGroupName = Literal["reserved_fee", "inference_overage", "usage_busy", "usage_dark", "sla", "correction", "other"]


class InvoiceLine(ChargeLine):
    """An invoice line with its derivation: quantity x unit_rate, rounded half-even to the cent, = amount."""

    group: InvoiceGroupName = Field(description="The invoice group; lines are served in group order")
    unit_rate: DecimalText | None = Field(
        description="amount / quantity with the fewest decimals (4 at least) at which quantity x unit_rate, rounded "
                    "half-even to the cent, equals amount; an effective rate for GPU-hour lines (hours of different "
                    "rates); null for a zero quantity")
    rate_basis: str = Field(description="How the rate comes from the pool and the policy version (SPEC section 5)")
    policy_rate: DecimalText | None = Field(description="SLA lines: the policy version's penalty per breach minute")
    undiscounted_amount: DecimalText | None = Field(
        description="Dark-time lines: the amount at the full rate, amount / dark_multiplier rounded half-even to the cent")
    undiscounted_rate: DecimalText | None = Field(description="Dark-time lines: the checkable rate of undiscounted_amount")
    dark_multiplier: DecimalText | None = Field(description="Dark-time lines: the policy version's dark_time_multiplier")
    discount: DecimalText | None = Field(description="Dark-time lines: undiscounted_amount - amount")
    drilldown: bool = Field(description="A per-day breakdown exists (rated GPU-hour lines)")
    evidence: bool = Field(description="SLA penalty lines: the breach minutes behind it can be read")
    cluster: str = Field(description="The cluster of the line's pool, as its policy version says")


class InvoiceGroup(Out):
    group: InvoiceGroupName
    label: str
    subtotal: DecimalText
    line_ids: list[str]


class BillingDates(Out):
    start: datetime = Field(description="The period's first instant (UTC)")
    end: datetime = Field(description="exclusive (UTC)")
    timezone: str = Field(description="The billing timezone (IANA name)")
    start_local: str = Field(description="start in the billing timezone, ISO 8601 with offset")
    end_local: str = Field(description="end in the billing timezone, ISO 8601 with offset (exclusive)")
    first_day: str = Field(description="First calendar day, YYYY-MM-DD")
    last_day: str = Field(description="Last calendar day, YYYY-MM-DD")


class Coverage(Out):
    """Hours of the month measured (ingested without a gap) against the hours in the month."""

    hours_measured: int
    hours_in_month: int
    fraction: DecimalText
    complete: bool


class Invoice(Out):
    """One tenant's invoice for a period."""

    period: str
    status: Status
    final: bool = Field(description="The period is finalized: the total is due")
    status_label: Literal["draft", "finalized"]
    total_label: str = Field(description="'Total due' once finalized, else 'Draft total, not yet due'")
    tenant: str
    department: str
    currency: str
    invoice_number: str = Field(description="CB-<period>-<tenant>: derived from the period and the tenant, never changes "
                                            "(a draft shows the number it will be issued under)")
    issue_date: str | None = Field(description="YYYY-MM-DD in the billing timezone: the day the period was finalized; "
                                               "null for a draft")
    payment_terms_days: int | None = Field(description="Days from issue to due date, as stored when the period was "
                                                       "finalized; null for a draft or a period finalized before terms")
    due_date: str | None = Field(description="issue_date + payment_terms_days (YYYY-MM-DD); null for a draft (not due)")
    billing_dates: BillingDates
    coverage: Coverage
    clusters: list[str] = Field(description="The clusters of the invoice's pools: one invoice spans every cluster")
    several_clusters: bool = Field(description="The period has lines outside the single default cluster")
    lines: list[InvoiceLine]
    groups: list[InvoiceGroup] = Field(description="Groups in invoice order: reserved fee, inference overage, "
                                                   "usage busy, usage dark, SLA penalties and credits, corrections")
    gpu_hours: list[TenantGpuHours]
    gpu_hours_total: DecimalText
    efficiency: float | None
    penalties_paid: DecimalText
    credits_received: DecimalText
    corrections: DecimalText
    total: DecimalText


class Balance(Out):
    platform_idle: DecimalText
    platform_dark_discount: DecimalText
    platform_reserved_unused: DecimalText
    platform_rounding: DecimalText


class PoolBalance(Out):
    """C of one pool against what was charged: conserved when charges + balance = cost to the cent."""

    pool: str
    cluster: str
    charges: DecimalText = Field(description="Lines 1-3 and the unallocated use (line 6) of the pool")
    tenant_charges: DecimalText = Field(description="What the pool's tenants are billed: charges - unallocated")
    unallocated: DecimalText = Field(description="The pool's use no tenant claims, billed to the platform")
    carried: DecimalText = Field(description="Carried by the platform: balance + unallocated = cost - tenant_charges")
    transfers: DecimalText
    platform_idle: DecimalText
    platform_dark_discount: DecimalText
    platform_reserved_unused: DecimalText
    platform_rounding: DecimalText
    cost: DecimalText
    balance: DecimalText
    difference: DecimalText
    conserved: bool


class Unallocated(Out):
    gpu_hours: DecimalText
    amount: DecimalText


class UnpooledUse(Out):
    tenant: str
    klass: str = Field(alias="class")
    gpu_hours: DecimalText


class Unpooled(Out):
    hours: int
    max_gpus: int
    capacity_gpu_hours: DecimalText
    used_gpu_hours: DecimalText
    usage: list[UnpooledUse]
    accept_reason: str | None


class UnattributedBreach(Out):
    service: str
    pool: str
    minute_end: datetime
    penalty: DecimalText


class QualityCut(Out):
    findings: int
    gpu_hours_cut: DecimalText


class DataQuality(QualityCut):
    by_pool: dict[str, QualityCut]


class SlaMinutes(Out):
    """A service's breach minutes in the period against those its credit covers."""

    service: str
    pool: str
    breach_minutes: int = Field(description="Stored breach minutes of the period's hours (the SLA page's count)")
    credited_minutes: int = Field(description="Minutes with co-located training/preprocessing: charged and credited")
    unattributed_minutes: int = Field(description="Minutes with nobody co-located: nobody to charge")
    not_rated_minutes: int = Field(description="The rest: hours ingested again after rating (re-rate), or not rated")


class UnmeasuredCapacity(Out):
    """A pool's gap hours in the period and an estimate of their cost: the GPUs it had in the last hour ingested
    before each gap x the gap's hours x their cost per GPU-hour at default power."""

    cluster: str
    pool: str
    gap_hours: int
    gpus: int = Field(description="GPUs last seen before the gap (0 when the pool was never seen before it)")
    gpu_hours: DecimalText
    amount: DecimalText


class Statement(Out):
    """The platform statement of a period: balance lines, unallocated use, gaps, unattributed breaches, conservation."""

    period: str
    status: Status
    currency: str
    sla_minutes: list[SlaMinutes]
    balance: Balance
    balance_total: DecimalText = Field(description="The platform balance (SPEC 5.5): the four balance lines")
    unallocated: Unallocated
    carried_total: DecimalText = Field(
        description="Carried by the platform: balance_total + unallocated amount, the part of cost_total billed to no "
                    "tenant (the page's and the PDF's one figure)")
    tenant_charges_total: DecimalText = Field(
        description="Charged to tenants for capacity and use (lines 1-3, before SLA transfers and corrections): "
                    "cost_total - carried_total")
    pools: list[PoolBalance]
    several_clusters: bool
    cost_total: DecimalText
    conserved: bool
    hours_expected: int
    hours_ok: int
    gap_hours: list[str] = Field(description="Hours (ISO 8601) Prometheus could not answer")
    missing_hours: list[str] = Field(description="Hours (ISO 8601) never ingested")
    unmeasured: list[UnmeasuredCapacity] = Field(
        description="Per pool: its gap hours and the capacity they left unmeasured (SPEC 5.8; never billed)")
    unmeasured_total: DecimalText = Field(description="The unmeasured capacity of every pool, absorbed by the platform")
    accept_gaps_reason: str | None
    unpooled: Unpooled
    unattributed_breaches: list[UnattributedBreach]
    unattributed_penalty_total: DecimalText
    platform_lines: list[ChargeLine]
    data_quality: DataQuality


class Correction(Out):
    line_id: str
    corrects: str
    amount: DecimalText
    reason: str


class ChecklistItem(Out):
    """One thing finance must know, accept or do before Finalize."""

    key: Literal["coverage", "reconcile", "unpooled", "rating", "unattributed", "corrections"]
    title: str
    status: Literal["ok", "needs attention", "blocks close"]
    detail: str = Field(description="What the state is, in plain words")
    action: str = Field(description="What to do, in plain words")
    accept: Literal["accept_gaps", "accept_unpooled", "accept_unreconciled"] | None = Field(
        description="The close's acceptance (with a reason) that lifts this block; null when none does")


class PeriodChecklist(Out):
    """The pre-close checklist of a period: what blocks Finalize, what needs attention, what to do."""

    period: str
    status: Status
    hours_expected: int = Field(description="Every hour of the month")
    hours_ok: int = Field(description="Hours ingested")
    ready: bool = Field(description="Nothing blocks: Finalize needs no acceptance")
    needs: list[Literal["accept_gaps", "accept_unpooled", "accept_unreconciled"]] = Field(
        description="Acceptances (each with a reason) a close needs now")
    items: list[ChecklistItem]
