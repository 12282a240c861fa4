"""The simulator as a live source: its dcgm-exporter exposition at an instant, parsed as a scrape stores it,
and its services' requests over the idle window and latency buckets over the last 5 minutes."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from app.core.timeutil import from_epoch
from app.metrics.live import LIVE_METRICS, LiveReading, ServiceNow
from app.metrics.simulator.exposition import exposition
from app.metrics.simulator.source import cumulative_buckets, service_for
from app.metrics.simulator.workload import SLOTS
from app.policy.document import PolicyDocument

P99_MINUTES = 5


class SimulatorLive:
    """Reads the simulator's state at an instant (no query: `queries` stays 0)."""

    def __init__(self, sim) -> None:
        self.sim = sim
        self.key = f"simulator:{sim.seed}:{sim.gpus}"

    def read(self, *, policy: PolicyDocument, at: float) -> LiveReading:
        with self.sim.lock:
            text = exposition(self.sim, from_epoch(int(at)), families=LIVE_METRICS)
            reading = LiveReading(at=at, series=[
                # Prometheus stores no empty label (an old exporter's free device prints pod="").
                ({"__name__": sample.name, **{k: v for k, v in sample.labels.items() if v}}, float(int(at)), sample.value)
                for family in text_string_to_metric_families(text) for sample in family.samples])
            w = self.sim.workload
            now_slot = -int(-int(at) // 60) - 1
            for sla in policy.sla:
                service = service_for(sla.service, sla.requests)
                if service is None:
                    continue
                fast = total = 0
                for slot in range(now_slot - P99_MINUTES, now_slot):
                    sd = w.service_day(service, slot // SLOTS)
                    k = slot % SLOTS
                    fast += sd.fast1[k] + sd.fast2[k]
                    total += sd.n[k]
                reading.services[sla.service] = ServiceNow(
                    requests_in_window=float(w.requests_between(service, int(at) - policy.colocation.idle_window_s, int(at))),
                    buckets=cumulative_buckets(fast, total))
        return reading
