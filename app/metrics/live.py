"""The live fleet: every node, GPU and MIG instance right now, from samples at most a minute old.

A refresh reads a fixed number of instant queries through the one Prometheus client (`PromReader`): the raw
samples of the last minute of the device metrics (one query, names kept), and, when the policy has SLA
services, their requests over the idle window and latency buckets over 5 minutes (one query for all of
them). On the embedded default the simulator answers the same reading from its state at that instant (its
dcgm-exporter exposition, parsed). One pure function turns a reading into the view, reading the holder with
the ingestion's own rule (`labels.workload_of` over `labels.target_pods`: exported_* labels, honor_labels, the
exporter's own pod = free), the dark-time rule of attribution and the P99-bucket verdict of histograms.
Answers are cached a few seconds across requests, and concurrent refreshes share one read.
"""

from __future__ import annotations

import json
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Protocol

from app.core.cache import TtlCache
from app.core.clusters import ClusterConfig
from app.core.errors import AppError
from app.core.timeutil import SECONDS_PER_MINUTE as MINUTE_S
from app.metrics import labels as rules
from app.metrics.attribution import _classify, dark_minutes, hour_of
from app.metrics.histograms import p99_bucket, parse_le, verdict
from app.metrics.prometheus_api import PromReader
from app.metrics.types import OCCUPANCY_METRICS, ServiceMinutes, SourceBatch
from app.metrics.windows import MINUTE
from app.policy.document import UNPOOLED, PolicyDocument
from app.policy.validation import _gpu_range

GPU_UTIL, GR_ENGINE_ACTIVE = OCCUPANCY_METRICS
FB_USED, FB_FREE, POWER = "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_POWER_USAGE"
LIVE_METRICS = (GPU_UTIL, GR_ENGINE_ACTIVE, FB_USED, FB_FREE, POWER)
# Raw samples of the last minute (a range selector keeps the metric name; 1 ms short so exactly one minute).
DEVICE_QUERY = '{__name__=~"' + "|".join(LIVE_METRICS) + '"}[' + MINUTE + "]"
P99_WINDOW = "5m"
# Series of one unit whose last sample is this much older than the unit's newest are no longer current.
CURRENT_S = 5.0
ACTIVITY_SCALE = {GPU_UTIL: 0.01, GR_ENGINE_ACTIVE: 1.0}


@dataclass
class ServiceNow:
    """An SLA service's signals now: requests over the idle window, cumulative latency buckets over 5 minutes."""

    requests_in_window: float | None = None
    buckets: list[tuple[Decimal, float]] = field(default_factory=list)


@dataclass
class LiveReading:
    """What a source returned for one instant: (labels with __name__, sample time, value) and SLA signals."""

    at: float
    series: list[tuple[dict[str, str], float, float]]
    services: dict[str, ServiceNow] = field(default_factory=dict)
    queries: int = 0  # queries this reading cost


class LiveSource(Protocol):
    key: str

    def read(self, *, policy: PolicyDocument, at: float) -> LiveReading: ...


def services_query(policy: PolicyDocument) -> str | None:
    """One PromQL expression for every SLA service's requests (idle window) and buckets (5 m), tagged by service."""
    parts = []
    window = f"{policy.colocation.idle_window_s}s"
    for sla in policy.sla:
        name = json.dumps(sla.service)
        parts.append(f'label_replace(label_replace(sum(increase({sla.requests}[{window}])), "chargeback_service", {name}, "", ""),'
                     ' "chargeback_signal", "requests", "", "")')
        parts.append(f'label_replace(label_replace(sum by (le) (increase({sla.latency_histogram}[{P99_WINDOW}])),'
                     f' "chargeback_service", {name}, "", ""), "chargeback_signal", "latency", "", "")')
    return " or ".join(parts) if parts else None


@dataclass
class PrometheusLive:
    """The live reading from Prometheus (or Thanos, Mimir, VictoriaMetrics): two instant queries at most."""

    url: str
    timeout_s: float = 10.0
    access: ClusterConfig | None = None  # the cluster's auth and TLS options

    @property
    def key(self) -> str:
        return f"prometheus:{self.url}"

    def read(self, *, policy: PolicyDocument, at: float) -> LiveReading:
        reader = PromReader(self.url, timeout_s=self.timeout_s, access=self.access)
        series = [(m, *points[-1]) for m, points in reader.query(DEVICE_QUERY, at) if points]
        reading = LiveReading(at=at, series=series, queries=1)
        expr = services_query(policy)
        if expr:
            reading.queries += 1
            for m, points in reader.query(expr, at):
                service = reading.services.setdefault(m.get("chargeback_service", ""), ServiceNow())
                value = points[-1][1] if points else None
                if m.get("chargeback_signal") == "requests":
                    service.requests_in_window = value
                elif value is not None and parse_le(m.get("le", "")) is not None:
                    service.buckets.append((parse_le(m["le"]), value))
        return reading


# ---- the view ----


@dataclass
class LiveHolder:
    tenant: str
    klass: str
    namespace: str
    pod: str


@dataclass
class LiveUnit:
    gpu_instance: str  # "" for a whole GPU
    profile: str
    activity: float | None = None  # 0..1
    holders: list[LiveHolder] = field(default_factory=list)
    fb_used_mib: float | None = None
    fb_total_mib: float | None = None
    sample_at: float = 0.0

    @property
    def occupied(self) -> bool:
        return bool(self.holders)


@dataclass
class LiveGpu:
    index: str
    uuid: str
    model: str
    power_w: float | None = None
    units: list[LiveUnit] = field(default_factory=list)


@dataclass
class LiveNode:
    name: str
    pool: str
    gpus: list[LiveGpu] = field(default_factory=list)
    mig_observed: dict[str, dict[str, int]] = field(default_factory=dict)  # GPU index -> profile -> count
    mig_policy: dict[str, dict[str, int]] = field(default_factory=dict)
    drift: list[str] = field(default_factory=list)  # GPU indices whose observed layout differs from the policy's


@dataclass(frozen=True)
class PoolState:
    """What a pool is doing now, named by what it means for the bill."""

    key: str  # unpooled | idle | no-reservation | serving | dark
    label: str
    meaning: str


@dataclass
class LivePool:
    name: str
    dark: bool | None  # this minute is dark time (SPEC 4); None: unpooled, no pool to be dark
    units: int = 0
    occupied: int = 0
    gpus: int = 0
    reserved_fraction: Decimal = Decimal(0)
    sla_services: int = 0  # the policy's SLA services in this pool
    inference_active: bool | None = None  # any of them above the idle threshold now; None: no SLA service
    dark_multiplier: Decimal | None = None

    @property
    def state(self) -> PoolState:
        return pool_state(self)


def pool_state(pool: LivePool) -> PoolState:
    """The pool's state from what is measured now: units occupied, its SLA services' traffic, its reservation.

    No unit occupied is idle whatever the traffic says; a pool that neither reserves capacity nor has an SLA
    service has no dark time, so it is never "busy" or "dark" (SPEC 4, dark time). Pure.
    """
    if pool.dark is None:
        return PoolState("unpooled", "Unpooled", "no pool names these nodes: no reservation, use shown but never priced")
    if pool.occupied == 0:
        traffic = " though its SLA services report requests" if pool.inference_active else ""
        return PoolState("idle", "Idle", f"no unit is occupied{traffic}: nothing is billed as use this minute")
    if pool.sla_services == 0 and pool.reserved_fraction == 0:
        return PoolState("no-reservation", "In use, no reservation",
                         "no inference reserve and no SLA service: every GPU-second is billed at the full rate")
    rate = f" (× {pool.dark_multiplier.normalize():f})" if pool.dark_multiplier is not None else ""
    if pool.dark:
        why = ("its SLA services are idle" if pool.sla_services else
               "it reserves capacity for inference but names no SLA service to watch")
        return PoolState("dark", "Dark time", f"{why}: training and preprocessing here pay the dark-time rate{rate}")
    return PoolState("serving", "Inference serving",
                     "its SLA services are taking requests: training and preprocessing here pay the full rate")


@dataclass
class LiveService:
    service: str
    tenant: str
    pool: str
    state: str  # breach | clear | unresolved | no traffic
    bucket: tuple[Decimal, Decimal] | None
    red_line_ms: Decimal
    requests_in_window: float | None

    @property
    def p99_text(self) -> str:
        """P99 as a number: at most the upper bound of its bucket ("≤ 300 ms"), above the last finite one ("> 5,000 ms")."""
        if self.bucket is None:
            return ""
        lower, upper = self.bucket
        return f"> {_ms(lower)} ms" if upper.is_infinite() else f"≤ {_ms(upper)} ms"

    @property
    def bucket_text(self) -> str:
        """The histogram bucket that holds P99 ("(0 ms, 300 ms]"), the footnote to `p99_text`; each bound carries
        its unit so that a thousands separator never reads as the interval's comma ("(5,000 ms, ∞)")."""
        if self.bucket is None:
            return ""
        lower, upper = self.bucket
        return f"({_ms(lower)} ms, ∞)" if upper.is_infinite() else f"({_ms(lower)} ms, {_ms(upper)} ms]"

    @property
    def verdict_text(self) -> str:
        """The state against the red line, in words."""
        return {"breach": "over the red line", "clear": "within the red line",
                "unresolved": "unresolved"}.get(self.state, self.state)


@dataclass
class LiveFleet:
    at: float
    newest_sample: float | None
    nodes: list[LiveNode]
    pools: list[LivePool]
    services: list[LiveService]
    memory_by_tenant: dict[str, float]  # FB_USED now (MiB) per tenant holding units
    queries: int = 0

    @property
    def units(self) -> int:
        return sum(len(g.units) for n in self.nodes for g in n.gpus)


def _policy_layout(policy: PolicyDocument, node: str) -> dict[str, dict[str, int]]:
    mig = policy.isolation.mig.get(node)
    out: dict[str, dict[str, int]] = {}
    if mig is None:
        return out
    for key, profiles in mig.gpus.items():
        span = _gpu_range(key)
        if span is None:
            continue
        for i in range(span[0], span[1] + 1):
            out[str(i)] = {p: c for p, c in profiles.items() if c > 0}
    return out


def live_fleet(reading: LiveReading, policy: PolicyDocument,
               exporter: rules.ExporterIdentity = rules.DEFAULT_EXPORTER) -> LiveFleet:
    """The view of one reading. Pure."""
    # Copies of a series from other jobs or HA replicas count once: the newest sample wins.
    newest: dict[tuple, tuple[dict, float, float]] = {}
    for m, t, v in reading.series:
        key = rules.dedup_key(m) + (("__name__", m.get("__name__", "")),)
        if key not in newest or t > newest[key][1]:
            newest[key] = (m, t, v)
    series = list(newest.values())
    targets = rules.target_pods(m for m, _, _ in series)
    units: dict[tuple, LiveUnit] = {}
    gpus: dict[tuple, LiveGpu] = {}
    occupancy: dict[tuple, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    # In time order, so that for memory and power the newest sample wins (a pod's series and the free series
    # may both lie in the minute).
    for m, t, v in sorted(series, key=lambda item: item[1]):
        name = m.get("__name__", "")
        host, uuid = rules.host_of(m), m.get("UUID") or m.get("uuid", "")
        gpu = gpus.get((host, uuid))
        if gpu is None:
            gpu = gpus[(host, uuid)] = LiveGpu(index=m.get("gpu", ""), uuid=uuid, model=m.get("modelName", ""))
        if name == POWER:
            gpu.power_w = v
            continue
        instance = m.get("GPU_I_ID", "")
        unit = units.get((host, uuid, instance))
        if unit is None:
            unit = units[(host, uuid, instance)] = LiveUnit(gpu_instance=instance, profile=m.get("GPU_I_PROFILE", ""))
            gpu.units.append(unit)
        if name == FB_USED:
            unit.fb_used_mib = v  # samples in time order: the newest is kept
        elif name == FB_FREE:
            unit.fb_total_mib = v  # completed below, once FB_USED is known
        else:
            occupancy[(host, uuid, instance)][name].append((m, t, v))
    memory: dict[str, float] = defaultdict(float)
    for key, unit in units.items():
        if unit.fb_total_mib is not None:
            unit.fb_total_mib += unit.fb_used_mib or 0.0
        by_metric = occupancy.get(key, {})
        metric = GPU_UTIL if GPU_UTIL in by_metric else GR_ENGINE_ACTIVE if GR_ENGINE_ACTIVE in by_metric else None
        if metric is None:
            continue
        found = by_metric[metric]
        latest = max(t for _, t, _ in found)
        current = [(m, t, v) for m, t, v in found if t >= latest - CURRENT_S]
        unit.sample_at = latest
        unit.activity = max(v for _, _, v in current) * ACTIVITY_SCALE[metric]
        for m, _, _ in current:
            workload = rules.workload_of(m, exporter, targets)
            if workload is None:
                continue
            tenant, klass = _classify(policy, workload.namespace, m.get("workload_class", ""))
            holder = LiveHolder(tenant=tenant, klass=klass, namespace=workload.namespace, pod=workload.pod)
            if holder not in unit.holders:
                unit.holders.append(holder)
        for tenant in {h.tenant for h in unit.holders}:
            memory[tenant] += unit.fb_used_mib or 0.0

    nodes: dict[str, LiveNode] = {}
    for (host, _), gpu in sorted(gpus.items(), key=lambda kv: (kv[0][0], _num(kv[1].index))):
        pool = policy.pool_for_node(host)
        node = nodes.get(host)
        if node is None:
            node = nodes[host] = LiveNode(name=host, pool=pool.name if pool else UNPOOLED,
                                          mig_policy=_policy_layout(policy, host))
        gpu.units.sort(key=lambda u: _num(u.gpu_instance))
        node.gpus.append(gpu)
        observed = dict(Counter(u.profile for u in gpu.units if u.gpu_instance))
        if observed:
            node.mig_observed[gpu.index] = observed
        if observed != node.mig_policy.get(gpu.index, {}):
            node.drift.append(gpu.index)

    pools: dict[str, LivePool] = {}
    minute = int(reading.at) // MINUTE_S * MINUTE_S
    batch = SourceBatch(start=hour_of(minute), end=hour_of(minute) + 3600, services={
        name: ServiceMinutes(service=name, requests_in_window={minute: s.requests_in_window})
        for name, s in reading.services.items() if s.requests_in_window is not None})
    for node in nodes.values():
        pool = pools.get(node.pool)
        if pool is None:
            pool = pools[node.pool] = _live_pool(policy, node.pool, batch, minute)
        pool.gpus += len(node.gpus)
        for gpu in node.gpus:
            pool.units += len(gpu.units)
            pool.occupied += sum(1 for u in gpu.units if u.occupied)

    services = []
    for sla in policy.sla:
        signals = reading.services.get(sla.service, ServiceNow())
        bucket = p99_bucket(signals.buckets) if signals.buckets else None
        state = "no traffic" if bucket is None else verdict(bucket, Decimal(sla.p99_ms) / 1000)
        services.append(LiveService(service=sla.service, tenant=sla.tenant, pool=sla.pool, state=state, bucket=bucket,
                                    red_line_ms=Decimal(sla.p99_ms), requests_in_window=signals.requests_in_window))
    stamps = [t for _, t, _ in series]
    return LiveFleet(at=reading.at, newest_sample=max(stamps) if stamps else None, nodes=list(nodes.values()),
                     pools=sorted(pools.values(), key=lambda p: p.name), services=services,
                     memory_by_tenant=dict(memory), queries=reading.queries)


def _live_pool(policy: PolicyDocument, name: str, batch: SourceBatch, minute: int) -> LivePool:
    """A pool's reservation and its inference traffic this minute (the dark-time rule of attribution)."""
    definition = policy.pool(name)
    if definition is None:
        return LivePool(name=name, dark=None)
    dark = minute in dark_minutes(batch, hour=hour_of(minute), policy=policy, pool=name)
    slas = policy.slas_for_pool(name)
    return LivePool(name=name, dark=dark, reserved_fraction=definition.reserved_fraction, sla_services=len(slas),
                    inference_active=(not dark) if slas else None,
                    dark_multiplier=policy.pricing.dark_time_multiplier)


def _ms(seconds: Decimal) -> str:
    """Seconds as milliseconds with thousands separators and no trailing zeros: 0.3 -> "300", 0.0025 -> "2.5"."""
    return f"{(seconds * 1000).normalize():,f}"


def _num(text: str) -> tuple:
    return (0, int(text), "") if text.isdigit() else (1, 0, text)


# ---- a few seconds of cache across requests, one read at a time ----

CACHE_TTL_S = 5.0


class LiveCache(TtlCache):
    """The newest view per (source, policy version), reused for `ttl_s`; concurrent callers wait for one read.

    An `AppError` (Prometheus down, a partial answer) is kept as long as a view: an outage costs one wait per TTL.
    """

    def __init__(self, ttl_s: float = CACHE_TTL_S, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(ttl_s=ttl_s, max_entries=16, single_flight=True, clock=clock)

    def get(self, key, compute):
        def guarded():
            try:
                return compute()
            except AppError as exc:
                return exc

        value = super().get(key, guarded)
        if isinstance(value, AppError):
            raise value
        return value
