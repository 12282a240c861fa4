"""The audit log entry as both audit routes serve it."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from app.api.schemas import Out


class AuditOut(Out):
    id: int
    at: datetime
    actor: str
    action: str
    entity: str
    entity_id: str
    tenant: str | None
    before: Any = None
    after: Any = None
