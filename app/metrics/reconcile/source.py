"""The reconciliation's own reads of the source: per-series hourly sample counts and sums, nothing aggregated.

Every query here keeps each stored series apart (no `sum by`/`max by`, no per-minute evaluation, no
`unless`): one value per series and hour, evaluated at the hour's end over the hour, and every
grouping, de-duplication and division happens in Python (derive.py). Where hourly values cannot say a
figure exactly (an energy counter that reset or appeared in the hour, a scrape target with too little
evidence for its interval) the raw samples themselves are fetched, one small instant query each.

Only the transport is shared with ingestion (`prometheus_api`: the deadline, auth/TLS, and the strict
reading that turns partial or malformed answers into `Unavailable`): it decides nothing about figures.
The hour's window is SPEC section 4's: a sample at t belongs to the hour (end - 3600 s, end], written
as a window of 3599999 ms, which Prometheus 2.x (closed), 3.x (left-open) and VictoriaMetrics read alike.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

import requests

from app.core.clusters import ClusterConfig
from app.core.masking import cluster_secrets
from app.core.timeutil import SECONDS_PER_HOUR as HOUR_S
from app.metrics.labels import DEFAULT_EXPORTER, ExporterIdentity
from app.metrics.prometheus_api import configure_session, decode_matrix, get_body
from app.metrics.types import OCCUPANCY_METRICS
from app.metrics.windows import HOUR

WINDOW = HOUR
POWER = "DCGM_FI_DEV_POWER_USAGE"
ENERGY = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"
MAX_POINTS = 11_000  # Prometheus's limit per series of a range query


@dataclass
class Series:
    """One stored series: its labels and one number per hour end (epoch seconds)."""

    labels: dict[str, str]
    values: dict[int, float] = field(default_factory=dict)


@dataclass
class SourceHours:
    """What the source holds for whole hours, series by series. Hour keys are hour ends."""

    start: int  # first hour start of the occupancy window
    end: int  # end of the occupancy window
    occupancy: dict[str, list[Series]] = field(default_factory=dict)  # metric -> per-series sample counts
    power_sum: list[Series] = field(default_factory=list)
    power_count: list[Series] = field(default_factory=list)
    energy_last: list[Series] = field(default_factory=list)  # from the hour before the first one asked
    energy_resets: list[Series] = field(default_factory=list)
    pod_nodes: dict[str, str] = field(default_factory=dict)  # exporter pod -> node (kube_pod_info)


@dataclass
class QueryLog:
    query: str
    seconds: float
    series: int


@dataclass
class ReconcileSource:
    """One cluster's Prometheus-compatible query API, read the reconciliation's way."""

    url: str
    access: ClusterConfig | None = None
    timeout_s: float = 60.0
    deadline_s: float = 300.0
    exporter: ExporterIdentity = DEFAULT_EXPORTER
    log: list[QueryLog] | None = None

    def __post_init__(self) -> None:
        self._session = configure_session(requests.Session(), self.access)
        self._base = self.url.rstrip("/")

    def hours(self, *, start: int, end: int, energy_start: int, energy_end: int) -> SourceHours:
        """Per-series hourly figures: occupancy counts for hours [start, end), power and energy for [energy_start, energy_end)."""
        out = SourceHours(start=start, end=end)
        for metric in OCCUPANCY_METRICS:
            out.occupancy[metric] = self._range(f"count_over_time({metric}[{WINDOW}])", start, end)
        out.power_sum = self._range(f"sum_over_time({POWER}[{WINDOW}])", energy_start, energy_end)
        out.power_count = self._range(f"count_over_time({POWER}[{WINDOW}])", energy_start, energy_end)
        # The counter's last value at each hour end, from the end of the hour before the first one on.
        out.energy_last = self._range(f"last_over_time({ENERGY}[{WINDOW}])", energy_start - HOUR_S, energy_end)
        out.energy_resets = self._range(f"resets({ENERGY}[{WINDOW}])", energy_start, energy_end)
        selector = f"kube_pod_info{{pod=~{json.dumps(self.exporter.pod_regex)}}}"
        for s in self._range(f"last_over_time({selector}[{WINDOW}])", start, end):
            if s.labels.get("pod") and s.labels.get("node"):
                out.pod_nodes[s.labels["pod"]] = s.labels["node"]
        return out

    def raw(self, selector: str, *, at: int) -> list[tuple[dict[str, str], list[tuple[float, float]]]]:
        """The raw samples of the hour ending at `at` of every series `selector` matches."""
        body = self._get("/api/v1/query", {"query": f"{selector}[{WINDOW}]", "time": at}, selector)
        return [(item["metric"], [(float(t), float(v)) for t, v in item["values"]])
                for item in decode_matrix(body, source=f"Prometheus at {self._base}",
                                      secrets=cluster_secrets(self.access))]

    def _range(self, query: str, start: int, end: int) -> list[Series]:
        """`query` evaluated at each hour end in (start, end], chunked under the points limit; one Series per label set."""
        found: dict[tuple, Series] = {}
        step = (MAX_POINTS - 1) * HOUR_S
        for a in range(start, end, step):
            b = min(a + step, end)
            body = self._get("/api/v1/query_range", {"query": query, "start": a + HOUR_S, "end": b, "step": HOUR_S},
                             query)
            result = decode_matrix(body, source=f"Prometheus at {self._base}",
                                      secrets=cluster_secrets(self.access))
            for item in result:
                labels = item["metric"]
                key = tuple(sorted(labels.items()))
                series = found.get(key)
                if series is None:
                    series = found[key] = Series(labels=labels)
                series.values.update((int(float(t)), float(v)) for t, v in item["values"])
        return list(found.values())

    def _get(self, path: str, params: dict, what: str) -> bytes:
        began = time.perf_counter()
        body = get_body(self._session, self._base + path, params, timeout_s=self.timeout_s, deadline_s=self.deadline_s)
        if self.log is not None:
            self.log.append(QueryLog(what, time.perf_counter() - began, body.count(b'"metric"')))
        return body
