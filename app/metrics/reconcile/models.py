"""What `chargeback reconcile` found per (cluster, hour) and per (cluster, hour, pool), with both figures.

A result is current while the hour's ingest row is as it was when checked (same status and attempts:
every ingestion of an hour, ok or gap, counts an attempt); the checklist and the close read only current
results, so an hour ingested again after its check counts as not reconciled until it is checked again.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from enum import StrEnum

from sqlalchemy import Column, Text
from sqlmodel import Field, SQLModel

import app.core.models  # noqa: F401  (naming convention)
from app.metrics.models import GPU_SECONDS, KWH, cluster_field


class HourVerdict(StrEnum):
    AGREES = "agrees"  # stored ok, every pool's figures equal the source's within the tolerances
    DIFFERS = "differs"  # stored ok, some pool's GPUs, GPU-seconds, kWh or a tenant's GPU-seconds differ
    SOURCE_EMPTY = "source_empty"  # stored ok, but the source holds no occupancy series for pooled nodes
    UNSTORED = "unstored"  # stored as a gap or never ingested, but the source has the hour's data
    GAP = "gap"  # stored as a gap and the source lacks the data too (the coverage item's business)
    MISSING = "missing"  # never ingested and the source has nothing either (the coverage item's business)


# Verdicts that stop a close unless accepted with a reason.
PROBLEMS = (HourVerdict.DIFFERS, HourVerdict.SOURCE_EMPTY, HourVerdict.UNSTORED)
MISSING_STATUS = "missing"  # `stored_status` of an hour with no ingest row


class ReconcileHour(SQLModel, table=True):
    """One cluster-hour's reconciliation: the verdict, what was stored when checked, and why."""

    __tablename__ = "reconcile_hour"

    cluster: str = cluster_field(primary_key=True)
    hour: datetime = Field(primary_key=True)
    verdict: str  # a HourVerdict
    stored_status: str  # the ingest row's status when checked: ok | gap | missing
    ingest_attempts: int = 0  # the ingest row's attempts when checked (0 when missing)
    checked_at: datetime
    detail: str = Field(default="", sa_column=Column(Text, nullable=False, server_default=""))


class ReconcilePoolHour(SQLModel, table=True):
    """One pool-hour's stored figures beside the source's (stored ones null when the hour is not stored)."""

    __tablename__ = "reconcile_pool_hour"

    cluster: str = cluster_field(primary_key=True)
    hour: datetime = Field(primary_key=True)
    pool: str = Field(primary_key=True)
    agrees: bool
    stored_gpus: int | None = None
    source_gpus: int
    stored_gpu_seconds: Decimal | None = Field(default=None, sa_column=Column(GPU_SECONDS, nullable=True))
    source_gpu_seconds: Decimal = Field(sa_column=Column(GPU_SECONDS, nullable=False))
    stored_kwh: Decimal | None = Field(default=None, sa_column=Column(KWH, nullable=True))
    source_kwh: Decimal = Field(sa_column=Column(KWH, nullable=False))
    # JSON {tenant: [stored, source]} of the tenants whose GPU-seconds differ; "" when none
    tenants: str = Field(default="", sa_column=Column(Text, nullable=False, server_default=""))
    note: str = ""  # e.g. why tenants were not compared
