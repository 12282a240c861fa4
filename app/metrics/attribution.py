"""One hour of a `SourceBatch` -> an `HourRollup` (SPEC section 4). Pure: no I/O, no clock.

Resolution of time-slicing: dcgm-exporter repeats a shared unit's series once per pod, so in a
minute where pods p have sample counts c_p on one unit, pod p is credited
`c_p / sum(c) * max(c)` samples. That equals the true split whenever the set of pods on a unit
changes only at minute boundaries; when it changes inside a minute the error is at most that
minute's samples, and the unit's total for the minute is never more than it really carried.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections import defaultdict
from decimal import ROUND_HALF_EVEN, Decimal
from fractions import Fraction

from app.core.timeutil import SECONDS_PER_HOUR as HOUR_S
from app.core.timeutil import SECONDS_PER_MINUTE as MINUTE_S
from app.metrics.histograms import BREACH, CLEAR, UNRESOLVED, verdict
from app.metrics.timeslicing import split_time_sliced
from app.metrics.types import (
    OCCUPANCY_METRICS,
    BreachMinute,
    DataFinding,
    GpuEnergy,
    HourRollup,
    ModelEnergy,
    NamespaceRow,
    OccupancySeries,
    PoolHour,
    ServiceMinutes,
    SourceBatch,
    UnitRow,
    UsageRow,
)
from app.policy import gpus
from app.policy.document import UNALLOCATED, UNPOOLED, PolicyDocument

CLASSES = ("inference", "training", "preprocessing")
COLOCATED_CLASSES = ("training", "preprocessing")
MICRO = Decimal("0.000001")
NANO = Decimal("0.000000001")
MILLI = Decimal("0.001")
# Numeric(14, 3): an infinite P99 (all requests in the +Inf bucket) is stored as the largest value.
P99_MS_MAX = Decimal("99999999999.999")
GPU_UTIL, GR_ENGINE_ACTIVE = OCCUPANCY_METRICS


def quantize_micro(value: Fraction) -> Decimal:
    """Round an exact quantity to 1e-6, half to even (Fraction's round() is half-even)."""
    return Decimal(round(value * 1_000_000)).scaleb(-6).quantize(MICRO)


def unit_fraction(model: str, profile: str) -> Fraction:
    """Share of a physical GPU a unit is; an unparseable profile label counts as a whole GPU."""
    try:
        return gpus.unit_fraction(model, profile or None)
    except ValueError:
        return Fraction(1)


def _classify(policy: PolicyDocument, namespace: str, override: str) -> tuple[str, str]:
    """(tenant, class) of a pod's namespace; unclaimed namespaces are `unallocated`, never dropped."""
    tenant = policy.tenant_for_namespace(namespace) if namespace else None
    if tenant is None:
        return UNALLOCATED, UNALLOCATED
    return tenant.name, override if override in CLASSES else tenant.klass


def _pool_of(policy: PolicyDocument, host: str) -> str:
    pool = policy.pool_for_node(host)
    return pool.name if pool else UNPOOLED


class _PoolsOf(dict):
    """host -> pool name, each host looked up once: `pool_for_node` scans every pool's node list, and an hour
    of 10,000 GPUs has some 25,000 series on 1,250 hosts (the scans were 15 % of attribution's CPU)."""

    def __init__(self, policy: PolicyDocument) -> None:
        super().__init__()
        self.policy = policy

    def __missing__(self, host: str) -> str:
        pool = self[host] = _pool_of(self.policy, host)
        return pool


def dark_minutes(batch: SourceBatch, *, hour: int, policy: PolicyDocument, pool: str) -> set[int]:
    """Minute ends of `hour` in which `pool`'s inference was idle (SPEC section 4, dark time)."""
    minute_ends = range(hour + MINUTE_S, hour + HOUR_S + 1, MINUTE_S)
    definition = policy.pool(pool)
    if definition is None:  # unpooled hosts have no reservation, hence no dark time
        return set()
    slas = policy.slas_for_pool(pool)
    if not slas:
        return set(minute_ends) if definition.reserved_fraction > 0 else set()
    colo = policy.colocation
    # Idle = fewer than window/interval requests over the trailing window (mean interval above it).
    threshold = Fraction(colo.idle_window_s) / Fraction(str(colo.idle_request_interval_s))
    dark = set()
    for m in minute_ends:
        idle = True
        for sla in slas:
            service = batch.services.get(sla.service)
            requests = service.requests_in_window.get(m) if service else None
            # A service with no data for the minute counts as idle.
            if requests is not None and not math.isnan(requests) and Fraction(requests) >= threshold:
                idle = False
                break
        if idle:
            dark.add(m)
    return dark


def _occupancy_choice(series: list[OccupancySeries], lo: int, hi: int) -> dict[tuple, str]:
    """Per unit, the metric used: GPU_UTIL where the unit reports it in the hour, else GR_ENGINE_ACTIVE."""
    chosen: dict[tuple, str] = {}
    for s in series:
        if not any(lo < t <= hi for t in s.samples):
            continue
        unit = s.labels.unit
        if s.metric == GPU_UTIL or unit not in chosen:
            chosen[unit] = s.metric
    return chosen


def _energy_rows(batch: SourceBatch, hour_end: int, pool_gpus: dict[str, dict[tuple, str]]) -> dict[str, list[ModelEnergy]]:
    """Per pool, per model: GPUs, measured GPUs and their kWh (counter delta, else mean power x 1 h)."""
    by_gpu: dict[tuple, GpuEnergy] = {(e.host, e.uuid): e for e in batch.energy}
    out: dict[str, list[ModelEnergy]] = {}
    for pool, physical in pool_gpus.items():
        per_model: dict[str, list] = defaultdict(lambda: [0, 0, Decimal(0)])
        for gpu, model in physical.items():
            acc = per_model[model]
            acc[0] += 1
            energy = by_gpu.get(gpu)
            kwh = None
            if energy is not None:
                delta = energy.energy_mj.get(hour_end)
                power = energy.power_w.get(hour_end)
                if delta is not None and math.isfinite(delta) and delta >= 0:
                    kwh = Decimal(repr(delta)) / Decimal(3_600_000_000)
                elif power is not None and math.isfinite(power) and power >= 0:
                    kwh = Decimal(repr(power)) / Decimal(1000)  # W x 1 h -> kWh
            if kwh is not None:
                acc[1] += 1
                acc[2] += kwh
        out[pool] = [
            ModelEnergy(model=m, gpus=a[0], measured_gpus=a[1], measured_kwh=a[2].quantize(NANO, ROUND_HALF_EVEN))
            for m, a in sorted(per_model.items())
        ]
    return out


def _sla_verdicts(batch: SourceBatch, lo: int, hi: int, policy: PolicyDocument):
    """(sla, minute end, verdict, P99 in seconds) for every minute of (lo, hi] with traffic in its P99 window.

    The P99 bucket decides where the source gives one (see `histograms`); a source that only gives
    a P99 value (no buckets) is compared as is.
    """
    for sla in policy.sla:
        service = batch.services.get(sla.service)
        if service is None:
            continue
        red_line_s = Decimal(sla.p99_ms) / 1000
        for m in sorted(t for t in service.p99_s.keys() | service.p99_bucket.keys() if lo < t <= hi):
            p99 = service.p99_s.get(m)
            bucket = service.p99_bucket.get(m)
            if bucket is not None:
                yield sla, m, verdict(bucket, red_line_s), p99
                continue
            if p99 is None or math.isnan(p99):
                continue  # no traffic in the trailing 5 minutes: nothing to breach
            above = math.isinf(p99) or Decimal(repr(p99)) > red_line_s
            yield sla, m, BREACH if above else CLEAR, p99


def _breach_minutes(batch: SourceBatch, lo: int, hi: int, policy: PolicyDocument) -> list[tuple]:
    """(sla, minute end, P99 in ms) for every minute of (lo, hi] whose P99 bucket lies above the SLA's red line."""
    out = []
    for sla, m, outcome, p99 in _sla_verdicts(batch, lo, hi, policy):
        if outcome != BREACH:
            continue
        exact_ms = None if p99 is None or not math.isfinite(p99) else Decimal(repr(p99)) * 1000
        p99_ms = P99_MS_MAX if exact_ms is None else min(exact_ms.quantize(MILLI, ROUND_HALF_EVEN), P99_MS_MAX)
        out.append((sla, m, p99_ms))
    return out


def unresolved_minutes(batch: SourceBatch, lo: int, hi: int, policy: PolicyDocument) -> dict[tuple[str, str, str], int]:
    """(service, tenant, pool) -> minutes of (lo, hi] whose P99 bucket straddles the red line (never billed)."""
    out: dict[tuple[str, str, str], int] = {}
    for sla, _, outcome, _ in _sla_verdicts(batch, lo, hi, policy):
        if outcome == UNRESOLVED:
            key = (sla.service, sla.tenant, sla.pool)
            out[key] = out.get(key, 0) + 1
    return out


def _interval(s: OccupancySeries, override_s: int | None) -> Fraction:
    """Seconds per sample: the override, else what the source inferred, else the fullest minute's spacing."""
    if override_s:
        return Fraction(override_s)
    if s.interval_s:
        return Fraction(s.interval_s)
    return Fraction(MINUTE_S, max(max(s.samples.values(), default=1), 1))


def _over_capacity(pool: str, unit: tuple, billed: Fraction, capacity: Fraction, what: str) -> DataFinding:
    """The finding for a unit whose reported use was cut back to its capacity."""
    return DataFinding(kind="over_capacity", pool=pool, unit="/".join(p for p in unit if p),
                       gpu_seconds_cut=quantize_micro(billed - capacity),
                       detail=(f"{what} reported {float(billed):g} GPU-s on a unit of {float(capacity):g} GPU-s; "
                               "the excess was cut, not billed"))


def attribute_hour(batch: SourceBatch, *, hour: int, policy: PolicyDocument,
                   scrape_interval_s: int | None = None) -> HourRollup:
    """Attribute one hour [hour, hour + 3600) of `batch` to pools, tenants, classes and dark|busy."""
    lo, hi = hour, hour + HOUR_S
    chosen = _occupancy_choice(batch.occupancy, lo, hi)
    pool_of = _PoolsOf(policy)

    # Physical GPUs seen per pool (capacity counts every GPU that reported, occupied or not).
    pool_gpus: dict[str, dict[tuple, str]] = defaultdict(dict)
    # unit -> [(series, its counts in the hour)] for series that carry a pod.
    per_unit: dict[tuple, list] = defaultdict(list)
    used: list[OccupancySeries] = []
    # Time-sliced nodes that kube-state-metrics describes: their units are split per node, below.
    sliced: dict[str, list] = {n: [] for p in policy.pools for n in p.time_sliced_nodes if batch.gpu_holders.get(n)}
    seen_units: dict[tuple, object] = {}  # unit -> its labels (each unit that reported in the hour)
    unit_seconds: dict[tuple, Fraction] = {}  # unit -> GPU-seconds it carried (after any cut)
    unit_tenants: dict[tuple, set[str]] = defaultdict(set)
    for s in batch.occupancy:
        unit = s.labels.unit
        if chosen.get(unit) != s.metric:
            continue
        samples = s.samples
        if not samples:
            continue
        if min(samples) > lo and max(samples) <= hi and min(samples.values()) > 0:
            counts = samples  # already one hour's (split_hours)
        else:
            counts = {t: c for t, c in samples.items() if lo < t <= hi and c > 0}
            if not counts:
                continue
        pool_gpus[pool_of[s.labels.host]][s.labels.physical_gpu] = s.labels.model
        seen_units.setdefault(unit, s.labels)
        if not s.labels.pod or s.hourly:
            continue  # the unit reported, but no pod held it: capacity, not usage
        if s.labels.host in sliced:
            sliced[s.labels.host].append((s, counts))
            continue
        used.append(s)
        per_unit[unit].append((s, counts))

    pools = set(pool_gpus)
    dark_by_pool = {p: dark_minutes(batch, hour=hour, policy=policy, pool=p) for p in pools}
    breaches = _breach_minutes(batch, lo, hi, policy)
    breach_times: dict[str, set[int]] = defaultdict(set)  # pool -> minute ends with a breach
    for b in breaches:
        breach_times[b[0].pool].add(b[1])

    info: dict[int, tuple] = {}  # id(series) -> (pool, tenant, class, GPU-seconds per sample, its index, namespace)
    classes: dict[tuple, tuple[str, str]] = {}
    # Distinct GPU-seconds-per-sample values, keyed by a small int (hashing Fractions is slow).
    weights: dict[Fraction, int] = {}
    weight_list: list[Fraction] = []
    for s in used:
        ck = (s.labels.namespace, s.labels.workload_class)
        if ck not in classes:
            classes[ck] = _classify(policy, *ck)
        weight = _interval(s, scrape_interval_s) * unit_fraction(s.labels.model, s.labels.mig_profile)
        if weight not in weights:
            weights[weight] = len(weight_list)
            weight_list.append(weight)
        info[id(s)] = (pool_of[s.labels.host], *classes[ck], weight, weights[weight], s.labels.namespace)

    # Whole samples per (pool, tenant, class, dark, weight, namespace): integer sums in the hot loop,
    # exact fractions (keyed without the weight) only for minutes where pods share a unit.
    sample_counts: dict[tuple, int] = defaultdict(int)
    shared: dict[tuple, Fraction] = defaultdict(Fraction)
    # Per series: samples it had in dark / busy minutes (for apportioning its activity).
    series_split: dict[int, list[int]] = {}
    # (pool, breach minute) -> tenant -> GPU-seconds of training/preprocessing.
    colocated: dict[tuple, dict[str, Fraction]] = defaultdict(lambda: defaultdict(Fraction))
    findings: list[DataFinding] = []
    for unit, unit_series in per_unit.items():
        # This unit's contributions, kept apart until its total is checked against its capacity.
        counts_u: dict[tuple, int] = defaultdict(int)
        shared_u: dict[tuple, Fraction] = defaultdict(Fraction)
        colocated_u: dict[tuple, Fraction] = defaultdict(Fraction)
        if len(unit_series) == 1:  # one pod on the unit all hour: nothing to split
            s, counts = unit_series[0]
            pool, tenant, klass, weight, wi, ns = info[id(s)]
            dark = dark_by_pool[pool]
            total_n = sum(counts.values())
            if not dark:
                dark_n = 0
            elif len(dark) == 60:
                dark_n = total_n
            else:
                dark_n = sum(counts[t] for t in counts.keys() & dark)
            busy_n = total_n - dark_n
            counts_u[(pool, tenant, klass, True, wi, ns)] += dark_n
            counts_u[(pool, tenant, klass, False, wi, ns)] += busy_n
            series_split[id(s)] = [dark_n, busy_n]
            if klass in COLOCATED_CLASSES:
                for t in breach_times.get(pool, ()):
                    if t in counts:
                        colocated_u[(pool, t, tenant)] += weight * counts[t]
        else:
            by_minute: dict[int, list] = defaultdict(list)
            for s, counts in unit_series:
                series_split[id(s)] = [0, 0]
                for t, c in counts.items():
                    by_minute[t].append((s, c))
            for t, entries in by_minute.items():
                total = sum(c for _, c in entries)
                peak = max(c for _, c in entries)
                for s, c in entries:
                    pool, tenant, klass, weight, wi, ns = info[id(s)]
                    is_dark = t in dark_by_pool[pool]
                    series_split[id(s)][0 if is_dark else 1] += c
                    if total == peak:
                        counts_u[(pool, tenant, klass, is_dark, wi, ns)] += c
                        seconds = weight * c
                    else:  # pods (or vgpu replicas) share the unit in this minute: split by series held
                        seconds = Fraction(c * peak, total) * weight
                        shared_u[(pool, tenant, klass, is_dark, ns)] += seconds
                    if klass in COLOCATED_CLASSES and t in breach_times.get(pool, ()):
                        colocated_u[(pool, t, tenant)] += seconds
        # A unit is never billed above its capacity: cut the excess pro rata and record it.
        first = unit_series[0][0].labels
        capacity = HOUR_S * unit_fraction(first.model, first.mig_profile)
        billed = (sum((weight_list[k[4]] * n for k, n in counts_u.items()), Fraction(0))
                  + sum(shared_u.values(), Fraction(0)))
        if billed > capacity:
            scale = capacity / billed
            scaled: dict[tuple, Fraction] = defaultdict(Fraction, {k: v * scale for k, v in shared_u.items()})
            for k, n in counts_u.items():
                if n:
                    scaled[(*k[:4], k[5])] += weight_list[k[4]] * n * scale
            counts_u, shared_u = {}, scaled
            colocated_u = {k: v * scale for k, v in colocated_u.items()}
            findings.append(_over_capacity(info[id(unit_series[0][0])][0], unit, billed, capacity,
                                           f"{len(unit_series)} series"))
        unit_seconds[unit] = min(billed, capacity)
        unit_tenants[unit].update(info[id(s)][1] for s, _ in unit_series)
        for k, n in counts_u.items():
            sample_counts[k] += n
        for k, v in shared_u.items():
            shared[k] += v
        for (pool, t, tenant), v in colocated_u.items():
            colocated[(pool, t)][tenant] += v

    for host, host_series in sliced.items():
        pool = pool_of[host]
        split, cuts, carried = split_time_sliced(
            host_series, batch.gpu_holders[host], dark=dark_by_pool[pool],
            weight_of=lambda s: (_interval(s, scrape_interval_s), unit_fraction(s.labels.model, s.labels.mig_profile)),
            classify=lambda namespace: _classify(policy, namespace, ""))
        findings += [_over_capacity(pool, unit, billed, cap, "time-sliced unit") for unit, billed, cap in cuts]
        unit_seconds.update(carried)
        for s, _ in host_series:
            unit_tenants[s.labels.unit].add(_classify(policy, s.labels.namespace, "")[0])
        for (tenant, klass, is_dark, t, ns), seconds in split.items():
            shared[(pool, tenant, klass, is_dark, ns)] += seconds
            if klass in COLOCATED_CLASSES and t in breach_times.get(pool, ()):
                colocated[(pool, t)][tenant] += seconds

    # Per namespace first; a (pool, tenant, class, dark) cell is the exact sum of its namespaces.
    by_namespace: dict[tuple, Fraction] = defaultdict(Fraction)
    for (pool, tenant, klass, is_dark, wi, ns), n in sample_counts.items():
        if n:
            by_namespace[(pool, tenant, klass, is_dark, ns)] += weight_list[wi] * n
    for key, seconds in shared.items():
        by_namespace[key] += seconds
    usage: dict[tuple, Fraction] = defaultdict(Fraction)
    for key, seconds in by_namespace.items():
        usage[key[:4]] += seconds

    # Efficiency inputs: each series' hourly activity, apportioned to dark/busy by its samples.
    activity: dict[tuple, list] = defaultdict(lambda: [0.0, 0])
    ns_activity: dict[tuple, list] = defaultdict(lambda: [0.0, 0])
    for s in used:
        dark_n, busy_n = series_split.get(id(s), (0, 0))
        n = dark_n + busy_n
        if n == 0:
            continue
        total_activity = s.activity.get(hi, 0.0)
        if not math.isfinite(total_activity):
            total_activity = 0.0
        pool, tenant, klass, _, _, ns = info[id(s)]
        for is_dark, k in ((True, dark_n), (False, busy_n)):
            if k:
                for acc in (activity[(pool, tenant, klass, is_dark)], ns_activity[(pool, tenant, klass, is_dark, ns)]):
                    acc[0] += total_activity * k / n
                    acc[1] += k

    rows = []
    for key in sorted(usage, key=lambda k: (k[0], k[1], k[2], k[3])):
        pool, tenant, klass, is_dark = key
        act = activity.get(key, [0.0, 0])
        rows.append(UsageRow(pool=pool, tenant=tenant, klass=klass, dark=is_dark,
                             gpu_seconds=quantize_micro(usage[key]), activity_sum=act[0], activity_samples=act[1]))

    energy = _energy_rows(batch, hi, pool_gpus)
    pool_rows = [
        PoolHour(pool=p, gpus=len(pool_gpus[p]), capacity_gpu_seconds=Decimal(len(pool_gpus[p]) * HOUR_S).quantize(MICRO),
                 dark_minutes=len(dark_by_pool[p]), models=tuple(energy[p]))
        for p in sorted(pools)
    ]

    breach_rows = [
        BreachMinute(service=sla.service, service_tenant=sla.tenant, pool=sla.pool, minute_end=m, p99_ms=p99_ms,
                     colocated=tuple((tenant, quantize_micro(v))
                                     for tenant, v in sorted(colocated.get((sla.pool, m), {}).items()) if v > 0))
        for sla, m, p99_ms in breaches
    ]
    return HourRollup(hour=hour, usage=rows, pools=pool_rows, breaches=breach_rows,
                      unresolved=unresolved_minutes(batch, lo, hi, policy), findings=findings,
                      units=_unit_rows(batch, hi, pool_of, seen_units, unit_seconds, unit_tenants, used, series_split),
                      namespaces=namespace_rows(rows, by_namespace, ns_activity))


def _unit_rows(batch: SourceBatch, hour_end: int, pools: _PoolsOf, seen: dict, seconds: dict[tuple, Fraction],
               tenants: dict[tuple, set[str]], used: list[OccupancySeries], split: dict[int, list[int]]) -> list[UnitRow]:
    """Per GPU unit that reported in the hour: the GPU-seconds it carried (the pool usage rows sum to these),
    its holders' tenants, engine activity over its occupied samples and its FB_USED peak."""
    activity: dict[tuple, list] = defaultdict(lambda: [0.0, 0])
    for s in used:
        n = sum(split.get(id(s), (0, 0)))
        value = s.activity.get(hour_end, 0.0)
        if n and math.isfinite(value):
            acc = activity[s.labels.unit]
            acc[0] += value
            acc[1] += n
    rows = []
    capacities: dict[tuple[str, str], Decimal] = {}  # (model, profile) -> capacity, computed once (Fractions are slow)
    zero = Decimal(0).quantize(MICRO)
    for unit in sorted(seen):
        labels = seen[unit]
        kind = (labels.model, labels.mig_profile)
        if kind not in capacities:
            capacities[kind] = quantize_micro(HOUR_S * unit_fraction(*kind))
        carried = seconds.get(unit)
        if carried is None or not carried:
            used_s = zero
        elif carried.denominator == 1:
            used_s = Decimal(carried.numerator).quantize(MICRO)
        else:
            used_s = quantize_micro(carried)
        peak = batch.fb_peak.get(unit, {}).get(hour_end)
        act = activity.get(unit, (0.0, 0))
        rows.append(UnitRow(
            pool=pools[labels.host], node=labels.host, gpu_uuid=labels.uuid, gpu_index=labels.gpu,
            gpu_instance=labels.gpu_instance, mig_profile=labels.mig_profile, model=labels.model,
            capacity_gpu_seconds=capacities[kind], gpu_seconds=used_s, activity_sum=act[0], activity_samples=act[1],
            tenants=tuple(sorted(tenants.get(unit, ()))),
            fb_used_peak_mib=peak if peak is not None and math.isfinite(peak) and peak >= 0 else None))
    return rows


def namespace_rows(usage: list[UsageRow], by_namespace: dict[tuple, Fraction],
                   activity: dict[tuple, list]) -> list[NamespaceRow]:
    """Each usage row split into its namespaces, in micro-GPU-seconds that add up to the row exactly.

    Every namespace gets its exact share rounded down to 1e-6; the micro-seconds the row's own
    rounding leaves over go to the largest remainders (ties: namespace name), so sum == row always.
    """
    parts: dict[tuple, list[tuple[str, Fraction]]] = defaultdict(list)
    for (pool, tenant, klass, is_dark, ns), seconds in by_namespace.items():
        parts[(pool, tenant, klass, is_dark)].append((ns, seconds * 1_000_000))
    out = []
    for row in usage:
        key = (row.pool, row.tenant, row.klass, row.dark)
        pieces = sorted(parts.get(key, ()))
        floors = [math.floor(micro) for _, micro in pieces]
        left = int(row.gpu_seconds.scaleb(6)) - sum(floors)
        order = sorted(range(len(pieces)), key=lambda i: (-(pieces[i][1] - floors[i]), pieces[i][0]))
        for i in order[:left]:
            floors[i] += 1
        for (ns, _), micro in zip(pieces, floors):
            act = activity.get((*key, ns), (0.0, 0))
            out.append(NamespaceRow(pool=row.pool, namespace=ns, tenant=row.tenant, klass=row.klass, dark=row.dark,
                                    gpu_seconds=Decimal(micro).scaleb(-6).quantize(MICRO),
                                    activity_sum=act[0], activity_samples=act[1]))
    return out


def hour_of(t: int) -> int:
    """Start of the hour a bucket ending at t belongs to: buckets are (end - width, end]."""
    return (t - 1) // HOUR_S * HOUR_S


def split_hours(batch: SourceBatch) -> dict[int, SourceBatch]:
    """Cut a multi-hour batch into one batch per hour in a single pass (attribution then stays linear)."""
    out = {h: SourceBatch(start=h, end=h + HOUR_S) for h in range(batch.start, batch.end, HOUR_S)}
    for s in batch.occupancy:
        parts: dict[int, OccupancySeries] = {}
        if not s.samples:
            continue
        items = list(s.samples.items())
        keys = list(s.samples)
        if keys != sorted(keys):
            items.sort()
            keys.sort()
        # Samples are in time order: cut each hour out as one slice (C speed, no per-sample Python).
        for h in range(max(hour_of(keys[0]), batch.start), min(hour_of(keys[-1]), batch.end - HOUR_S) + 1, HOUR_S):
            a, b = bisect_right(keys, h), bisect_right(keys, h + HOUR_S)
            if a < b:
                part = parts[h] = OccupancySeries(labels=s.labels, metric=s.metric, samples=dict(items[a:b]),
                                                  hourly=s.hourly)
                out[h].occupancy.append(part)
        for t, a in s.activity.items():
            part = parts.get(hour_of(t))
            if part is not None:
                part.activity[t] = a
    for e in batch.energy:
        for h, target in out.items():
            end = h + HOUR_S
            if end in e.energy_mj or end in e.power_w:
                part = GpuEnergy(host=e.host, uuid=e.uuid, model=e.model)
                if end in e.energy_mj:
                    part.energy_mj[end] = e.energy_mj[end]
                if end in e.power_w:
                    part.power_w[end] = e.power_w[end]
                target.energy.append(part)
    for host, minutes in batch.gpu_holders.items():
        for t, held in minutes.items():
            if hour_of(t) in out:
                out[hour_of(t)].gpu_holders.setdefault(host, {})[t] = held
    for unit, peaks in batch.fb_peak.items():
        for t, v in peaks.items():
            if hour_of(t) in out:
                out[hour_of(t)].fb_peak.setdefault(unit, {})[t] = v
    for name, svc in batch.services.items():
        for h in out:
            out[h].services[name] = ServiceMinutes(service=name)
        for t, v in svc.requests_in_window.items():
            if hour_of(t) in out:
                out[hour_of(t)].services[name].requests_in_window[t] = v
        for t, v in svc.p99_s.items():
            if hour_of(t) in out:
                out[hour_of(t)].services[name].p99_s[t] = v
        for t, v in svc.p99_bucket.items():
            if hour_of(t) in out:
                out[hour_of(t)].services[name].p99_bucket[t] = v
    return out
