"""Ground truth of a window, counted sample by sample from the simulated state.

Deliberately independent of `app.metrics.attribution`: it walks every scrape instant of every
unit, credits interval x unit fraction / pods-on-the-unit to each pod's tenant and class, and
decides dark and breach minutes from the simulated requests and slow minutes (SPEC section 4).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from decimal import ROUND_HALF_EVEN, Decimal
from fractions import Fraction

from app.core.timeutil import SECONDS_PER_HOUR as HOUR_S
from app.core.timeutil import epoch
from app.metrics.simulator.source import service_for
from app.metrics.simulator.workload import SLOT_S, SLOTS, SLOW
from app.policy.document import UNALLOCATED

MICRO = Decimal("0.000001")
COLOCATED = ("training", "preprocessing")


@dataclass
class GroundTruth:
    # (hour start, pool, tenant, class, dark) -> GPU-seconds; the hour holds samples in (H, H + 3600]
    usage: dict[tuple[int, str, str, str, bool], Decimal] = field(default_factory=dict)
    capacity: dict[tuple[int, str], int] = field(default_factory=dict)  # physical GPUs seen
    dark_minutes: dict[tuple[int, str], int] = field(default_factory=dict)
    breaches: set[tuple[str, int]] = field(default_factory=set)  # (service, minute end)
    # (service, minute end) -> training/preprocessing tenant -> GPU-seconds in the pool that minute
    breach_colocated: dict[tuple[str, int], dict[str, Decimal]] = field(default_factory=dict)


def quantize(value: Fraction) -> Decimal:
    """An exact quantity rounded to 1e-6, half to even."""
    return (Decimal(value.numerator) / Decimal(value.denominator)).quantize(MICRO, rounding=ROUND_HALF_EVEN)


def ground_truth(sim, start: datetime, end: datetime) -> GroundTruth:
    """Truth for the whole hours [start, end) under the simulator's seed policy."""
    s, e = epoch(start), epoch(end)
    if s % HOUR_S or e % HOUR_S or e <= s:
        raise ValueError("truth needs whole hours")
    policy, w, topo = sim.policy(), sim.workload, sim.topology
    interval = sim.scrape_interval_s
    per_slot = SLOT_S // interval
    window = policy.colocation.idle_window_s
    threshold = Fraction(window) / Fraction(str(policy.colocation.idle_request_interval_s))
    owners = {ns: (t.name, t.klass) for t in policy.tenants for ns in t.namespaces}
    pool_of = {n.name: policy.pool_for_node(n.name).name for n in topo.nodes}
    slas = {p.name: [service_for(x.service, x.requests) for x in policy.slas_for_pool(p.name)] for p in policy.pools}
    truth = GroundTruth()

    dark: dict[tuple[str, int], bool] = {}
    for pool in policy.pools:
        for minute_end in range(s + 60, e + 1, 60):
            if slas[pool.name]:
                idle = all(w.requests_between(svc, minute_end - window, minute_end) < threshold
                           for svc in slas[pool.name] if svc is not None)
            else:
                idle = pool.reserved_fraction > 0
            dark[(pool.name, minute_end)] = idle
        for hour in range(s, e, HOUR_S):
            truth.dark_minutes[(hour, pool.name)] = sum(dark[(pool.name, m)] for m in range(hour + 60, hour + HOUR_S + 1, 60))
            truth.capacity[(hour, pool.name)] = sum(len(n.gpus) for n in topo.nodes if pool_of[n.name] == pool.name)

    # Sample counts per (hour, pool, tenant, class, dark, slices, pods on the unit).
    counts: dict[tuple, int] = defaultdict(int)
    colocated: dict[tuple, int] = defaultdict(int)  # (pool, minute end, tenant, slices, pods) -> samples
    for unit in topo.units:
        pool = pool_of[unit.node.name]
        for slot in range(s // 60, e // 60):
            day, k = divmod(slot, SLOTS)
            pods = w.unit_slots(unit.index, day)[k]
            if not pods:
                continue
            minute_end = slot * 60 + 60
            hour = (minute_end - 1) // HOUR_S * HOUR_S
            is_dark = dark[(pool, minute_end)]
            for pod in pods:
                tenant, klass = owners.get(pod.namespace, (UNALLOCATED, UNALLOCATED))
                counts[(hour, pool, tenant, klass, is_dark, unit.slices, len(pods))] += per_slot
                if klass in COLOCATED:
                    colocated[(pool, minute_end, tenant, unit.slices, len(pods))] += per_slot

    usage: dict[tuple, Fraction] = defaultdict(Fraction)
    for (hour, pool, tenant, klass, is_dark, slices, shared), n in counts.items():
        usage[(hour, pool, tenant, klass, is_dark)] += Fraction(n * interval * slices, 7 * shared)
    truth.usage = {key: quantize(v) for key, v in usage.items()}

    minute_share: dict[tuple[str, int], dict[str, Fraction]] = defaultdict(lambda: defaultdict(Fraction))
    for (pool, minute_end, tenant, slices, shared), n in colocated.items():
        minute_share[(pool, minute_end)][tenant] += Fraction(n * interval * slices, 7 * shared)
    for sla in policy.sla:
        service = service_for(sla.service, sla.requests)
        if service is None:
            continue
        for minute_end in range(s + 60, e + 1, 60):
            last = minute_end // 60 - 1
            # Breach: a slow minute (always with traffic) among the trailing five.
            if any(w.service_day(service, d).state[k] == SLOW
                   for d, k in (divmod(slot, SLOTS) for slot in range(last - 4, last + 1))):
                truth.breaches.add((sla.service, minute_end))
                shares = minute_share.get((sla.pool, minute_end), {})
                truth.breach_colocated[(sla.service, minute_end)] = {t: quantize(v) for t, v in sorted(shares.items()) if v}
    return truth
