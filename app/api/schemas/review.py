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


class PriceImpact(Out):
    """A month's invoices re-rated under the proposed pricing (null in the preview when pricing is unchanged)."""

    month: str
    pool_hours: int
    currency: str
    tenants: list[TenantPriceImpact]
    error: str | None = Field(default=None, description="Why the month could not be re-rated")


class Preview(Out):
    valid: bool
    errors: list[Finding]
    warnings: list[Finding]
    stale: bool
    diff: list[FieldChange]
    capacity: CapacityImpact | None
    price: PriceImpact | None


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
