"""Usage response schemas: GPU-hours over a range by tenant, pool, class or department."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from app.api.schemas import DecimalText, Out

GroupBy = Literal["tenant", "pool", "class", "department"]


class UsageRow(Out):
    key: str
    busy_gpu_hours: DecimalText
    dark_gpu_hours: DecimalText
    gpu_hours: DecimalText
    efficiency: float | None


class UsageSummary(Out):
    start: datetime
    end: datetime
    group_by: GroupBy
    rows: list[UsageRow]
    hours_expected: int
    hours_ok: int
    gap_hours: int
