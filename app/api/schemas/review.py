"""Review workflow response schemas: change requests, their preview and rebase, releases."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import Field

from app.api.schemas import DecimalText, Out
from app.api.schemas.policy import FieldChange, Finding, VersionPublic
from app.review.models import ChangeState, ReleaseState

CHANGE_STATES = tuple(s.value for s in ChangeState)
RELEASE_STATES = tuple(s.value for s in ReleaseState)


class ChangePublic(Out):
    id: int
    title: str
    justification: str
    author: str
    state: Literal[CHANGE_STATES]  # type: ignore[valid-type]
    base_version: int
    approvals: int
    created_at: datetime
    updated_at: datetime
    submitted_at: datetime | None
    decided_at: datetime | None
    applied_version: int | None


class CommentPublic(Out):
    id: int
    author: str
    body: str
    created_at: datetime


class Decision(Out):
    reviewer: str
    decision: str
    comment: str
    created_at: datetime


class ChangeDetail(ChangePublic):
    document: str = Field(description="The proposed policy document (YAML)")
    stale: bool = Field(description="Its base is no longer the current version: rebase before applying")
    errors: list[Finding]
    warnings: list[Finding]
    diff: list[FieldChange]
    comments: list[CommentPublic]
    decisions: list[Decision]


class QuotaImpact(Out):
    pool: str
    gpus_before: int | None
    gpus: int
    guaranteed_before: int
    guaranteed: int
    over: bool


class MigImpact(Out):
    node: str
    gpus: str
    model: str
    profiles: dict[str, int]
    slices_used: int
    slices: int
    over: bool


class MemoryImpact(Out):
    tenant: str
    reserved_mib: int | None
    peak_mib: int | None
    required_mib: int | None
    ok: bool | None


class CapacityImpact(Out):
    quotas: list[QuotaImpact]
    mig: list[MigImpact]
    memory: list[MemoryImpact]
    memory_measured: bool


class TenantPriceImpact(Out):
    tenant: str
    before: DecimalText
    after: DecimalText
    delta: DecimalText


class PlatformLineImpact(Out):
    line: str
    kind: str = Field(description="A platform line kind, or `total` (the platform's share) or `cost` (C)")
    before: DecimalText
    after: DecimalText
    delta: DecimalText


class PriceImpact(Out):
    """A month's invoices and platform statement re-rated under the proposal (null in the preview when the proposal
    changes nothing rating reads: pricing, pools, SLA penalties, tenants' classes)."""

    month: str
    pool_hours: int
    currency: str
    tenants: list[TenantPriceImpact]
    platform: list[PlatformLineImpact] = Field(description="Platform statement lines before and after")
    error: str | None = Field(default=None, description="Why the month could not be re-rated")


class MonthCoverage(Out):
    month: str
    hours_expected: int
    hours_ok: int


class PreviewMonth(MonthCoverage):
    """The month re-rated and measured: `?month=`, else the newest complete month with every hour ingested."""

    note: str | None = Field(description="Why this month is not fully covered, or why it was chosen as the fallback")
    requested: bool


class QuotaUse(Out):
    """One quota against the month's use (GPUs held per hour) and the estimated preemption before and after."""

    tenant: str
    pool: str
    peak_gpus: DecimalText = Field(description="The busiest hour's mean GPUs held")
    mean_gpus: DecimalText = Field(description="Mean GPUs held over the month's ingested hours")
    guaranteed_before: int | None
    guaranteed_after: int | None
    limit_before: int | None = Field(description="guaranteed + borrowing_limit")
    limit_after: int | None
    hours_borrowing_before: int = Field(description="Hours above the guaranteed quota (borrowed, preemptible)")
    hours_borrowing_after: int
    hours_over_limit_before: int = Field(description="Hours above guaranteed + borrowing_limit")
    hours_over_limit_after: int
    gpu_hours_over_limit_before: DecimalText
    gpu_hours_over_limit_after: DecimalText
    preempted: Literal["more", "fewer", "same"]


class Preview(Out):
    valid: bool
    errors: list[Finding]
    warnings: list[Finding]
    stale: bool
    month: PreviewMonth
    months: list[MonthCoverage] = Field(description="Complete months the preview can re-rate, newest first")
    diff: list[FieldChange]
    capacity: CapacityImpact | None
    quota_use: list[QuotaUse]
    price: PriceImpact | None


class ArtifactFileDiff(Out):
    file: str
    status: Literal["added", "removed", "changed", "same"]
    diff: str = Field(description="Unified diff (empty when the file is the same)")


class ArtifactsDiff(Out):
    """Rendered files against another version's, both rendered under one version number (so only the policy's
    effect shows, not the version stamp)."""

    version: int | None = Field(default=None, description="The version shown (for a version's diff)")
    change: int | None = Field(default=None, description="The change request shown (for a request's diff)")
    against: int | None = Field(description="The version compared with: the previous one, or the request's base version; null for the first")
    files: list[ArtifactFileDiff]


class MergeConflict(Out):
    """One field both sides changed differently (null where a side removed it or never had it)."""

    path: str
    base: Any
    ours: Any
    theirs: Any


class Rebase(Out):
    """The outcome of a rebase: `onto` when conflicts block it, `detail` when nothing was to do, `errors` after a merge."""

    rebased: bool
    base_version: int
    onto: int | None = None
    conflicts: list[MergeConflict]
    detail: str | None = None
    errors: list[Finding] | None = None


class ReleasePublic(Out):
    id: int
    name: str
    service: str
    planned_at: datetime
    state: Literal[RELEASE_STATES]  # type: ignore[valid-type]
    created_by: str
    created_at: datetime
    effective_from: datetime | None
    applied_by: str | None
    applied_at: datetime | None
    previous_version: int | None
    applied_version: int | None
    deployed_by: str | None
    deployed_at: datetime | None
    rollback_version: int | None
    changes: list[ChangePublic]


class ReleaseVersion(ReleasePublic):
    version: VersionPublic = Field(description="The version the release made active")
