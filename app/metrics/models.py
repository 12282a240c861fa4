"""Hourly rollups (SPEC section 4). A cluster's hour is replaced whole on re-ingestion; a gap is an `IngestHour` row.

Every row belongs to one cluster (CHARGEBACK_CLUSTERS; `default` for the single Prometheus): clusters
are ingested independently, so one cluster's hour can be ok while another's is a gap. Pool names are
unique across clusters, except `unpooled`, which each cluster has of its own.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from enum import StrEnum

from sqlalchemy import Column, Index, Numeric, UniqueConstraint
from sqlmodel import Field, SQLModel

import app.core.models  # noqa: F401  (naming convention)
from app.core.clusters import DEFAULT_CLUSTER
from app.core.generation import watch

GPU_SECONDS = Numeric(20, 6)
KWH = Numeric(20, 9)


class IngestStatus(StrEnum):
    OK = "ok"  # rollups stored
    GAP = "gap"  # retry pending


def cluster_field(*, primary_key: bool = False):
    """The cluster a row belongs to (server default: rows written before clusters existed are the default's)."""
    return Field(default=DEFAULT_CLUSTER, primary_key=primary_key, sa_column_kwargs={"server_default": DEFAULT_CLUSTER})


class IngestHour(SQLModel, table=True):
    """One row per cluster and hour the portal has tried: `ok` (rollups stored) or `gap` (retry pending)."""

    __tablename__ = "ingest_hour"

    cluster: str = cluster_field(primary_key=True)
    hour: datetime = Field(primary_key=True, index=True)
    status: str  # an IngestStatus
    policy_version_id: int | None = Field(default=None, foreign_key="policy_version.id")
    attempts: int = 0
    last_error: str = ""
    ingested_at: datetime | None = None
    duration_s: float = 0.0
    next_retry_at: datetime | None = None


class UsageRollup(SQLModel, table=True):
    __tablename__ = "usage_rollup"
    __table_args__ = (UniqueConstraint("hour", "cluster", "pool", "tenant", "klass", "dark", name="uq_usage_rollup_key"),)

    id: int | None = Field(default=None, primary_key=True)
    hour: datetime = Field(index=True)
    cluster: str = cluster_field()
    pool: str
    tenant: str = Field(index=True)
    klass: str
    dark: bool
    gpu_seconds: Decimal = Field(sa_column=Column(GPU_SECONDS, nullable=False))
    activity_sum: float = 0.0
    activity_samples: int = 0
    policy_version_id: int = Field(foreign_key="policy_version.id")


class NamespaceUsage(SQLModel, table=True):
    """A `usage_rollup` row split by namespace (SPEC section 4: unallocated use traced to its namespaces).

    The namespaces of one (hour, pool, tenant, class, dark) add up to that usage row exactly. Hours
    ingested before this table existed have no rows: readers show them as NOT_RECORDED.
    """

    __tablename__ = "namespace_usage"
    __table_args__ = (UniqueConstraint("hour", "cluster", "pool", "namespace", "tenant", "klass", "dark",
                                       name="uq_namespace_usage_key"),)

    id: int | None = Field(default=None, primary_key=True)
    hour: datetime = Field(index=True)
    cluster: str = cluster_field()
    pool: str
    namespace: str
    tenant: str = Field(index=True)
    klass: str
    dark: bool
    gpu_seconds: Decimal = Field(sa_column=Column(GPU_SECONDS, nullable=False))
    activity_sum: float = 0.0
    activity_samples: int = 0


class PoolHourRollup(SQLModel, table=True):
    __tablename__ = "pool_hour"

    hour: datetime = Field(primary_key=True)
    cluster: str = cluster_field(primary_key=True)
    pool: str = Field(primary_key=True)
    gpus: int
    capacity_gpu_seconds: Decimal = Field(sa_column=Column(GPU_SECONDS, nullable=False))
    dark_minutes: int
    policy_version_id: int = Field(foreign_key="policy_version.id")


class PoolHourModel(SQLModel, table=True):
    """Cost inputs of one GPU model in one pool-hour."""

    __tablename__ = "pool_hour_model"

    hour: datetime = Field(primary_key=True)
    cluster: str = cluster_field(primary_key=True)
    pool: str = Field(primary_key=True)
    model: str = Field(primary_key=True)
    gpus: int
    measured_gpus: int
    measured_kwh: Decimal = Field(sa_column=Column(KWH, nullable=False))


class BreachMinuteRollup(SQLModel, table=True):
    __tablename__ = "breach_minute"
    __table_args__ = (UniqueConstraint("service", "minute_end", name="uq_breach_minute_key"),)

    id: int | None = Field(default=None, primary_key=True)
    hour: datetime = Field(index=True)
    cluster: str = cluster_field()
    service: str
    service_tenant: str
    pool: str
    minute_end: datetime
    p99_ms: Decimal = Field(sa_column=Column(Numeric(14, 3), nullable=False))


class BreachShare(SQLModel, table=True):
    """GPU-seconds a training/preprocessing tenant had in the pool during one breach minute."""

    __tablename__ = "breach_share"

    breach_id: int = Field(foreign_key="breach_minute.id", primary_key=True, ondelete="CASCADE")
    tenant: str = Field(primary_key=True)
    gpu_seconds: Decimal = Field(sa_column=Column(GPU_SECONDS, nullable=False))


class SlaUnresolvedHour(SQLModel, table=True):
    """Minutes of one service-hour whose P99 bucket straddles the red line: neither breach nor clear, never billed."""

    __tablename__ = "sla_unresolved_hour"

    hour: datetime = Field(primary_key=True)
    cluster: str = cluster_field(primary_key=True)
    service: str = Field(primary_key=True)
    service_tenant: str
    pool: str
    minutes: int


class DataQualityFinding(SQLModel, table=True):
    """What an hour's data said that was cut rather than billed (a unit above its capacity), with why."""

    __tablename__ = "data_quality_finding"

    id: int | None = Field(default=None, primary_key=True)
    hour: datetime = Field(index=True)
    cluster: str = cluster_field()
    pool: str
    kind: str  # over_capacity
    unit: str  # host/UUID[/GPU instance]
    gpu_seconds_cut: Decimal = Field(sa_column=Column(GPU_SECONDS, nullable=False))
    detail: str = ""


class UnitHourRollup(SQLModel, table=True):
    """One GPU unit's hour (a whole GPU, or a MIG instance): GPU-seconds it carried, holders, activity, memory peak.

    Written with the hour's other rollups; a pool's usage rows sum to its units' GPU-seconds (up to 1e-6 rounding).
    """

    __tablename__ = "unit_hour"
    # (pool, node, hour): a page of a pool's nodes, and the walk over its node names, read only their own rows
    __table_args__ = (Index("ix_unit_hour_pool_hour", "pool", "hour"), Index("ix_unit_hour_pool_node_hour", "pool", "node", "hour"))

    hour: datetime = Field(primary_key=True)
    cluster: str = cluster_field(primary_key=True)
    node: str = Field(primary_key=True)  # a node name of that cluster
    gpu_uuid: str = Field(primary_key=True)
    gpu_instance: str = Field(default="", primary_key=True)  # GPU_I_ID, "" for a whole GPU
    gpu_index: str = ""
    mig_profile: str = ""
    model: str = ""
    pool: str
    capacity_gpu_seconds: Decimal = Field(sa_column=Column(GPU_SECONDS, nullable=False))
    gpu_seconds: Decimal = Field(sa_column=Column(GPU_SECONDS, nullable=False))
    activity_sum: float = 0.0
    activity_samples: int = 0
    tenants: str = ""  # holder tenants in the hour, sorted, comma-separated
    fb_used_peak_mib: float | None = None  # highest DCGM_FI_DEV_FB_USED in the hour
    policy_version_id: int = Field(foreign_key="policy_version.id")


# Every table here feeds the overview, fleet and allocation answers that serve processes cache.
watch(IngestHour, UsageRollup, NamespaceUsage, PoolHourRollup, PoolHourModel, BreachMinuteRollup, BreachShare,
      SlaUnresolvedHour, DataQualityFinding, UnitHourRollup)
