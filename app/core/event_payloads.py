"""The documented `data` of each event type: one model per type, used by the emitters and the API document.

Emitters build these models, so what is stored (and delivered by webhooks and e-mail) is what the
OpenAPI document's `webhooks` section describes. Payloads are small on purpose (Standard Webhooks
recommends well under 20 kB): identifiers, totals and hashes; a receiver that needs the lines asks
the API (`/api/v1/periods/{period}/invoices`, `/export`). Money is an exact decimal string.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from app.core.clusters import DEFAULT_CLUSTER


class Payload(BaseModel):
    model_config = ConfigDict(extra="forbid")


class PeriodRated(Payload):
    """A billing period was rated (a draft): every rating run, re-ratings included."""

    period: str = Field(description="YYYY-MM")
    revision: int = Field(description="the rating's id: the period's revision, one more at each rating or close")
    lines_sha256: str = Field(description="SHA-256 over the rated lines (id and amount): equal hashes, equal invoices")
    lines: int = Field(description="charge lines rated")
    currency: str | None
    total: str = Field(description="billed to tenants (exact decimal)")
    tenants: dict[str, str] = Field(description="tenant -> its billed total (exact decimal)")
    hours_expected: int
    hours_ok: int
    gap_hours: int
    rated_at: datetime
    rated_by: str


class PeriodFinalized(Payload):
    """A billing period was finalized and its documents issued (the worker's step after close): its invoices and
    exports are stored and never change."""

    period: str
    revision: int
    total: str
    finalized_at: datetime
    finalized_by: str
    sha256: dict[str, str] = Field(description="hash of each issued export: csv, focus, pdf")


class CorrectionCreated(Payload):
    """A correction line was added to an open period for a line of a finalized one (tenant-scoped)."""

    period: str = Field(description="the open period the correction lands in")
    line_id: str
    corrects: str = Field(description="the finalized line it corrects")
    corrected_period: str
    account: str = Field(description="the tenant billed, or 'platform'")
    pool: str
    amount: str = Field(description="the signed correction (exact decimal)")
    currency: str | None
    reason: str
    created_by: str


class ReleaseRef(Payload):
    id: int
    name: str
    service: str


class PolicyApplied(Payload):
    """A policy version was stored and becomes the active one from `effective_from` (release, rollback, import)."""

    version: int
    sha256: str = Field(description="SHA-256 of the version's canonical JSON document")
    effective_from: datetime
    source: str = Field(description="change (a release applied), rollback, or bootstrap (an audited import)")
    created_by: str
    comment: str
    release: ReleaseRef | None = None


class IngestionGap(Payload):
    """An hour could not be read and was recorded as a gap (never billed as zero); retried with backoff."""

    hour: datetime
    error: str
    attempts: int = Field(description="failed reads of this hour so far (one event per hour and attempt)")
    next_retry_at: datetime | None
    cluster: str = Field(default=DEFAULT_CLUSTER,
                         description="the cluster whose hour it is (each cluster's hours are read on their own)")


class BudgetThreshold(Payload):
    """A budget's threshold was reached this month: by the cost so far (basis actual) or by the month-end forecast
    (basis forecast). One event per budget, amount, threshold, month and basis; a tenant's is tenant-scoped."""

    month: str = Field(description="YYYY-MM")
    threshold_percent: int = Field(description="the threshold reached, in percent of the budget")
    basis: Literal["actual", "forecast"] = Field(description="actual: the cost so far; forecast: the month-end forecast")
    amount: str = Field(description="the figure that reached it: the cost so far, or the forecast (exact decimal)")
    budget: str = Field(description="the monthly budget (exact decimal)")
    currency: str
    tenant: str | None = Field(description="the tenant whose budget it is; null for a department's")
    department: str | None = Field(description="the department (a tenant's, or the budget's own)")
    actual: str = Field(description="the month-to-date cost when evaluated (exact decimal)")
    forecast: str = Field(description="the month-end forecast when evaluated (exact decimal)")
    as_of: datetime = Field(description="hours before this were known")


PAYLOADS: dict[str, type[Payload]] = {
    "period.rated": PeriodRated,
    "period.finalized": PeriodFinalized,
    "correction.created": CorrectionCreated,
    "policy.applied": PolicyApplied,
    "ingestion.gap": IngestionGap,
    "budget.threshold": BudgetThreshold,
}
