"""Allocation explorer schemas: a window's GPU-hours, efficiency and cost per group, with idle and unallocated rows."""

from __future__ import annotations

from datetime import date
from typing import Literal

from pydantic import Field

from app.api.schemas import DecimalText, Out

Aggregate = Literal["tenant", "department", "pool", "cluster", "class", "namespace"]


class AllocationRow(Out):
    kind: Literal["allocated", "unallocated", "idle", "adjustment", "total"] = Field(
        description="allocated: a group of tenants' use; unallocated: use no tenant claims (by namespace: one row per "
                    "namespace); idle: a pool's capacity nobody used; adjustment: the rest of the platform balance "
                    "(dark-time discount, reserved but unused, rounding); total: the sum of the rows")
    name: str = Field(description="the group (tenant, department, pool, cluster, class or namespace); the pool of an "
                                  "idle row")
    tenant: str | None = Field(description="by namespace: the namespace's tenant; otherwise null")
    busy_gpu_hours: DecimalText
    dark_gpu_hours: DecimalText
    gpu_hours: DecimalText = Field(description="busy + dark; for idle rows the capacity not used")
    efficiency: float | None = Field(description="mean engine activity over the occupied samples; null when none")
    cost: DecimalText = Field(description="reserved fee, overage and usage lines (SLA transfers and corrections excluded)")
    forecast_cost: DecimalText | None = Field(description=(
        "tenant and department rows of a window that runs through today: `cost` plus the month-end forecast of "
        "this month's hours not known yet (weekday/hour pattern of the trailing four weeks, as on the tenant "
        "page and in /api/v1/budgets); null otherwise"))
    currency: str


class AllocationMonth(Out):
    month: str
    source: Literal["invoice", "estimate"] = Field(
        description="invoice: the rated or finalized period's lines; estimate: the window's rollups rated now by the same rating")
    status: Literal["open", "rated", "finalized"]


class Allocation(Out):
    window: str = Field(description="the window as YYYY-MM-DD,YYYY-MM-DD (whole days in the billing time zone, both included)")
    start: date
    end: date
    aggregate: Aggregate
    tenant: str | None = Field(description="the tenant filter, if one was given")
    cluster: str | None = Field(description="the cluster filter, if one was given: that cluster's pools only")
    currency: str
    estimated: bool = Field(description="true when any month of the window is an estimate")
    months: list[AllocationMonth]
    rows: list[AllocationRow]
    total: AllocationRow
