"""The monthly report's response schema (GET /api/v1/periods/{period}/report): money and hours as decimal strings."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from app.api.schemas import DecimalText, Out
from app.api.schemas.billing import Statement, Status


class TrendMonth(Out):
    month: str = Field(description="YYYY-MM")
    cost: DecimalText | None = Field(description="Fleet cost C over the month's ingested hours; null when unpriced")
    cost_source: Literal["rated", "computed", "unpriced", "none"] = Field(
        description="rated: the rated period's stored pool costs; computed: the rollups priced, not rated yet")
    capacity_gpu_hours: DecimalText
    used_gpu_hours: DecimalText
    utilisation: DecimalText | None = Field(description="used / capacity, a fraction")


class TopTenant(Out):
    tenant: str
    department: str
    gpu_hours: DecimalText
    total: DecimalText
    share: DecimalText | None = Field(description="The tenant's share of all invoice totals, a fraction")


class DarkTime(Out):
    used_gpu_hours: DecimalText
    dark_gpu_hours: DecimalText
    gpu_hours_share: DecimalText | None = Field(description="Share of used GPU-hours that ran in dark time")
    pool_minutes_share: DecimalText | None = Field(description="Share of pool-minutes that were dark")
    charges: DecimalText = Field(description="All charge lines (reserved, overage, usage, unallocated)")
    dark_charges: DecimalText = Field(description="Usage billed at the dark-time price")
    cost_share: DecimalText | None = Field(description="dark_charges / charges")
    dark_discount: DecimalText = Field(description="The platform's dark-time discount balance line")


class SlaService(Out):
    service: str
    tenant: str
    pool: str
    breach_minutes: int
    unresolved_minutes: int
    penalties: DecimalText
    credits: DecimalText
    unattributed_penalty: DecimalText


class SlaSummary(Out):
    breach_minutes: int
    unresolved_minutes: int
    penalties_paid: DecimalText
    credits_received: DecimalText
    unattributed_penalty: DecimalText
    services: list[SlaService]


class Report(Out):
    """A rated period for managers: 12-month trend, top tenants, dark time, SLA, platform statement."""

    period: str
    status: Status
    currency: str
    invoiced_total: DecimalText
    cost_total: DecimalText
    tenant_count: int
    trend: list[TrendMonth] = Field(description="Oldest first, up to 12 months ending with the period")
    top_tenants: list[TopTenant] = Field(description="Largest invoice totals first, at most 10")
    dark_time: DarkTime
    sla: SlaSummary
    statement: Statement
