"""What a metrics source hands to attribution, and what attribution hands to storage and rating.

Both the Prometheus source and the built-in simulator produce a `SourceBatch`; `attribution`
turns one hour of it into an `HourRollup` with no I/O. Time keys are epoch seconds (UTC) of a
bucket's *end*: a sample at time t belongs to the bucket (end - width, end], the same rule
Prometheus applies to a range selector of width - 1 ms evaluated at `end`, in 2.x and 3.x alike.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Protocol

from app.policy.document import PolicyDocument

OCCUPANCY_METRICS = ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_PROF_GR_ENGINE_ACTIVE")


@dataclass(frozen=True)
class SeriesLabels:
    """The dcgm-exporter labels attribution needs (`Hostname` or `hostname` folded into host)."""

    host: str
    uuid: str  # the physical GPU's UUID (MIG instances carry their parent's)
    gpu: str  # the `gpu` index label
    model: str  # modelName
    gpu_instance: str = ""  # GPU_I_ID, "" for a whole GPU
    mig_profile: str = ""  # GPU_I_PROFILE, e.g. "3g.40gb"
    namespace: str = ""
    pod: str = ""
    container: str = ""
    workload_class: str = ""  # optional per-pod override, from a `workload_class` label
    vgpu: str = ""  # time-slicing replica (--kubernetes-virtual-gpus): one series per pod and replica

    @property
    def unit(self) -> tuple[str, str, str]:
        return (self.host, self.uuid, self.gpu_instance)

    @property
    def physical_gpu(self) -> tuple[str, str]:
        return (self.host, self.uuid)


@dataclass
class OccupancySeries:
    labels: SeriesLabels
    metric: str  # one of OCCUPANCY_METRICS
    samples: dict[int, int] = field(default_factory=dict)  # minute end -> samples in that minute
    activity: dict[int, float] = field(default_factory=dict)  # hour end -> sum of activity (0..1) over its samples
    # Additive: True for a series that only says a unit reported (no pod): `samples` is then keyed
    # by hour end (samples in that hour). Enough for capacity and the metric choice, at 1/60 the points.
    hourly: bool = False
    # Seconds one sample stands for: inferred from the data per scrape target (0 = unknown, the
    # caller's override or default applies).
    interval_s: int = 0
    scrape: tuple = ()  # the job/instance/replica labels of the scrape that stored it (copies are merged)


@dataclass
class GpuEnergy:
    host: str
    uuid: str
    model: str
    energy_mj: dict[int, float] = field(default_factory=dict)  # hour end -> counter delta over the hour (mJ)
    power_w: dict[int, float] = field(default_factory=dict)  # hour end -> mean POWER_USAGE (W)


@dataclass
class ServiceMinutes:
    service: str
    requests_in_window: dict[int, float] = field(default_factory=dict)  # minute end -> requests over trailing idle window
    p99_s: dict[int, float] = field(default_factory=dict)  # minute end -> P99 over trailing 5 m (seconds); absent = no traffic
    # minute end -> (lower, upper] bucket holding that P99, in seconds: what decides a breach when present
    p99_bucket: dict[int, tuple[Decimal, Decimal]] = field(default_factory=dict)


@dataclass
class SourceBatch:
    start: int  # epoch seconds, hour aligned
    end: int
    occupancy: list[OccupancySeries] = field(default_factory=list)
    energy: list[GpuEnergy] = field(default_factory=list)
    services: dict[str, ServiceMinutes] = field(default_factory=dict)
    # hour start -> why the source cannot vouch for that hour (e.g. a node's exporter went silent):
    # ingestion records these hours as gaps instead of rolling them up.
    gaps: dict[int, str] = field(default_factory=dict)
    # Time-sliced nodes only (policy `time_sliced_nodes`): node -> minute end -> {(namespace, pod): GPUs
    # requested}, from kube-state-metrics.
    gpu_holders: dict[str, dict[int, dict[tuple[str, str], float]]] = field(default_factory=dict)
    # Unit (host, UUID, GPU_I_ID) -> hour end -> highest DCGM_FI_DEV_FB_USED (MiB) in the hour.
    fb_peak: dict[tuple[str, str, str], dict[int, float]] = field(default_factory=dict)


class MetricsSource(Protocol):
    """Anything that can answer for whole hours [start, end). Raises `Unavailable` when it cannot."""

    def fetch(self, *, start: datetime, end: datetime, policy: PolicyDocument) -> SourceBatch: ...


# ---- what attribution produces (one hour) ----


@dataclass(frozen=True)
class UsageRow:
    pool: str
    tenant: str
    klass: str  # inference | training | preprocessing | unallocated
    dark: bool
    gpu_seconds: Decimal  # quantized to 1e-6
    activity_sum: float = 0.0  # for efficiency: sum of activity over occupied samples
    activity_samples: int = 0


@dataclass(frozen=True)
class UnitRow:
    """One GPU unit's hour: what it carried (each unit once, never above its capacity), who held it, its memory peak."""

    pool: str
    node: str
    gpu_uuid: str
    gpu_index: str
    gpu_instance: str  # GPU_I_ID, "" for a whole GPU
    mig_profile: str
    model: str
    capacity_gpu_seconds: Decimal  # 3600 x the unit's share of its GPU
    gpu_seconds: Decimal  # quantized to 1e-6; the pool's usage rows sum to these, up to rounding
    activity_sum: float = 0.0
    activity_samples: int = 0
    tenants: tuple[str, ...] = ()  # holder tenants in the hour, sorted
    fb_used_peak_mib: float | None = None


@dataclass(frozen=True)
class NamespaceRow:
    """The part of one `UsageRow` a namespace used: a row's namespaces add up to its GPU-seconds exactly."""

    pool: str
    namespace: str
    tenant: str
    klass: str
    dark: bool
    gpu_seconds: Decimal  # micro-GPU-seconds, split so the row's namespaces sum to the row
    activity_sum: float = 0.0
    activity_samples: int = 0


@dataclass(frozen=True)
class ModelEnergy:
    model: str
    gpus: int
    measured_gpus: int  # GPUs whose kWh came from the energy counter or mean power
    measured_kwh: Decimal  # kWh of the measured GPUs; the rest are priced at default_power_watts


@dataclass(frozen=True)
class PoolHour:
    pool: str
    gpus: int
    capacity_gpu_seconds: Decimal
    dark_minutes: int
    models: tuple[ModelEnergy, ...]


@dataclass(frozen=True)
class BreachMinute:
    service: str
    service_tenant: str
    pool: str
    minute_end: int  # epoch seconds
    p99_ms: Decimal
    colocated: tuple[tuple[str, Decimal], ...]  # (training/preprocessing tenant, gpu_seconds in that minute)


@dataclass(frozen=True)
class DataFinding:
    """Something the source said that was cut rather than billed (e.g. a unit above its capacity)."""

    kind: str  # over_capacity
    pool: str
    unit: str  # host/UUID[/GPU instance]
    gpu_seconds_cut: Decimal  # quantized to 1e-6
    detail: str


@dataclass
class HourRollup:
    hour: int  # epoch seconds of the hour's start
    usage: list[UsageRow] = field(default_factory=list)
    pools: list[PoolHour] = field(default_factory=list)
    breaches: list[BreachMinute] = field(default_factory=list)
    # (service, service tenant, pool) -> minutes whose P99 bucket straddles the red line: not billed, shown
    unresolved: dict[tuple[str, str, str], int] = field(default_factory=dict)
    findings: list[DataFinding] = field(default_factory=list)
    units: list[UnitRow] = field(default_factory=list)  # per GPU unit (unit_hour)
    namespaces: list[NamespaceRow] = field(default_factory=list)  # `usage` per namespace
