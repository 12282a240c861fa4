"""The `Simulator`: one deterministic cluster, seen as a policy, a metrics source, ground truth,
an exposition and an OpenMetrics backfill. All views read the same schedules (see workload)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from datetime import datetime
from pathlib import Path

from app.metrics.simulator.cluster import build_topology
from app.metrics.simulator.energy import Energy
from app.metrics.simulator.workload import Workload
from app.policy.document import PolicyDocument


class Simulator:
    """A simulated GPU fleet, a pure function of (seed, gpus); scrapes every `scrape_interval_s`."""

    def __init__(self, seed: int = 42, gpus: int = 32, scrape_interval_s: int = 30) -> None:
        if scrape_interval_s <= 0 or 60 % scrape_interval_s or scrape_interval_s > 30:
            # Prometheus's rate()/increase() see a trailing window only from its first sample on: with
            # at least two samples a minute, every minute of a 3- or 5-minute window is seen.
            raise ValueError("scrape_interval_s must divide 60 and be at most 30")
        self.seed = seed
        self.gpus = gpus
        self.scrape_interval_s = scrape_interval_s
        self.topology = build_topology(seed, gpus)
        self.workload = Workload(seed, self.topology)
        self.energy = Energy(self.workload)
        self._policy: PolicyDocument | None = None
        self.lock = threading.RLock()  # its caches are shared by an exporter's request threads and `hold`

    def hold(self, unit_index: int, pods: tuple, since: datetime) -> None:
        """Drive the state: from the minute of `since` on, the unit is held by `pods` (workload.Pod; none = free)."""
        with self.lock:
            self.workload.override(unit_index, int(since.timestamp()) // 60, pods)

    def policy(self) -> PolicyDocument:
        """The seed policy document that matches this cluster (passes validation)."""
        if self._policy is None:
            from app.metrics.simulator.policy import seed_policy

            self._policy = seed_policy(self)
        return self._policy

    def source(self):
        """A `MetricsSource` answering from the simulated state directly."""
        from app.metrics.simulator.source import SimulatorSource

        return SimulatorSource(self)

    def truth(self, start: datetime, end: datetime):
        """Ground truth for whole hours [start, end), counted sample by sample."""
        from app.metrics.simulator.truth import ground_truth

        return ground_truth(self, start, end)

    def exposition(self, at: datetime, families: tuple[str, ...] | None = None) -> str:
        """Every series (of `families`, when given) at instant `at`, in the Prometheus text format 0.0.4."""
        from app.metrics.simulator.exposition import exposition

        return exposition(self, at, families)

    def write_openmetrics(self, path: str | Path, start: datetime, end: datetime, *,
                          metrics: Iterable[str] | None = None,
                          progress: Callable[[int, int], None] | None = None) -> int:
        """Stream samples for [start - 10 min, end] to an OpenMetrics file; returns samples written."""
        from app.metrics.simulator.openmetrics import write_openmetrics

        return write_openmetrics(self, path, start, end, metrics=metrics, progress=progress)

    def write_openmetrics_blocks(self, directory: str | Path, start: datetime, end: datetime, *,
                                 metrics: Iterable[str] | None = None,
                                 progress: Callable[[int, int], None] | None = None) -> list[tuple[Path, int]]:
        """The same samples as `write_openmetrics`, one file per 2-hour block (fast for promtool)."""
        from app.metrics.simulator.openmetrics import write_openmetrics_blocks

        return write_openmetrics_blocks(self, directory, start, end, metrics=metrics, progress=progress)
