"""Stored policy versions: immutable once written."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Column, Text
from sqlmodel import Field, SQLModel

import app.core.models  # noqa: F401  (naming convention)
from app.core.generation import watch


class PolicyVersion(SQLModel, table=True):
    __tablename__ = "policy_version"

    id: int | None = Field(default=None, primary_key=True)  # the version number
    created_at: datetime
    created_by: str
    source: str  # bootstrap | change | rollback
    effective_from: datetime = Field(index=True)  # billing uses it for hours starting at or after this
    sha256: str
    document: str = Field(sa_column=Column(Text, nullable=False))  # canonical JSON
    comment: str = ""


watch(PolicyVersion)  # a new version changes estimates, charts and the fleet's capacity figures
