"""The Prometheus source: a handful of PromQL range queries per chunk, answered as a `SourceBatch`.

Occupancy is counted, never inferred: `count_over_time(M[59999ms])` evaluated at every minute end
counts the real samples in (t - 60 s, t], identically on Prometheus 2.x and 3.x, so a pod that
ended is not kept "alive" by the 5-minute look-back of step evaluation. Per-minute counts are
asked only for series that carry a pod; that a unit reported at all is counted per hour. Every
query is chunked so that no series exceeds Prometheus's 11,000 points, and may be sharded by host
regex so that one answer never holds the whole of a very large fleet. Queries go out one at a time,
back to back, from one HTTP worker while the caller's thread decodes the previous answer. The same
HTTP API is served by Thanos, Mimir and VictoriaMetrics.

Counters (energy, requests, latency buckets) are read as raw window values and their increases
computed in Python (counters.py, serving.py), so no engine's extrapolation enters; every answer is
checked and bounded by a deadline (prometheus_api.py); silent nodes make gaps (presence.py).
Whatever the install, the workload is read by `labels.workload_of` over `labels.target_pods`
(exported_* behind a ServiceMonitor, the exporter's own pod = a free unit; `chargeback doctor`
applies the same rule); series are kept per scrape (job, instance,
replica) so that each target's sample interval is inferred from its whole minutes, and copies of
one series from other jobs or HA replicas are merged, each minute counted once (`merge_copies`).
"""

from __future__ import annotations

import json
import math
import re
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime

import requests
from prometheus_api_client import PrometheusConnect
from urllib3.util.retry import Retry

from app.core.clusters import ClusterConfig
from app.core.errors import Invalid, Unavailable
from app.core.masking import cluster_secrets, mask
from app.core.timeutil import SECONDS_PER_HOUR as HOUR_S
from app.core.timeutil import SECONDS_PER_MINUTE as MINUTE_S
from app.core.timeutil import epoch
from app.metrics import labels as rules
from app.metrics.counters import hour_increase
from app.metrics.presence import LOOKBACK_HOURS, presence_plan
from app.metrics.prometheus_api import configure_session, decode_matrix, get_body
from app.metrics.serving import Plan, services_plan
from app.metrics.types import OCCUPANCY_METRICS, GpuEnergy, OccupancySeries, SeriesLabels, SourceBatch
from app.metrics.windows import HOUR, MINUTE
from app.policy.document import PolicyDocument

MAX_POINTS = 11_000
# The labels that identify a unit, its pod (as exported_* behind a ServiceMonitor, else as printed)
# and the scrape that stored it; absent labels group as "" (both host spellings kept).
TARGET_LABELS = ("job", "instance", "prometheus", "prometheus_replica", "replica")
UNIT_LABELS = ("Hostname, hostname, UUID, gpu, modelName, GPU_I_ID, GPU_I_PROFILE, namespace, pod, container, "
               "exported_namespace, exported_pod, exported_container, vgpu, workload_class, " + ", ".join(TARGET_LABELS))
GPU_LABELS = "Hostname, hostname, UUID, modelName"
SEEN_LABELS = "Hostname, hostname, UUID, gpu, modelName, GPU_I_ID, GPU_I_PROFILE"
UNIT_KEY = "Hostname, hostname, UUID, GPU_I_ID"
GPU_UTIL = OCCUPANCY_METRICS[0]
# Whole minutes per scrape target enough to infer its interval.
EVIDENCE_MINUTES = 1440
ENERGY = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"
POWER = "DCGM_FI_DEV_POWER_USAGE"
FB_USED = "DCGM_FI_DEV_FB_USED"
# GPU_UTIL is a percentage; activity is kept as a 0..1 ratio like GR_ENGINE_ACTIVE.
ACTIVITY_SCALE = {"DCGM_FI_DEV_GPU_UTIL": 0.01, "DCGM_FI_PROF_GR_ENGINE_ACTIVE": 1.0}


@dataclass
class QueryRecord:
    query: str
    start: int
    end: int
    step: int
    seconds: float
    series: int


@dataclass
class PrometheusSource:
    """A `MetricsSource` over the Prometheus HTTP API (prometheus-api-client)."""

    url: str
    # None: each scrape target's interval is inferred from the samples it stored (mixed fleets work).
    scrape_interval_s: int | None = None
    timeout_s: float = 60.0  # per connect / socket read
    deadline_s: float = 300.0  # per query, wall clock: a dripping server cannot hang ingestion
    # Host regexes; each is queried on its own (a fleet too large for one answer). Empty = one shard.
    host_shards: Sequence[str] = ()
    max_chunk_hours: int = 168
    # An hour in which a node that reported in these many hours before is silent is a gap (presence.py).
    outage_lookback_hours: int = LOOKBACK_HOURS
    retries: int = 2
    # When a list is given, every query is appended to it with its duration (for benchmarks).
    log: list[QueryRecord] | None = None
    exporter: rules.ExporterIdentity = rules.DEFAULT_EXPORTER
    access: ClusterConfig | None = None  # the cluster's auth and TLS options (bearer, basic, mTLS, CA)

    def __post_init__(self) -> None:
        retry = Retry(total=self.retries, backoff_factor=0.2, status_forcelist=(502, 503, 504),
                      allowed_methods=("GET", "POST"), raise_on_status=False)
        # The client owns connection settings (retries, auth, TLS); its session also carries our raw GETs.
        self._session = configure_session(requests.Session(), self.access)
        self.client = PrometheusConnect(url=self.url.rstrip("/"), retry=retry, timeout=self.timeout_s,
                                        session=self._session)
        # Points per series of a minute-step query must stay under Prometheus's limit.
        self.max_chunk_hours = max(1, min(self.max_chunk_hours, (MAX_POINTS - 1) * MINUTE_S // HOUR_S))

    # ---- MetricsSource ----

    def fetch(self, *, start: datetime, end: datetime, policy: PolicyDocument) -> SourceBatch:
        """Occupancy, activity, energy and SLA signals for the whole hours [start, end)."""
        s, e = epoch(start), epoch(end)
        if s % HOUR_S or e % HOUR_S or e <= s:
            raise Invalid(f"fetch needs whole hours, got {start.isoformat()} .. {end.isoformat()}")
        batch = SourceBatch(start=s, end=e)
        occupancy: dict[tuple, OccupancySeries] = {}  # (labels, metric, hourly, scrape) -> series
        energy: dict[tuple, GpuEnergy] = {}
        plan: Plan = []
        step = self.max_chunk_hours * HOUR_S
        pod_nodes: dict[str, str] = {}  # exporter pod -> node, for exporters that print their pod as Hostname
        for cs in range(s, e, step):
            ce = min(cs + step, e)
            plan += self._nodes_plan(pod_nodes, cs, ce)
            plan += self._holders_plan(batch, cs, ce, policy)
            for shard in self.host_shards or (None,):
                plan += self._occupancy_plan(occupancy, cs, ce, shard, pod_nodes)
                plan += self._energy_plan(energy, cs, ce, shard, pod_nodes)
                plan += self._memory_plan(batch, cs, ce, shard, pod_nodes)
                plan += presence_plan(batch, cs, ce, lambda w, shard=shard: " or ".join(
                    _over(shard, "count_over_time", m, w) for m in OCCUPANCY_METRICS), self.outage_lookback_hours)
            plan += self._services_plan(batch, cs, ce, policy)
        # One HTTP worker issues the queries back to back (Prometheus sees them one at a time, as
        # if issued alone) while this thread decodes the previous answer. A handler may return
        # follow-up queries: they join the end of the plan (the loop below reaches them).
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="promql") as http:
            futures = [http.submit(self._get, q, a, b, st) for q, a, b, st, _ in plan]
            try:
                for (query, a, b, st, handle), future in zip(plan, futures):
                    body, seconds = future.result()
                    result = self._decode(body)
                    del body
                    if self.log is not None:
                        self.log.append(QueryRecord(query, a, b, st, seconds, len(result)))
                    try:
                        more = handle(result) or []
                    except (KeyError, TypeError, ValueError, ArithmeticError) as exc:
                        said = mask(str(exc), cluster_secrets(self.access))[:200]
                        raise Unavailable(f"Prometheus at {self.url} sent an answer that cannot be read "
                                          f"({type(exc).__name__}: {said}) for {query[:120]}") from exc
                    plan += more
                    futures += [http.submit(self._get, q, a, b, st) for q, a, b, st, _ in more]
            finally:
                for future in futures:
                    future.cancel()
        batch.occupancy = merge_copies(occupancy.values(), self.scrape_interval_s)
        batch.energy = list(energy.values())
        return batch

    # ---- queries: (promql, start, end, step, what to do with the answer) ----

    def _nodes_plan(self, pod_nodes: dict[str, str], cs: int, ce: int) -> list:
        """kube_pod_info's node of each exporter pod (without NODE_NAME the exporter prints its pod as Hostname)."""
        def nodes(result: list) -> None:
            pod_nodes.update((i["metric"]["pod"], i["metric"]["node"]) for i in result
                             if i["metric"].get("pod") and i["metric"].get("node"))

        selector = f"kube_pod_info{{pod=~{json.dumps(self.exporter.pod_regex)}}}"
        return [(f"max by (pod, node) (max_over_time({selector}[{HOUR}]))", cs + HOUR_S, ce, HOUR_S, nodes)]

    def _holders_plan(self, batch: SourceBatch, cs: int, ce: int, policy: PolicyDocument) -> list:
        """Per minute, the pods kube-state-metrics shows holding GPUs on the policy's time-sliced nodes."""
        hosts = sorted({n for p in policy.pools for n in p.time_sliced_nodes})
        if not hosts:
            return []
        regex = json.dumps("|".join(re.escape(h) for h in hosts))
        requests_q = ('max by (namespace, pod, container) (max_over_time('
                      f'kube_pod_container_resource_requests{{resource="nvidia_com_gpu"}}[{MINUTE}]))')
        info_q = f"max by (namespace, pod, node) (max_over_time(kube_pod_info{{node=~{regex}}}[{MINUTE}]))"
        query = f"sum by (node, namespace, pod) ({requests_q} * on (namespace, pod) group_left (node) {info_q})"

        def holders(result: list) -> None:
            for item in result:
                m = item["metric"]
                minutes = batch.gpu_holders.setdefault(m.get("node", ""), {})
                for t, v in item["values"]:
                    gpus = float(v)
                    if math.isfinite(gpus) and gpus > 0:
                        minutes.setdefault(int(t), {})[(m.get("namespace", ""), m.get("pod", ""))] = gpus

        return [(query, cs + MINUTE_S, ce, MINUTE_S, holders)]

    def _occupancy_plan(self, out: dict[tuple, OccupancySeries], cs: int, ce: int, shard: str | None,
                        pod_nodes: dict[str, str] | None = None) -> list:
        plan = []
        pod_nodes = {} if pod_nodes is None else pod_nodes
        targets: set[tuple[str, str]] = set()  # scrape targets' own pods, seen beside exported_* labels
        held = self._held()
        for metric in OCCUPANCY_METRICS:
            def counts(result: list, metric: str = metric) -> None:
                _note_targets(result, targets)
                for item in result:
                    series = self._series(out, item["metric"], metric, pod_nodes, targets)
                    if series is not None:
                        series.samples.update({int(t): _count(v) for t, v in item["values"] if v != "0"})

            def sums(result: list, metric: str = metric) -> None:
                scale = ACTIVITY_SCALE[metric]
                _note_targets(result, targets)
                for item in result:
                    series = self._series(out, item["metric"], metric, pod_nodes, targets)
                    if series is not None:
                        series.activity.update({int(t): float(v) * scale for t, v in item["values"]})

            def seen(result: list, metric: str = metric) -> None:
                for item in result:
                    series = _series(out, _labels(item["metric"], None, pod_nodes), metric, hourly=True)
                    series.samples.update({int(t): _count(v) for t, v in item["values"] if v != "0"})

            # Per-minute counts only where a pod holds the unit (about half the points of a busy
            # fleet); that a unit reported at all (capacity, metric choice) is counted per hour.
            # GR_ENGINE_ACTIVE is not needed where the unit reports GPU_UTIL (datacenter GPUs report both).
            per_minute = _over_any(shard, "count_over_time", metric, MINUTE, held)
            per_hour = _over_any(shard, "sum_over_time", metric, HOUR, held)
            if metric != GPU_UTIL:
                per_minute = f"({per_minute}) unless on ({UNIT_KEY}) ({_over(shard, 'count_over_time', GPU_UTIL, MINUTE)})"
                per_hour = f"({per_hour}) unless on ({UNIT_KEY}) ({_over(shard, 'count_over_time', GPU_UTIL, HOUR)})"
            plan.append((f"sum by ({UNIT_LABELS}) ({per_minute})", cs + MINUTE_S, ce, MINUTE_S, counts))
            plan.append((f"sum by ({UNIT_LABELS}) ({per_hour})", cs + HOUR_S, ce, HOUR_S, sums))
            plan.append((f"sum by ({SEEN_LABELS}) ({_over(shard, 'count_over_time', metric, HOUR)})",
                         cs + HOUR_S, ce, HOUR_S, seen))
        return plan

    def _held(self) -> tuple[str, ...]:
        """Matchers for series that may name a workload: exported_* ones, or a pod that is not the exporter's."""
        exporters = "|".join(sorted(re.escape(c) for c in self.exporter.containers))
        return ('exported_pod!=""', f'pod!="", exported_pod="", container!~{json.dumps(exporters)}')

    def _series(self, out: dict[tuple, OccupancySeries], m: dict, metric: str, pod_nodes: dict[str, str],
                targets: set[tuple[str, str]] = frozenset()) -> OccupancySeries | None:
        """The per-scrape series of a held unit, or None when its pod is the exporter's own (a free unit)."""
        workload = rules.workload_of(m, self.exporter, targets)
        if workload is None:
            return None
        return _series(out, _labels(m, workload, pod_nodes), metric, scrape=tuple(m.get(k, "") for k in TARGET_LABELS))

    def _energy_plan(self, out: dict[tuple, GpuEnergy], cs: int, ce: int, shard: str | None,
                     pod_nodes: dict[str, str] | None = None) -> list:
        # The counter's hourly extremes and resets; the increase is computed in Python (counters.py),
        # so a reset hour is not undercounted and no engine's extrapolation enters.
        extremes: dict[str, dict[tuple, dict[int, float]]] = {"min": {}, "max": {}, "resets": {}}

        def keep(kind: str) -> Callable[[list], None]:
            def handle(result: list) -> None:
                extremes[kind].update({_gpu_key(i["metric"]): {int(t): float(v) for t, v in i["values"]} for i in result})
            return handle

        def deltas(result: list) -> None:
            for item in result:
                key = _gpu_key(item["metric"])
                last = {int(t): float(v) for t, v in item["values"]}
                lows, highs, resets = (extremes[k].get(key, {}) for k in ("min", "max", "resets"))
                gpu = _gpu(out, item["metric"], pod_nodes)
                for t, value in last.items():
                    if t <= cs or t not in lows:
                        continue
                    delta = hour_increase(before=last.get(t - HOUR_S), lowest=lows[t], highest=highs.get(t, value),
                                          last=value, resets=int(resets.get(t, 0)))
                    if delta is not None:  # an exporter pod replaced within the hour: both series add up
                        gpu.energy_mj[t] = gpu.energy_mj.get(t, 0.0) + delta

        def power(result: list) -> None:
            for item in result:
                _gpu(out, item["metric"], pod_nodes).power_w.update({int(t): float(v) for t, v in item["values"]})

        def hourly(func: str, metric: str = ENERGY, agg: str = "max") -> str:
            return f"{agg} by ({GPU_LABELS}) ({_over(shard, func, metric, HOUR)})"

        # SPEC 4: a GPU's mean power is all its samples in the hour over their count, across every series
        # of the GPU (a pod starting or stopping mid-hour splits it: the max of the series' means is not it).
        mean_power = f"{hourly('sum_over_time', POWER, 'sum')} / {hourly('count_over_time', POWER, 'sum')}"
        return [
            (hourly("min_over_time", agg="min"), cs + HOUR_S, ce, HOUR_S, keep("min")),
            (hourly("max_over_time"), cs + HOUR_S, ce, HOUR_S, keep("max")),
            (hourly("resets"), cs + HOUR_S, ce, HOUR_S, keep("resets")),
            # The counter's last value at each hour end, from the hour before the chunk onwards.
            (hourly("last_over_time"), cs, ce, HOUR_S, deltas),
            (mean_power, cs + HOUR_S, ce, HOUR_S, power),
        ]

    def _memory_plan(self, batch: SourceBatch, cs: int, ce: int, shard: str | None,
                     pod_nodes: dict[str, str] | None = None) -> list:
        """Each unit's highest FB_USED per hour (copies from other jobs or replicas merge under `max`)."""
        def peaks(result: list) -> None:
            for item in result:
                m = item["metric"]
                unit = (rules.host_of(m, pod_nodes), m.get("UUID", ""), m.get("GPU_I_ID", ""))
                hours = batch.fb_peak.setdefault(unit, {})
                for t, v in item["values"]:
                    hours[int(t)] = max(hours.get(int(t), 0.0), float(v))

        query = f"max by ({UNIT_KEY}) ({_over(shard, 'max_over_time', FB_USED, HOUR)})"
        return [(query, cs + HOUR_S, ce, HOUR_S, peaks)]

    def _services_plan(self, batch: SourceBatch, cs: int, ce: int, policy: PolicyDocument) -> list:
        return services_plan(batch, cs, ce, policy)

    def _get(self, query: str, start: int, end: int, step: int) -> tuple[bytes, float]:
        """One query_range over the client's session, within the total deadline (see prometheus_api).

        The body is returned undecoded so that the HTTP worker can send the next query at once
        (custom_query_range would decode it first, keeping Prometheus idle meanwhile).
        """
        began = time.perf_counter()
        body = get_body(self._session, f"{self.client.url}/api/v1/query_range",
                        {"query": query, "start": start, "end": end, "step": step}, timeout_s=self.timeout_s,
                        deadline_s=self.deadline_s, headers=self.client.headers, auth=self.client.auth)
        return body, time.perf_counter() - began

    def _decode(self, body: bytes) -> list[dict]:
        """The answer's series, or `Unavailable` when it is not a complete, well-formed matrix."""
        return decode_matrix(body, source=f"Prometheus at {self.url}", secrets=cluster_secrets(self.access))


def _count(value: str) -> int:
    """A sample count as Prometheus prints it ("2"; tolerate "2.0")."""
    try:
        return int(value)
    except ValueError:
        return int(float(value))


def _over(shard: str | None, func: str, metric: str, window: str, matcher: str = "") -> str:
    """`func(metric{matcher}[window])`, restricted to the shard's hosts under either host label spelling."""
    if shard is None:
        selector = f"{{{matcher}}}" if matcher else ""
        return f"{func}({metric}{selector}[{window}])"
    regex = json.dumps(shard)
    extra = f", {matcher}" if matcher else ""
    return (f"({func}({metric}{{Hostname=~{regex}{extra}}}[{window}]) or "
            f"{func}({metric}{{hostname=~{regex}{extra}}}[{window}]))")


def _note_targets(result: list, targets: set[tuple[str, str]]) -> None:
    """Add the answer's scrape-target pods (`labels.target_pods`, the doctor's rule too) before its series are read."""
    targets |= rules.target_pods(item["metric"] for item in result)


def _over_any(shard: str | None, func: str, metric: str, window: str, matchers: Sequence[str]) -> str:
    """`_over` for each of several (disjoint) matchers, joined by `or`."""
    parts = [_over(shard, func, metric, window, m) for m in matchers]
    return parts[0] if len(parts) == 1 else "(" + " or ".join(parts) + ")"


def _labels(m: dict, workload: rules.Workload | None, pod_nodes: dict[str, str] | None = None) -> SeriesLabels:
    w = workload or rules.Workload(namespace="", pod="")
    return SeriesLabels(
        host=rules.host_of(m, pod_nodes), uuid=m.get("UUID", ""), gpu=m.get("gpu", ""),
        model=m.get("modelName", ""), gpu_instance=m.get("GPU_I_ID", ""), mig_profile=m.get("GPU_I_PROFILE", ""),
        namespace=w.namespace, pod=w.pod, container=w.container, workload_class=m.get("workload_class", ""),
        vgpu=w.vgpu,
    )


def _series(out: dict[tuple, OccupancySeries], labels: SeriesLabels, metric: str, hourly: bool = False,
            scrape: tuple = ()) -> OccupancySeries:
    key = (labels, metric, hourly, scrape)
    series = out.get(key)
    if series is None:
        series = out[key] = OccupancySeries(labels=labels, metric=metric, hourly=hourly, scrape=scrape)
    return series


def infer_intervals(series: Iterable[OccupancySeries]) -> dict[tuple, int]:
    """Seconds between samples per scrape target, from per-minute counts of the minutes inside each run.

    A minute whose neighbours both have samples is wholly inside the series' life, so it holds
    60 / interval samples on average (exact for any interval up to 60 s over whole runs); a target
    with no such minute falls back to its fullest minute.
    """
    minutes: dict[tuple, int] = defaultdict(int)
    samples: dict[tuple, int] = defaultdict(int)
    fullest: dict[tuple, int] = defaultdict(int)
    for s in series:
        if s.hourly or not s.samples:
            continue
        scrape = s.scrape
        if minutes[scrape] >= EVIDENCE_MINUTES:
            continue  # a day of whole minutes settles a target's interval; the rest would only cost CPU
        have = s.samples
        for t, c in have.items():
            fullest[scrape] = max(fullest[scrape], c)
            if t - MINUTE_S in have and t + MINUTE_S in have:
                minutes[scrape] += 1
                samples[scrape] += c
    out = {}
    for scrape, peak in fullest.items():
        if samples.get(scrape):
            out[scrape] = max(1, round(MINUTE_S * minutes[scrape] / samples[scrape]))
        else:
            out[scrape] = max(1, MINUTE_S // max(peak, 1))
    return out


def merge_copies(series: Iterable[OccupancySeries], override_s: int | None = None) -> list[OccupancySeries]:
    """One series per (unit, workload, metric): copies stored by other jobs or HA replicas count once.

    Per minute the copy that saw the most GPU-seconds wins (a replica that restarted mid-hour does
    not shorten the other's record); counts are re-expressed in the gcd of the copies' intervals,
    so the result stays in whole samples.
    """
    series = list(series)
    intervals = {} if override_s else infer_intervals(series)
    groups: dict[tuple, list[OccupancySeries]] = defaultdict(list)
    for s in series:
        s.interval_s = override_s or intervals.get(s.scrape, 0)
        groups[(s.labels, s.metric, s.hourly)].append(s)
    out = []
    for copies in groups.values():
        if len(copies) == 1 or copies[0].hourly:
            first = copies[0]
            for other in copies[1:]:  # hourly: only whether the unit reported matters
                for t, c in other.samples.items():
                    first.samples[t] = max(first.samples.get(t, 0), c)
            out.append(first)
            continue
        unit = math.gcd(*(c.interval_s or 1 for c in copies))
        merged = OccupancySeries(labels=copies[0].labels, metric=copies[0].metric, interval_s=unit)
        for c in copies:
            k = (c.interval_s or 1) // unit
            for t, n in c.samples.items():
                merged.samples[t] = max(merged.samples.get(t, 0), n * k)
            for t, a in c.activity.items():
                merged.activity[t] = max(merged.activity.get(t, 0.0), a * k)
        out.append(merged)
    return out


def _gpu_key(m: dict) -> tuple[str, str]:
    return (m.get("Hostname") or m.get("hostname", ""), m.get("UUID", ""))


def _gpu(out: dict[tuple, GpuEnergy], m: dict, pod_nodes: dict[str, str] | None = None) -> GpuEnergy:
    """A GPU's energy record, keyed on its node as occupancy is (an exporter pod's name mapped through kube_pod_info)."""
    key = (rules.host_of(m, pod_nodes), m.get("UUID", ""))
    gpu = out.get(key)
    if gpu is None:
        gpu = out[key] = GpuEnergy(host=key[0], uuid=key[1], model=m.get("modelName", ""))
    return gpu
