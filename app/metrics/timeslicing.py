"""Time-sliced GPUs whose exporter names only one of the sharing pods: split per node by GPUs requested. Pure.

Without --kubernetes-virtual-gpus dcgm-exporter puts one of a GPU's sharing pods on its series, so
the pod named is arbitrary. For nodes the policy lists under `pools[].time_sliced_nodes`, the
node's occupied GPU-seconds of each minute (each unit once, never above its capacity in the hour)
are split among the pods kube-state-metrics shows holding GPUs on the node in that minute, by GPUs
requested. A minute without kube-state-metrics data keeps the pods the exporter named.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from fractions import Fraction

from app.core.timeutil import SECONDS_PER_HOUR as HOUR_S
from app.metrics.types import OccupancySeries


def split_time_sliced(series: list[tuple[OccupancySeries, dict[int, int]]], holders: dict[int, dict[tuple, float]], *,
                      dark: set[int], weight_of: Callable[[OccupancySeries], tuple[Fraction, Fraction]],
                      classify: Callable[[str], tuple[str, str]],
                      ) -> tuple[dict[tuple, Fraction], list[tuple[tuple, Fraction, Fraction]], dict[tuple, Fraction]]:
    """(tenant, class, dark, minute end, namespace) -> GPU-seconds on one node, (unit, billed, capacity) of units
    cut, and unit -> GPU-seconds it carried (after the cut).

    `weight_of(series)` gives (seconds per sample, unit fraction); `classify(namespace)` gives (tenant, class).
    """
    per_unit: dict[tuple, dict[int, Fraction]] = defaultdict(dict)  # unit -> minute -> seconds (copies once)
    named: dict[tuple, dict[int, dict[tuple[str, str], Fraction]]] = defaultdict(lambda: defaultdict(dict))
    capacity: dict[tuple, Fraction] = {}
    for s, counts in series:
        interval, fraction = weight_of(s)
        unit = s.labels.unit
        capacity[unit] = HOUR_S * fraction
        minutes = per_unit[unit]
        for t, c in counts.items():
            seconds = interval * fraction * c
            pod = (s.labels.namespace, s.labels.pod)
            named[unit][t][pod] = max(named[unit][t].get(pod, Fraction(0)), seconds)
            if seconds > minutes.get(t, 0):
                minutes[t] = seconds
    occupied: dict[int, Fraction] = defaultdict(Fraction)
    shown: dict[int, dict[tuple[str, str], Fraction]] = defaultdict(lambda: defaultdict(Fraction))
    cuts = []
    carried: dict[tuple, Fraction] = {}
    for unit, minutes in per_unit.items():
        billed = sum(minutes.values(), Fraction(0))
        scale = Fraction(1)
        if billed > capacity[unit]:  # never above capacity, as for any unit
            scale = capacity[unit] / billed
            cuts.append((unit, billed, capacity[unit]))
        carried[unit] = billed * scale
        for t, seconds in minutes.items():
            occupied[t] += seconds * scale
            for pod, pod_seconds in named[unit][t].items():
                shown[t][pod] += pod_seconds * scale
    out: dict[tuple, Fraction] = defaultdict(Fraction)
    for t, seconds in occupied.items():
        held = {pod: Fraction(str(n)) for pod, n in holders.get(t, {}).items() if n > 0} or dict(shown[t])
        total = sum(held.values(), Fraction(0))
        for (namespace, _pod), n in held.items():
            tenant, klass = classify(namespace)
            out[(tenant, klass, t in dark, t, namespace)] += seconds * n / total
    return out, cuts, carried
