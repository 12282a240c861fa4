"""Each pool-hour's occupied GPU-seconds, GPUs and kWh, derived again from per-series hourly figures. Pure.

How it differs from ingestion (prometheus_source.py + attribution.py), on purpose:
- Occupancy is counted per series per whole hour, not per minute. A unit's samples in an hour are the
  union of its pods' samples: at each scrape the exporter prints either the free series or the pods'
  series, so that union is the scrapes of the hour less the free series' samples whenever the pods'
  counts add up to more than that (time-slicing, vgpu replicas), and exactly their sum otherwise.
  Ingestion's per-minute split under-counts a unit handed from one pod to the next inside a minute;
  this count does not, and reports those hours.
- A scrape target's interval is the hour divided by its units' usual number of samples in a whole
  hour (the most frequent count over the range, ties to the larger), or, with too little evidence,
  the median spacing of one of its series' raw samples; copies of a unit from other jobs or HA
  replicas are each counted alone and the largest wins for the hour.
- Mean power is SPEC section 4's literally: every POWER_USAGE sample of a GPU in the hour, over all
  its series, summed and divided by their count. The energy counter's increase is the difference of
  the GPU's latest counter value at the two hour ends, or, when a series reset, appeared or fell
  behind, the sum of the steps between its raw samples (a drop is a restart from zero).

What is shared with ingestion is rules, not computation: which label names a workload and which pod is
the exporter's own (`labels.workload_of`, `labels.target_pods`, `labels.host_of`: SPEC section 2, the
doctor applies them too), which labels only name a scrape (`labels.SCRAPE_LABELS`), a MIG profile's
share of its GPU (`gpus.unit_fraction`: SPEC section 4), and the policy's node -> pool and namespace
-> tenant maps. A mistake in one of those rules would be in both figures and go unseen here.
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction

from app.core.timeutil import SECONDS_PER_HOUR as HOUR_S
from app.metrics import labels as rules
from app.metrics.reconcile.source import SourceHours
from app.metrics.types import OCCUPANCY_METRICS
from app.policy import gpus
from app.policy.document import UNALLOCATED, UNPOOLED, PolicyDocument

GPU_UTIL = OCCUPANCY_METRICS[0]
MJ_PER_KWH = 3_600_000_000
Unit = tuple[str, str, str]  # host, GPU UUID, GPU instance ("" for a whole GPU)
Gpu = tuple[str, str]  # host, GPU UUID


@dataclass
class PoolFigures:
    pool: str
    gpus: int = 0
    gpu_seconds: Fraction = Fraction(0)
    kwh: Fraction = Fraction(0)
    tenants: dict[str, Fraction] = field(default_factory=dict)
    # False when a unit was shared in the hour or the pool splits time-sliced nodes by kube-state-metrics:
    # the tenants' shares then rest on more than sample counts and are not compared.
    tenants_exact: bool = True
    unpriced: set[str] = field(default_factory=set)  # unmeasured GPU models without default watts


@dataclass
class DerivedHour:
    hour: int  # hour start, epoch seconds
    pools: dict[str, PoolFigures] = field(default_factory=dict)
    reporting: set[str] = field(default_factory=set)  # hosts with any occupancy sample in the hour


@dataclass(frozen=True)
class OccSeries:
    """One occupancy series, its labels read once."""

    unit: Unit
    labels: Mapping[str, str]
    model: str
    fraction: Fraction
    metric: str
    scrape: tuple[str, ...]
    namespace: str | None  # None: a free unit (no pod, or the exporter's own)
    counts: Mapping[int, float]


def unit_fraction(model: str, profile: str) -> Fraction:
    """A unit's share of its GPU; an unreadable profile counts as a whole GPU (as ingestion bills it)."""
    try:
        return gpus.unit_fraction(model, profile or None)
    except ValueError:
        return Fraction(1)


def occupancy_of(data: SourceHours, exporter: rules.ExporterIdentity = rules.DEFAULT_EXPORTER) -> list[OccSeries]:
    """The occupancy series with their labels read once (one fetch serves many hours)."""
    every = [s.labels for series in data.occupancy.values() for s in series]
    targets = rules.target_pods(every)
    out = []
    for metric, series in data.occupancy.items():
        for s in series:
            m = s.labels
            workload = rules.workload_of(m, exporter, targets)
            model, profile = m.get("modelName", ""), m.get("GPU_I_PROFILE", "")
            out.append(OccSeries(unit=(rules.host_of(m, data.pod_nodes), m.get("UUID", ""), m.get("GPU_I_ID", "")), labels=m,
                            model=model, fraction=unit_fraction(model, profile), metric=metric,
                            scrape=tuple(m.get(k, "") for k in rules.SCRAPE_LABELS),
                            namespace=None if workload is None else workload.namespace, counts=s.values))
    return out


def _chosen(occ: Iterable[OccSeries], hour_end: int) -> dict[Unit, str]:
    """Per unit, the metric it reports in the hour: GPU_UTIL where it does, else GR_ENGINE_ACTIVE."""
    chosen: dict[Unit, str] = {}
    for o in occ:
        if o.counts.get(hour_end, 0) > 0 and (o.metric == GPU_UTIL or o.unit not in chosen):
            chosen[o.unit] = o.metric
    return chosen


def evidence(occ: list[OccSeries]) -> dict[tuple, Counter]:
    """Per scrape target: how often each number of samples a unit had in an hour occurs (its chosen metric)."""
    seen: dict[tuple, Counter] = defaultdict(Counter)
    hour_ends = sorted({t for o in occ for t in o.counts})
    for t in hour_ends:
        chosen = _chosen(occ, t)
        per_unit: dict[tuple, float] = defaultdict(float)
        for o in occ:
            if chosen.get(o.unit) == o.metric and o.counts.get(t):
                per_unit[(o.scrape, o.unit)] += o.counts[t]
        for (scrape, _), n in per_unit.items():
            seen[scrape][int(n)] += 1
    return seen


def scrapes_per_hour(counts: Counter) -> tuple[int, int]:
    """(the usual number of a unit's samples in an hour, how many unit-hours had it): most frequent, ties to the larger."""
    n, support = max(counts.items(), key=lambda kv: (kv[1], kv[0]))
    return n, support


def thin_evidence(occ: list[OccSeries], seen: Mapping[tuple, Counter]) -> dict[tuple, tuple[OccSeries, int]]:
    """Scrape targets whose usual count rests on fewer than two unit-hours, each with its fullest series-hour
    (their interval is read from that series' raw samples)."""
    thin = {scrape for scrape, counts in seen.items() if scrapes_per_hour(counts)[1] < 2}
    out: dict[tuple, tuple[OccSeries, int]] = {}
    for o in occ:
        if o.scrape in thin:
            for t, n in o.counts.items():
                if o.scrape not in out or n > out[o.scrape][0].counts[out[o.scrape][1]]:
                    out[o.scrape] = (o, t)
    return out


def reporting_at(occ: Iterable[OccSeries], hour_end: int) -> set[str]:
    """Hosts with any occupancy sample in the hour ending at `hour_end`."""
    return {o.unit[0] for o in occ if o.counts.get(hour_end, 0) > 0}


def spacing(timestamps: Iterable[float]) -> int | None:
    """Median seconds between consecutive raw samples (None with fewer than two)."""
    ts = sorted(set(timestamps))
    if len(ts) < 2:
        return None
    return max(1, round(statistics.median(b - a for a, b in zip(ts, ts[1:]))))


def intervals(seen: Mapping[tuple, Counter], raw_spacing: Mapping[tuple, int], override_s: int | None) -> dict[tuple, int]:
    """Seconds per sample of each scrape target: the override, else raw spacing where read, else the hour / usual count."""
    out = {}
    for scrape, counts in seen.items():
        if override_s:
            out[scrape] = override_s
        elif scrape in raw_spacing:
            out[scrape] = raw_spacing[scrape]
        else:
            out[scrape] = max(1, round(HOUR_S / scrapes_per_hour(counts)[0]))
    return out


# ---- energy ----


def _gpu_series(series: Iterable, pod_nodes: Mapping[str, str]) -> dict[Gpu, list]:
    out: dict[Gpu, list] = defaultdict(list)
    for s in series:
        out[(rules.host_of(s.labels, pod_nodes), s.labels.get("UUID", ""))].append(s)
    return out


def counter_needs_raw(data: SourceHours, hour_ends: Iterable[int]) -> list[tuple[Gpu, int]]:
    """(GPU, hour end) whose counter increase the hourly values cannot tell: a reset, a first hour, a series behind."""
    last = _gpu_series(data.energy_last, data.pod_nodes)
    resets = _gpu_series(data.energy_resets, data.pod_nodes)
    out = []
    for gpu, series in last.items():
        for t in hour_ends:
            now = [s.values[t] for s in series if t in s.values]
            if not now:
                continue
            before = [s.values[t - HOUR_S] for s in series if t - HOUR_S in s.values]
            reset = any(s.values.get(t, 0) > 0 for s in resets.get(gpu, ()))
            if not before or reset or min(now) < max(before):
                out.append((gpu, t))
    return out


def increase(before: float | None, samples: Iterable[tuple[float, float]]) -> float | None:
    """A counter's increase over raw samples (time-ordered here), from `before` (else its first sample); a drop is a restart from zero."""
    values = [v for _, v in sorted(dict(samples).items())]  # one value per timestamp (copies of one counter agree)
    if before is None:
        if not values:
            return None
        before, values = values[0], values[1:]
    total, previous = 0.0, before
    for v in values:
        total += v - previous if v >= previous else v
        previous = v
    return total


def gpu_kwh(data: SourceHours, hour_end: int, raw_increase: Mapping[tuple[Gpu, int], float]) -> dict[Gpu, Fraction]:
    """kWh of each GPU measured in the hour: its counter's increase, else its mean power over all its series."""
    out: dict[Gpu, Fraction] = {}
    for gpu, series in _gpu_series(data.energy_last, data.pod_nodes).items():
        if (gpu, hour_end) in raw_increase:
            mj = raw_increase[(gpu, hour_end)]
        else:
            now = [s.values[hour_end] for s in series if hour_end in s.values]
            before = [s.values[hour_end - HOUR_S] for s in series if hour_end - HOUR_S in s.values]
            if not now or not before:
                continue
            mj = max(now) - max(before)
        out[gpu] = Fraction(mj) / MJ_PER_KWH
    sums = _gpu_series(data.power_sum, data.pod_nodes)
    for gpu, series in _gpu_series(data.power_count, data.pod_nodes).items():
        if gpu in out:
            continue
        count = sum(Fraction(s.values[hour_end]) for s in series if hour_end in s.values)
        if count:
            total = sum(Fraction(s.values[hour_end]) for s in sums.get(gpu, ()) if hour_end in s.values)
            out[gpu] = total / count / 1000  # mean W x 1 h
    return out


# ---- one hour ----


def _unit_use(parts: Mapping[tuple, dict], interval: Mapping[tuple, int]) -> dict[Unit, tuple[Fraction, dict[str, Fraction], bool]]:
    """Per unit: (GPU-seconds it carried, its namespaces' shares, whether the shares are exact)."""
    best: dict[Unit, tuple[Fraction, dict[str, Fraction], bool]] = {}
    for (scrape, unit), part in parts.items():
        per_hour = Fraction(HOUR_S, interval[scrape])  # scrapes of a whole hour
        pods: list[tuple[str, float]] = part["pods"]
        if not pods:
            continue
        total = sum((Fraction(c) for _, c in pods), Fraction(0))
        shared = total + part["free"] > per_hour
        samples = total
        if shared:  # pods held the unit at the same scrapes: the union is what the free series left
            samples = min(samples, max(per_hour - Fraction(part["free"]), Fraction(max(c for _, c in pods))))
        seconds = samples * interval[scrape] * part["fraction"]
        capacity = HOUR_S * part["fraction"]
        if seconds > capacity:  # never above the unit's capacity (ingestion records the excess as a finding)
            seconds, shared = capacity, True
        shares: dict[str, Fraction] = defaultdict(Fraction)
        for namespace, c in pods:
            shares[namespace] += seconds * Fraction(c) / total
        if unit not in best or seconds > best[unit][0]:
            best[unit] = (seconds, dict(shares), not shared)
    return best


def derive_hour(occ: list[OccSeries], *, hour: int, policy: PolicyDocument, interval: Mapping[tuple, int],
                kwh: Mapping[Gpu, Fraction]) -> DerivedHour:
    """The hour [hour, hour + 3600) per pool: GPUs seen, occupied GPU-seconds, tenants' GPU-seconds, kWh as rated."""
    end = hour + HOUR_S
    chosen = _chosen(occ, end)
    out = DerivedHour(hour=hour)
    pool_of: dict[str, str] = {}
    models: dict[Gpu, str] = {}
    parts: dict[tuple, dict] = {}
    for o in occ:
        n = o.counts.get(end, 0)
        if n <= 0:
            continue
        out.reporting.add(o.unit[0])
        if chosen.get(o.unit) != o.metric:
            continue
        models.setdefault(o.unit[:2], o.model)
        part = parts.setdefault((o.scrape, o.unit), {"pods": [], "free": 0, "fraction": o.fraction})
        if o.namespace is None:
            part["free"] += n
        else:
            part["pods"].append((o.namespace, n))
    for host in {u[0] for u in models}:
        found = policy.pool_for_node(host)
        pool_of[host] = found.name if found else UNPOOLED
    sliced = {n for p in policy.pools for n in p.time_sliced_nodes}
    for gpu, model in models.items():
        figures = out.pools.setdefault(pool_of[gpu[0]], PoolFigures(pool=pool_of[gpu[0]]))
        figures.gpus += 1
        if gpu in kwh:
            figures.kwh += kwh[gpu]
        else:
            price = policy.pricing.gpu_models.get(model)
            if price is None:
                figures.unpriced.add(model)
            else:
                figures.kwh += Fraction(price.default_power_watts) / 1000
    for unit, (seconds, shares, exact) in _unit_use(parts, interval).items():
        figures = out.pools[pool_of[unit[0]]]
        figures.gpu_seconds += seconds
        figures.tenants_exact &= exact and unit[0] not in sliced
        for namespace, part in shares.items():
            tenant = policy.tenant_for_namespace(namespace) if namespace else None
            name = tenant.name if tenant else UNALLOCATED
            figures.tenants[name] = figures.tenants.get(name, Fraction(0)) + part
    return out
