"""The policy document (SPEC section 3): structure and per-field constraints.

Cross-field rules (references, ordering, MIG layouts, quota sums) live in `validation.py`;
this module only says what shape a document has.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from app.core.clusters import DEFAULT_CLUSTER

WorkloadClass = Literal["inference", "training", "preprocessing"]
UNALLOCATED = "unallocated"
UNPOOLED = "unpooled"  # the pool of GPUs on nodes no policy pool names: shown, never priced
PLATFORM = "platform"  # the account of the platform statement (unallocated use, SLA penalties' other side)
# Tenant names that other things already mean: a tenant so named would share their invoice or address.
RESERVED_TENANT_NAMES = {
    UNALLOCATED: "use no tenant claims",
    PLATFORM: "the platform statement",
    "report": "the monthly report (/billing/<month>/report)",
}


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


Fraction = Field(ge=0, le=1)


class Tenant(Strict):
    name: str = Field(min_length=1, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    department: str = Field(min_length=1)
    namespaces: list[str] = Field(default_factory=list)
    # `class` is a Python keyword: the document spells it `class`.
    klass: WorkloadClass = Field(alias="class")

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class Pool(Strict):
    name: str = Field(min_length=1)
    nodes: list[str] = Field(min_length=1)
    # Additive: the cluster whose nodes these are (CHARGEBACK_CLUSTERS); a node name means a node of
    # that cluster only. Documents without it mean the single, default cluster.
    cluster: str = Field(default=DEFAULT_CLUSTER, min_length=1)
    reserved_fraction: Decimal = Field(default=Decimal("0.30"), ge=0, le=1)
    reservations: dict[str, Decimal] = Field(default_factory=dict)
    # Additive: the pool's GPUs are nodes x gpus_per_node; its model defaults to the only priced one.
    gpus_per_node: int = Field(default=8, ge=1, le=1024)
    gpu_model: str | None = None
    # Additive: nodes whose GPUs the device plugin shares by time-slicing while dcgm-exporter runs
    # without --kubernetes-virtual-gpus (it then shows one of the sharing pods per GPU). Their use is
    # split among the pods kube-state-metrics shows holding GPUs on the node, by GPUs requested.
    time_sliced_nodes: list[str] = Field(default_factory=list)


class GpuPrice(Strict):
    purchase_price: Decimal = Field(ge=0)
    depreciation_years: Decimal = Field(gt=0)
    hosting_per_hour: Decimal = Field(ge=0)
    default_power_watts: Decimal = Field(ge=0)


class Pricing(Strict):
    currency: str = Field(default="USD", pattern=r"^[A-Z]{3}$")
    gpu_models: dict[str, GpuPrice] = Field(default_factory=dict)
    energy_price_per_kwh: Decimal = Field(ge=0)
    pue: Decimal = Field(default=Decimal("1.0"), ge=1)
    dark_time_multiplier: Decimal = Field(default=Decimal("0.6"), ge=0, le=1)


class Sla(Strict):
    service: str = Field(min_length=1)
    tenant: str
    pool: str
    requests: str = Field(min_length=1)
    latency_histogram: str = Field(min_length=1)
    p99_ms: Decimal = Field(gt=0)
    penalty_per_breach_minute: Decimal = Field(ge=0)


class PeakWindow(Strict):
    start: str = Field(pattern=r"^([01]\d|2[0-3]):[0-5]\d$")
    end: str = Field(pattern=r"^([01]\d|2[0-3]):[0-5]\d$")
    tz: str = "UTC"
    pre_suspend_minutes: int = Field(default=0, ge=0)


class Colocation(Strict):
    idle_request_interval_s: Decimal = Field(default=Decimal(3), gt=0)
    idle_window_s: int = Field(default=180, gt=0)
    check_interval_s: int = Field(default=30, gt=0)
    max_batch_shrinks: int = Field(default=2, ge=0)
    min_runtime_s: int = Field(default=1800, ge=0)
    preemption_escalation_after: int = Field(default=5, ge=1)
    reschedule_cooldown_s: int = Field(default=300, ge=0)
    peak_windows: list[PeakWindow] = Field(default_factory=list)


class Priority(Strict):
    name: str = Field(min_length=1)
    value: int
    klass: WorkloadClass = Field(alias="class")
    preemptible: bool

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class Quota(Strict):
    tenant: str
    pool: str
    guaranteed_gpus: int = Field(ge=0)
    borrowing_limit: int = Field(default=0, ge=0)
    lending_limit: int = Field(default=0, ge=0)


class MigNode(Strict):
    mode: Literal["single", "mixed"] = "mixed"
    # Additive: the node's modelName; None = its pool's gpu_model, else the only priced model.
    model: str | None = None
    # GPU index or range ("0-3", "5") -> {profile: count}
    gpus: dict[str, dict[str, int]]


class InferenceIsolation(Strict):
    memory_reserve_factor: Decimal = Field(default=Decimal("1.2"), gt=0)
    memory_buffer_fraction: Decimal = Field(default=Decimal("0.2"), ge=0, le=1)
    cpu_pinning: str = "cpuset"
    numa_affinity: bool = True


class TrainingIsolation(Strict):
    network_cap_fraction: Decimal = Field(default=Decimal("0.7"), ge=0, le=1)
    cpu_policy: str = "cfs-quota"


class Taint(Strict):
    key: str
    value: str = ""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]


class Isolation(Strict):
    mig: dict[str, MigNode] = Field(default_factory=dict)
    inference: InferenceIsolation = InferenceIsolation()
    training: TrainingIsolation = TrainingIsolation()
    node_taints: dict[str, list[Taint]] = Field(default_factory=dict)


class PolicyDocument(Strict):
    tenants: list[Tenant] = Field(default_factory=list)
    pools: list[Pool] = Field(default_factory=list)
    pricing: Pricing
    sla: list[Sla] = Field(default_factory=list)
    colocation: Colocation = Colocation()
    priorities: list[Priority] = Field(default_factory=list)
    eviction_order: list[str] = Field(default_factory=list)
    quotas: list[Quota] = Field(default_factory=list)
    isolation: Isolation = Isolation()

    # Lookups used by ingestion and rating.
    def tenant_for_namespace(self, namespace: str) -> Tenant | None:
        for tenant in self.tenants:
            if namespace in tenant.namespaces:
                return tenant
        return None

    def tenant(self, name: str) -> Tenant | None:
        return next((t for t in self.tenants if t.name == name), None)

    def pool_for_node(self, node: str) -> Pool | None:
        for pool in self.pools:
            if node in pool.nodes:
                return pool
        return None

    def pool(self, name: str) -> Pool | None:
        return next((p for p in self.pools if p.name == name), None)

    def slas_for_pool(self, pool: str) -> list[Sla]:
        return [s for s in self.sla if s.pool == pool]

    def clusters(self) -> list[str]:
        """The clusters the pools name, in order of first mention."""
        return list(dict.fromkeys(p.cluster for p in self.pools))

    def for_cluster(self, cluster: str) -> PolicyDocument:
        """The document as one cluster's ingestion reads it: that cluster's pools and their SLA services only,
        so a node another cluster's pool names is unknown here (its GPUs go to `unpooled`, for this cluster)."""
        pools = [p for p in self.pools if p.cluster == cluster]
        if len(pools) == len(self.pools):
            return self
        names = {p.name for p in pools}
        return self.model_copy(update={
            "pools": pools, "sla": [s for s in self.sla if s.pool in names],
            "quotas": [q for q in self.quotas if q.pool in names],
        })

    def cluster_of_pool(self, pool: str) -> str | None:
        found = self.pool(pool)
        return None if found is None else found.cluster

    def to_data(self) -> dict:
        """A plain, JSON/YAML-ready dict using the document's own spelling (`class`)."""
        return self.model_dump(mode="json", by_alias=True)

    def to_values(self) -> dict:
        """Plain data in the document's spelling with numbers as numbers (Decimal, int): what pages diff and show."""
        return self.model_dump(mode="python", by_alias=True)
