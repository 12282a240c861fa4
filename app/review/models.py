"""Change review tables (SPEC section 7): change requests, their comments and approvals, releases, artifacts.

State lives in plain string columns (the enums' values) and moves only by conditional UPDATEs (`... WHERE state = :from`)
in the services, so two people acting at the same moment cannot both win.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from sqlalchemy import Column, LargeBinary, Text, UniqueConstraint
from sqlmodel import Field, SQLModel

import app.core.models  # noqa: F401  (naming convention)


class ChangeState(StrEnum):
    DRAFT = "draft"
    SUBMITTED = "submitted"
    APPROVED = "approved"
    REJECTED = "rejected"
    WITHDRAWN = "withdrawn"
    APPLIED = "applied"  # approved and made part of a version by a release gate


class ReleaseState(StrEnum):
    PLANNED = "planned"
    APPLIED = "applied"  # its policy is a version: only now may it be deployed
    DEPLOYED = "deployed"
    ROLLED_BACK = "rolled_back"


class ChangeRequest(SQLModel, table=True):
    __tablename__ = "change_request"

    id: int | None = Field(default=None, primary_key=True)
    title: str
    justification: str = Field(sa_column=Column(Text, nullable=False))
    author: str = Field(index=True)
    state: str = Field(default=ChangeState.DRAFT, index=True)
    base_version_id: int = Field(foreign_key="policy_version.id")
    document: str = Field(sa_column=Column(Text, nullable=False))  # the proposed document, YAML as edited
    approval_count: int = 0  # bumped by the same conditional UPDATE that may approve
    created_at: datetime
    updated_at: datetime
    submitted_at: datetime | None = None
    decided_at: datetime | None = None
    applied_version_id: int | None = Field(default=None, foreign_key="policy_version.id")


class ChangeComment(SQLModel, table=True):
    __tablename__ = "change_comment"

    id: int | None = Field(default=None, primary_key=True)
    change_id: int = Field(foreign_key="change_request.id", index=True, ondelete="CASCADE")
    author: str
    body: str = Field(sa_column=Column(Text, nullable=False))
    created_at: datetime


class ChangeApproval(SQLModel, table=True):
    """One reviewer's decision on one request (approve or reject); a reviewer decides once."""

    __tablename__ = "change_approval"
    __table_args__ = (UniqueConstraint("change_id", "reviewer", name="uq_change_approval_reviewer"),)

    id: int | None = Field(default=None, primary_key=True)
    change_id: int = Field(foreign_key="change_request.id", index=True, ondelete="CASCADE")
    reviewer: str
    decision: str  # approve | reject
    comment: str = Field(default="", sa_column=Column(Text, nullable=False))
    created_at: datetime


class Release(SQLModel, table=True):
    __tablename__ = "release"

    id: int | None = Field(default=None, primary_key=True)
    name: str
    service: str
    planned_at: datetime
    state: str = Field(default=ReleaseState.PLANNED, index=True)
    created_by: str
    created_at: datetime
    effective_from: datetime | None = None
    applied_by: str | None = None
    applied_at: datetime | None = None
    previous_version_id: int | None = Field(default=None, foreign_key="policy_version.id")
    applied_version_id: int | None = Field(default=None, foreign_key="policy_version.id")
    deployed_by: str | None = None
    deployed_at: datetime | None = None
    rollback_version_id: int | None = Field(default=None, foreign_key="policy_version.id")


class ReleaseChange(SQLModel, table=True):
    """A change request attached to a release; a request belongs to one release at most."""

    __tablename__ = "release_change"
    __table_args__ = (UniqueConstraint("change_id", name="uq_release_change_change_id"),)

    release_id: int = Field(foreign_key="release.id", primary_key=True, ondelete="CASCADE")
    change_id: int = Field(foreign_key="change_request.id", primary_key=True)
    position: int = 0  # order in which the release applies its requests


class PolicyArtifact(SQLModel, table=True):
    """The rendered artifact bundle of one policy version (Kubernetes, Kueue, MIG, alert rules)."""

    __tablename__ = "policy_artifact"

    version_id: int = Field(foreign_key="policy_version.id", primary_key=True)
    created_at: datetime
    files: str = Field(sa_column=Column(Text, nullable=False))  # JSON {path: text}
    bundle: bytes = Field(sa_column=Column(LargeBinary, nullable=False))  # the zip served for download
    sha256: str
