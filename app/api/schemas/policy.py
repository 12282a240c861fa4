"""Policy document response schemas: versions, their artifacts, validation findings and field diffs."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import Field

from app.api.schemas import Out


class Finding(Out):
    """A validation error or warning at a field path of the document."""

    path: str
    message: str
    severity: Literal["error", "warning"]


class FieldChange(Out):
    """One field added, removed or changed; `old`/`new` are null on the side where it is absent."""

    path: str
    op: Literal["add", "remove", "change"]
    old: Any = None
    new: Any = None


class VersionPublic(Out):
    version: int
    created_at: datetime
    created_by: str
    source: str
    effective_from: datetime
    sha256: str
    comment: str
    active: bool


class VersionDocument(VersionPublic):
    document: dict[str, Any] = Field(description="The policy document (SPEC section 3) as plain data")


class VersionDiff(VersionDocument):
    previous_version: int | None
    diff: list[FieldChange] = Field(description="Against the previous version")


class Artifacts(Out):
    version: int
    files: dict[str, str] = Field(description="Rendered file contents by path")
    bundle: str = Field(description="URL of the same files as a zip")


class Validation(Out):
    valid: bool
    warnings: list[Finding]
