"""The simulator as a `MetricsSource`: the `SourceBatch` a perfect Prometheus would return.

Sample counts per minute, activity sums per hour, the energy counter's hourly delta, requests over
the trailing idle window and the P99 of the trailing 5 minutes, all read from the simulated state.
"""

from __future__ import annotations

import re
from datetime import datetime
from decimal import Decimal
from itertools import accumulate

from app.core.errors import Invalid
from app.core.timeutil import SECONDS_PER_HOUR as HOUR_S
from app.core.timeutil import epoch
from app.metrics.histograms import INF, VLLM_E2E_LATENCY_S, p99_bucket, quantile
from app.metrics.simulator.series import fb_used_mib
from app.metrics.simulator.workload import INFERENCE_PCT, NAMESPACES, PCT_CAP, SLOTS, SLOW_FROM_S
from app.metrics.types import OCCUPANCY_METRICS, GpuEnergy, OccupancySeries, SeriesLabels, ServiceMinutes, SourceBatch
from app.policy.document import PolicyDocument

GPU_UTIL, GR_ENGINE_ACTIVE = OCCUPANCY_METRICS
# The simulator's cumulative histogram on vLLM's boundaries: fast requests at or below 0.3 s, slow
# ones in (0.5, 0.8] (series.py renders the same buckets).
UPPER = tuple(Decimal(le) for le in VLLM_E2E_LATENCY_S) + (INF,)
NAMESPACE_RE = re.compile(r'namespace\s*=\s*"([^"]*)"')


def cumulative_buckets(fast: int, total: int) -> list[tuple[Decimal, float]]:
    """(upper bound, cumulative count) of `fast` fast requests among `total`."""
    return [(le, float(fast if le <= SLOW_FROM_S else total)) for le in UPPER]


def service_for(sla_service: str, requests_query: str) -> str | None:
    """The simulated service an SLA names: by service name, else by the namespace it selects."""
    if sla_service in NAMESPACES:
        return sla_service
    match = NAMESPACE_RE.search(requests_query)
    if match:
        return next((s for s, ns in NAMESPACES.items() if ns == match.group(1)), None)
    return None


class SimulatorSource:
    """Answers `fetch` for any whole hours, instantly and identically every time."""

    def __init__(self, sim) -> None:
        self.sim = sim

    def fetch(self, *, start: datetime, end: datetime, policy: PolicyDocument) -> SourceBatch:
        """Occupancy, activity, energy and SLA signals for the whole hours [start, end)."""
        s, e = epoch(start), epoch(end)
        if s % HOUR_S or e % HOUR_S or e <= s:
            raise Invalid(f"fetch needs whole hours, got {start.isoformat()} .. {end.isoformat()}")
        batch = SourceBatch(start=s, end=e)
        batch.occupancy = self._occupancy(s, e, batch.fb_peak)
        batch.energy = self._energy(s, e)
        for sla in policy.sla:
            service = service_for(sla.service, sla.requests)
            if service is not None:
                batch.services[sla.service] = self._service(sla.service, service, s, e, policy.colocation.idle_window_s)
        return batch

    def _occupancy(self, s: int, e: int, fb_peak: dict) -> list[OccupancySeries]:
        w = self.sim.workload
        per = 60 // self.sim.scrape_interval_s  # samples in every minute
        out: list[OccupancySeries] = []
        for unit in self.sim.topology.units:
            metrics = ([] if unit.gpu_instance else [GPU_UTIL]) + ([GR_ENGINE_ACTIVE] if unit.node.model.datacenter else [])
            base = dict(host=unit.node.name, uuid=unit.gpu.uuid, gpu=str(unit.gpu.index), model=unit.node.model.name,
                        gpu_instance=unit.gpu_instance, mig_profile=unit.profile)
            series: dict[object, list[OccupancySeries]] = {}
            peaks = fb_peak.setdefault((unit.node.name, unit.gpu.uuid, unit.gpu_instance), {})
            for day in range(s // 60 // SLOTS, (e // 60 - 1) // SLOTS + 1):
                origin = day * SLOTS * 60
                lo, hi = max(s // 60 - day * SLOTS, 0), min(e // 60 - day * SLOTS, SLOTS)
                for a, b, pods in _runs(w.segments(day)[unit.index], lo, hi):
                    ends = range(origin + a * 60 + 60, origin + b * 60 + 60, 60)
                    used = fb_used_mib(unit, pods)
                    for hour_end in range(origin + (a // 60 + 1) * HOUR_S, origin + ((b - 1) // 60 + 1) * HOUR_S + 1, HOUR_S):
                        peaks[hour_end] = max(peaks.get(hour_end, 0), used)
                    for pod in pods or (None,):
                        found = series.get(pod)
                        if found is None:
                            labels = SeriesLabels(**base) if pod is None else SeriesLabels(
                                **base, namespace=pod.namespace, pod=pod.name, container=pod.container)
                            step = self.sim.scrape_interval_s
                            found = series[pod] = [OccupancySeries(labels=labels, metric=m, interval_s=step)
                                                   for m in metrics]
                            out.extend(found)
                        for one in found:
                            one.samples.update(dict.fromkeys(ends, per))
                    # Activity per hour: each sample's wobble cancels within its minute (series.wobble).
                    c0 = a
                    while c0 < b and pods:
                        c1 = min(b, (c0 // 60 + 1) * 60)
                        total = self._pct_sum(pods, day, c0, c1) * per / 100
                        hour_end = origin + (c0 // 60 + 1) * HOUR_S
                        for pod in pods:
                            for one in series[pod]:
                                one.activity[hour_end] = one.activity.get(hour_end, 0.0) + total
                        c0 = c1
        return out

    def _pct_sum(self, pods: tuple, day: int, c0: int, c1: int) -> int:
        """Sum of a unit's activity (percent) over slots [c0, c1) of `day`."""
        w = self.sim.workload
        if not pods:
            return 0
        if len(pods) == 1 and pods[0].pct < 0:
            return sum(map(INFERENCE_PCT.__getitem__, w.service_day(pods[0].service, day).state[c0:c1]))
        if all(p.pct >= 0 for p in pods):
            return (c1 - c0) * min(PCT_CAP, sum(p.pct for p in pods))
        return sum(w.unit_pct(pods, day, k) for k in range(c0, c1))

    def _energy(self, s: int, e: int) -> list[GpuEnergy]:
        out = []
        for gpu in self.sim.topology.gpus:
            item = GpuEnergy(host=gpu.node.name, uuid=gpu.uuid, model=gpu.node.model.name)
            previous = self.sim.energy.counter_mj(gpu, s)
            for hour_end in range(s + HOUR_S, e + 1, HOUR_S):
                counter = self.sim.energy.counter_mj(gpu, hour_end)
                item.energy_mj[hour_end] = float(counter - previous)
                # Power is constant within a minute, so the mean of the samples is the mean power.
                item.power_w[hour_end] = (counter - previous) / HOUR_S / 1000
                previous = counter
            out.append(item)
        return out

    def _service(self, name: str, service: str, s: int, e: int, window_s: int) -> ServiceMinutes:
        w = self.sim.workload
        out = ServiceMinutes(service=name)
        back = 5  # minutes of history the P99 window needs before the first minute
        first = s // 60 - back
        n, f12 = [], []
        for day in range(first // SLOTS, (e // 60 - 1) // SLOTS + 1):
            sd = w.service_day(service, day)
            lo, hi = max(first - day * SLOTS, 0), min(e // 60 - day * SLOTS, SLOTS)
            n += sd.n[lo:hi]
            f12 += [a + b for a, b in zip(sd.fast1[lo:hi], sd.fast2[lo:hi])]
        pn, p12 = ([0, *accumulate(x)] for x in (n, f12))
        for minute_end in range(s + 60, e + 1, 60):
            j = minute_end // 60 - first  # prefix index just after this minute's slot
            out.requests_in_window[minute_end] = float(w.requests_between(service, minute_end - window_s, minute_end))
            fast, total = p12[j] - p12[j - 5], pn[j] - pn[j - 5]
            cumulative = cumulative_buckets(fast, total)
            bucket = p99_bucket(cumulative)
            if bucket is not None:
                out.p99_bucket[minute_end] = bucket
                out.p99_s[minute_end] = quantile(cumulative)
        return out


def _runs(segments: list, lo: int, hi: int):
    """The day's runs of equal occupancy clipped to slots [lo, hi), gaps included as empty runs."""
    at = lo
    for a, b, pods in segments:
        a, b = max(a, lo), min(b, hi)
        if a >= b:
            continue
        if at < a:
            yield at, a, ()
        yield a, b, pods
        at = b
    if at < hi:
        yield at, hi, ()
