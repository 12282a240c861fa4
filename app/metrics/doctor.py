"""`chargeback doctor`: a preflight of a live Prometheus before the portal bills from it.

It reads what the store holds right now (instant queries over a short look-back), applies the same
label rules ingestion uses (`app.metrics.labels`: one rule decides which units are free, with the
exporter identity from the same settings) and the same bucket arithmetic as SLA verdicts
(`app.metrics.histograms`), and reports findings: what each does to the bill and how to fix it.
Severity `error` means the bill would be wrong or incomplete (the command exits non-zero);
`warning` means the portal copes but something is degraded; `info` describes the install.

Every finding carries a next step (`fix`), and where the portal has a page for it a `link` to that page.
Finding text marks setting names, labels and commands with backticks, which the CLI prints as they are and a
page shows as code (`spans`); details are plain sentences and lists, never a Python or JSON structure.
"""

from __future__ import annotations

import re
import statistics
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from decimal import Decimal

from app.core.errors import AppError
from app.core.settings import get_settings
from app.metrics import histograms
from app.metrics.labels import (
    ExporterIdentity,
    dedup_key,
    host_of,
    label_style,
    suspected_exporter_pods,
    target_pods,
    workload_of,
)
from app.metrics.prometheus_api import PromReader
from app.policy import red_lines
from app.policy.document import PolicyDocument

ERROR, WARNING, INFO = "error", "warning", "info"
GPU_UTIL, PROF = "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
ENERGY, POWER = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "DCGM_FI_DEV_POWER_USAGE"
OCCUPANCY_SELECTOR = f'{{__name__=~"{GPU_UTIL}|{PROF}"}}'
GEFORCE = ("GeForce", "RTX 4090", "RTX 3090")  # cards without DCGM profiling (PROF) metrics
SHOWN = 8  # names listed in a finding before "and N more"
MAX_POD_LOOKUPS = 200  # Hostname values looked up in kube_pod_info at once (the URL stays short)


@dataclass(frozen=True)
class Finding:
    """One thing the doctor found: how bad, what it does to the bill, how to fix it."""

    code: str
    severity: str
    title: str
    detail: str
    bill: str
    fix: str
    link: str = ""  # a portal page where the next step is taken ("" when the step is outside the portal)
    link_text: str = ""


@dataclass
class Report:
    url: str
    at: float
    label_style: str | None = None
    summary: dict[str, int] = field(default_factory=dict)
    intervals: list[dict] = field(default_factory=list)  # {job, interval_s, series}
    findings: list[Finding] = field(default_factory=list)
    cluster: str | None = None  # whose pools the nodes were checked against (set by the caller)

    @property
    def failing(self) -> bool:
        """True when a finding would mis-bill (the CLI's non-zero exit)."""
        return any(f.severity == ERROR for f in self.findings)

    def add(self, *args, **kwargs) -> None:
        self.findings.append(Finding(*args, **kwargs))

    def as_dict(self) -> dict:
        out = {"url": self.url, "at": self.at, "label_style": self.label_style, "summary": self.summary,
               "intervals": self.intervals, "failing": self.failing, "findings": [asdict(f) for f in self.findings]}
        if self.cluster is not None:
            out["cluster"] = self.cluster
        return out


LIVE_FLEET = ("/fleet/live", "See every unit on Live fleet")
POLICY_CHANGE = ("/policy/changes/new", "Propose a policy change")


def _names(items: Iterable[str], *, code: bool = False) -> str:
    """At most SHOWN names, sorted, "and N more" after them; `code` marks each as code (a metric, a label)."""
    items = sorted(set(items))
    shown = ", ".join(f"`{n}`" if code else n for n in items[:SHOWN])
    return shown + (f" and {len(items) - SHOWN} more" if len(items) > SHOWN else "")


def _counts(counts: Counter) -> str:
    """Counts as words ("2 × 3g.40gb, 1 × 1g.10gb"), most first, then by name."""
    return ", ".join(f"{n} × {name or '(none)'}" for name, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def spans(text: str) -> list[tuple[str, bool]]:
    """`text` as (part, is_code) pairs: the parts between backticks are code (a setting, a label, a command)."""
    parts = text.split("`")
    if len(parts) % 2 == 0:  # an unpaired backtick: not markup
        return [(text, False)]
    return [(part, i % 2 == 1) for i, part in enumerate(parts) if part]


def detail_lines(text: str) -> list[str]:
    """A finding's detail as the list it enumerates (its "; "-separated parts), for a page to show one per line."""
    return [part.strip() for part in text.split("; ") if part.strip()]


def _could_not_read(report: Report, what: str, exc: AppError, bill: str) -> None:
    report.add("could-not-read", ERROR, f"could not read {what}", str(exc), bill,
               "check the URL, the query frontend's limits and timeouts, and run the doctor again")


def run(reader: PromReader, *, at: float, policy: PolicyDocument | None, lookback_s: int = 600,
        exporter: ExporterIdentity | None = None) -> Report:
    """Query the store at `at` and return the report (never raises for a bad answer).

    `exporter` defaults to the identity ingestion uses (CHARGEBACK_EXPORTER_* settings), so both call the same units free.
    """
    exporter = exporter or ExporterIdentity.from_settings(get_settings())
    report = Report(url=reader.url, at=at)
    start = at - lookback_s
    _inventory(report, reader, start, at)
    try:
        occupancy = reader.query(f"{OCCUPANCY_SELECTOR}[{lookback_s}s]", at)
    except AppError as exc:
        _could_not_read(report, "the DCGM occupancy series", exc, "no hour can be ingested: every hour becomes a gap")
        return report
    if not occupancy:
        report.add("no-dcgm", ERROR, "no dcgm-exporter occupancy series",
                   f"neither {GPU_UTIL} nor {PROF} has a sample in the last {lookback_s} s",
                   "no GPU is seen: hours become gaps, nothing is billed",
                   "make Prometheus scrape dcgm-exporter: the chart's `serviceMonitor.enabled: true` and labels the "
                   "Prometheus serviceMonitorSelector matches (`serviceMonitor.additionalLabels`, e.g. release: "
                   "kube-prometheus-stack); check `up{job=~\".*dcgm.*\"}`")
        _services(report, reader, at, policy)
        return report

    try:
        targets = reader.series(["up"], start, at)
    except AppError:
        targets = []  # only the cross-check for an exporter pod the identity settings miss
    jobs = {m.get("job", "") for m, _ in occupancy}
    targets = [t for t in targets if t.get("job", "") in jobs]
    series = [m for m, _ in occupancy]
    known_pods = _pod_nodes(report, reader, series, start, at, policy)
    # Ingestion maps only the exporter identity's pods to nodes (prometheus_source._nodes_plan): so does the doctor.
    pod_nodes = {pod: node for pod, node in known_pods.items() if exporter.is_exporter(pod=pod)}
    own_pods = target_pods(series)  # ingestion's rule (prometheus_source._note_targets)
    suspects = suspected_exporter_pods(series, targets)
    report.label_style = label_style(series, exporter, own_pods | suspects)

    _style(report, series)
    _intervals(report, occupancy)
    units, hosts = _units(report, series, exporter, own_pods, pod_nodes)
    _unrecognised_exporter(report, series, exporter, own_pods, suspects, pod_nodes)
    _duplicates(report, series)
    _hosts(report, series, hosts, known_pods, pod_nodes, exporter, policy)
    _namespaces(report, units, policy)
    _time_slicing(report, reader, at, units, hosts, policy)
    _exporter_gaps(report, reader, start, at, series, pod_nodes)
    _services(report, reader, at, policy)
    return report


def _inventory(report: Report, reader: PromReader, start: float, at: float) -> None:
    """Which dcgm-exporter, vLLM and kube-state-metrics metrics the store holds at all."""
    try:
        names = reader.label_values("__name__", ['{__name__=~"DCGM_FI_.*|vllm:.*|kube_pod_info|'
                                                 'kube_pod_container_resource_requests"}'], start, at)
    except AppError:
        return  # the occupancy query right after reports an unreadable store
    dcgm = sorted(n for n in names if n.startswith("DCGM_FI_"))
    vllm = sorted(n for n in names if n.startswith("vllm:"))
    ksm = sorted(n for n in names if n.startswith("kube_"))
    report.summary.update(dcgm_metrics=len(dcgm), vllm_metrics=len(vllm))
    report.add("series-found", INFO, f"{len(dcgm)} dcgm-exporter and {len(vllm)} vLLM metrics",
               f"DCGM: {_names(dcgm, code=True) or 'none'}; vLLM: {_names(vllm, code=True) or 'none'}; "
               f"kube-state-metrics: {_names(ksm, code=True) or 'none'}",
               "occupancy, activity and energy come from the DCGM metrics; dark time and breaches from the serving "
               "metrics; kube-state-metrics only maps exporter pods to nodes and shows GPUs requested",
               "none needed; the other findings name any metric the bill needs and the store lacks", *LIVE_FLEET)


def _pod_nodes(report: Report, reader: PromReader, series: list[dict], start: float, at: float,
               policy: PolicyDocument | None) -> dict[str, str]:
    """Pod -> node from kube-state-metrics' kube_pod_info, for Hostname values that name no pooled node."""
    hosts = {m.get("Hostname") or m.get("hostname") or "" for m in series} - {""}
    if policy is not None:
        hosts = {h for h in hosts if policy.pool_for_node(h) is None}
    if not hosts:
        return {}
    pattern = "|".join(re.escape(h) for h in sorted(hosts)[:MAX_POD_LOOKUPS])
    try:
        info = reader.series([f'kube_pod_info{{pod=~"{_promql_string(pattern)}"}}'], start, at)
    except AppError:
        return {}  # kube-state-metrics is optional
    return {m["pod"]: m["node"] for m in info if m.get("pod") and m.get("node")}


def _promql_string(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


def _style(report: Report, series: list[dict]) -> None:
    style = report.label_style
    text = {
        "exported": ("workload labels stored as exported_pod/exported_namespace/exported_container",
                     "a kube-prometheus ServiceMonitor with honorLabels: false (the dcgm-exporter chart's and the GPU "
                     "Operator's default) puts the exporter pod's own labels in pod/namespace/container; the portal "
                     "reads the exported_* labels, so nothing changes on the bill",
                     "none needed; `serviceMonitor.honorLabels: true` (GPU Operator: "
                     "`dcgmExporter.serviceMonitor.honorLabels`) keeps the original names"),
        "honor_labels": ("honor_labels: free GPUs carry the exporter's own pod",
                         "with honor_labels a free GPU (no pod labels since dcgm-exporter 3.3.5) gets the scrape "
                         "target's pod/namespace/container; the portal recognises the exporter pod and counts the "
                         "GPU as free",
                         "none needed; if the exporter runs under another container/pod name, give it in "
                         "CHARGEBACK_EXPORTER_CONTAINERS / CHARGEBACK_EXPORTER_POD_REGEX (see `exporter-pod-billed`)"),
        "static": ("plain pod/namespace/container labels (static scrape or honor_labels)",
                   "the workload's labels as the exporter prints them; free GPUs have none", "none needed"),
        "legacy-empty": ("old exporter label names or empty pod labels",
                         "pod_name/pod_namespace/container_name (dcgm-exporter's old names, `--use-old-namespace`) or "
                         "empty strings are read like the current names",
                         "upgrade dcgm-exporter (3.3.5+ prints pod/namespace/container, none on a free GPU)"),
    }[style]
    report.add("label-style", INFO, f"label style: {style}", text[0], text[1], text[2])
    spellings = Counter("Hostname" if "Hostname" in m else "hostname" if "hostname" in m else "none" for m in series)
    if len([k for k in spellings if k != "none"]) > 1:
        report.add("host-label", INFO, "both `Hostname` and `hostname` in use",
                   f"series per spelling: {_counts(spellings)}",
                   "both spellings are read; nothing changes on the bill",
                   "none needed; for one spelling in dashboards, upgrade the older exporters (3.x prints `Hostname`)")


def _intervals(report: Report, occupancy: list) -> None:
    """Scrape interval per job, inferred from the stored samples (median gap between timestamps)."""
    per_job: dict[tuple[str, int], int] = Counter()
    unknown = 0
    for labels, points in occupancy:
        stamps = sorted(t for t, _ in points)
        gaps = [b - a for a, b in zip(stamps, stamps[1:]) if b > a]
        if not gaps:
            unknown += 1
            continue
        per_job[(labels.get("job", ""), round(statistics.median(gaps)))] += 1
    report.intervals = [{"job": job, "interval_s": s, "series": n} for (job, s), n in sorted(per_job.items())]
    if per_job:
        shown = "; ".join(f"{job or '(no job)'}: {s} s ({n} series)" for (job, s), n in sorted(per_job.items()))
        report.add("scrape-interval", INFO, "scrape intervals inferred from the data", shown,
                   "GPU-seconds come from the samples stored with each series' own interval; 15 s scrapes of an "
                   "exporter that collects every 30 s repeat values but do not double usage",
                   "none needed; the chart's `serviceMonitor.interval` (default 15s) and the exporter's "
                   "`--collect-interval` (30000 ms) may differ")
    if unknown:
        report.add("interval-unknown", WARNING, "series with a single sample in the look-back",
                   f"{unknown} series have fewer than two samples, so no interval can be inferred from them",
                   "if this persists, those units' GPU-seconds rest on neighbouring series' intervals",
                   "scrape at least every 60 s, or widen the doctor's --lookback")


def _units(report: Report, series: list[dict], exporter: ExporterIdentity, own_pods: set, pod_nodes: dict) -> tuple:
    """Per unit (host, UUID, GPU instance, vGPU replica): the workloads seen; and the physical GPUs per host."""
    units: dict[tuple, set] = defaultdict(set)
    hosts: dict[str, set[str]] = defaultdict(set)
    mig = set()
    for m in series:
        host = host_of(m, pod_nodes)
        uuid = m.get("UUID") or m.get("uuid", "")
        key = (host, uuid, m.get("GPU_I_ID", ""), m.get("vgpu", ""))
        hosts[host].add(uuid)
        if m.get("GPU_I_PROFILE"):
            mig.add(key)
        w = workload_of(m, exporter, own_pods)
        units[key]  # a free unit is still a unit
        if w is not None:
            units[key].add(w)
    free = [k for k, w in units.items() if not w]
    vgpu = [k for k in units if k[3]]
    report.summary.update(hosts=len(hosts), gpus=sum(len(u) for u in hosts.values()), units=len(units),
                          mig_units=len(mig), vgpu_units=len(vgpu), units_without_pod=len(free))
    if mig:
        profiles = Counter(m["GPU_I_PROFILE"] for m in series if m.get("GPU_I_PROFILE"))
        report.add("mig", INFO, f"{len(mig)} MIG instances", f"profiles: {_counts(profiles)}",
                   "each instance is billed as its share of the GPU (k/7 of compute slices, k/4 on A30)",
                   "none needed; Live fleet compares the running layout with the policy's (`isolation.mig`)",
                   *LIVE_FLEET)
    if vgpu:
        report.add("vgpu", INFO, f"{len(vgpu)} time-sliced replicas (`vgpu` label)",
                   "dcgm-exporter runs with --kubernetes-virtual-gpus",
                   "each replica is a share of its GPU; the GPU is never billed above its capacity",
                   "none needed", *LIVE_FLEET)
    if units and len(free) == len(units):
        report.add("no-pod-labels", ERROR, "no unit carries a workload's pod labels",
                   f"all {len(units)} units are free or held only by the exporter itself",
                   "every GPU looks idle: tenants pay nothing, the whole cost lands on the platform's idle line",
                   "enable the exporter's Kubernetes mapping (`DCGM_EXPORTER_KUBERNETES=true`, set by the chart and "
                   "the GPU Operator) and mount the kubelet pod-resources socket (chart value `kubeletPath`)")
    elif free:
        report.add("free-units", INFO, f"{len(free)} of {len(units)} units have no pod right now",
                   "free GPUs, or GPUs held only by the exporter's own pod labels",
                   "counted as idle capacity (platform balance), never as use",
                   "none needed if those GPUs are really free; Live fleet shows which they are", *LIVE_FLEET)
    return units, hosts


def _unrecognised_exporter(report: Report, series: list[dict], exporter: ExporterIdentity, own_pods: set,
                           suspects: set, pod_nodes: dict) -> None:
    """A scrape target's pod on every GPU of a node that ingestion's rule bills as a workload: the exporter
    under a name the identity settings do not know (honor_labels), its free GPUs billed as use."""
    billed: dict[tuple[str, str], dict[str, set]] = defaultdict(lambda: defaultdict(set))
    for m in series:
        w = workload_of(m, exporter, own_pods)
        if w is not None and (w.namespace, w.pod) in suspects:
            seen = billed[(w.namespace, w.pod)]
            seen["hosts"].add(host_of(m, pod_nodes))
            seen["units"].add((host_of(m, pod_nodes), m.get("UUID") or m.get("uuid", ""), m.get("GPU_I_ID", "")))
            if w.container:
                seen["containers"].add(w.container)
    if not billed:
        return
    containers = sorted({c for seen in billed.values() for c in seen["containers"]})
    pods = sorted(pod for _, pod in billed)
    fixes = []
    if containers:
        value = ",".join(dict.fromkeys([*exporter.containers, *containers]))
        fixes.append(f"CHARGEBACK_EXPORTER_CONTAINERS={value}")
    # The regex replaces the default: keep it as an alternative.
    names = sorted({_pod_pattern(pod) for pod in pods})
    fixes.append(f"CHARGEBACK_EXPORTER_POD_REGEX='{'|'.join(dict.fromkeys([exporter.pod_regex, *names]))}'")
    units = sum(len(seen["units"]) for seen in billed.values())
    report.add("exporter-pod-billed", ERROR, "dcgm-exporter's own pod is billed as a workload",
               "; ".join(f"{ns}/{pod} on every GPU of {_names(seen['hosts'])} (container "
                         f"{_names(seen['containers']) or 'none'})" for (ns, pod), seen in sorted(billed.items()))
               + f"; {units} units name it. It is a scrape target of the DCGM job, but neither its container nor its "
               "pod name is one the portal knows as the exporter's",
               f"with honor_labels a free GPU carries the exporter's pod: ingestion bills those GPU-seconds to "
               f"namespace {_names(ns for ns, _ in billed)} (`unallocated` unless a tenant claims it), so idle "
               "capacity disappears from the platform balance",
               "tell the portal the exporter's names (the worker and the doctor read the same settings): "
               + " or ".join(fixes))


def _pod_pattern(pod: str) -> str:
    """A regex for a DaemonSet's pods (<name>-<suffix>) from one of them; `.` is a pod name's only metacharacter."""
    stem, dash, _ = pod.rpartition("-")
    return stem.replace(".", r"\.") + "-.*" if dash else pod.replace(".", r"\.")


def _duplicates(report: Report, series: list[dict]) -> None:
    """The same unit stored more than once (two jobs, two instances, HA replicas)."""
    copies: dict[tuple, list[dict]] = defaultdict(list)
    for m in series:
        copies[(m.get("__name__", ""), dedup_key(m))].append(m)
    dup = {k: v for k, v in copies.items() if len(v) > 1}
    if not dup:
        return
    scrapers = {f"{m.get('job', '')}@{m.get('instance', '')}" for v in dup.values() for m in v}
    report.add("duplicate-scrape", WARNING, f"{len(dup)} series stored more than once",
               f"the same unit from several scrapes: {_names(scrapers)}",
               "the portal counts each unit once; dashboards that `sum` these series count it twice",
               "drop the second job, or query through a deduplicating layer (Thanos/Mimir with replica labels)")


def _hosts(report: Report, series: list[dict], hosts: dict, known_pods: dict, pod_nodes: dict,
           exporter: ExporterIdentity, policy: PolicyDocument | None) -> None:
    raw_hosts = {m.get("Hostname") or m.get("hostname") or "" for m in series}
    if "" in raw_hosts:
        report.add("no-hostname", ERROR, "series without a Hostname label",
                   "dcgm-exporter runs with --no-hostname (-n), or a relabeling drops it",
                   "those GPUs match no pool: unpriced, and their period cannot close without accepting them",
                   "remove `-n`/`DCGM_EXPORTER_NO_HOSTNAME` from the exporter's arguments")
    pod_names = {h for h in raw_hosts if h and (h in known_pods or exporter.is_exporter(pod=h))}
    if pod_names:
        mapped = {h for h in pod_names if h in pod_nodes}
        unknown = {h for h in pod_names if h in known_pods and h not in pod_nodes}
        severity = WARNING if mapped == pod_names else ERROR
        fix = ("set env NODE_NAME from fieldRef spec.nodeName on the exporter (the chart and the GPU Operator do; "
               "custom DaemonSets: add it, chart value `extraEnv`)")
        if unknown:
            regex = "|".join(dict.fromkeys([exporter.pod_regex, *sorted({_pod_pattern(h) for h in unknown})]))
            fix += f"; or name its pods in CHARGEBACK_EXPORTER_POD_REGEX='{regex}' so kube_pod_info maps them"
        report.add("hostname-is-pod", severity, "Hostname is the exporter pod's name (NODE_NAME not set)",
                   f"{_names(pod_names)}" + (f"; {len(mapped)} mapped to nodes through kube_pod_info" if mapped else "")
                   + (f"; {len(unknown)} in kube_pod_info but not named by the exporter pod regex, so not mapped"
                      if unknown else ""),
                   "mapped to the node through kube-state-metrics' kube_pod_info" if severity == WARNING else
                   "the host matches no pool: those GPUs are unpriced and block closing the period",
                   fix)
    if policy is None:
        report.add("no-policy", WARNING, "no policy to compare against", "no active policy version was given",
                   "nodes, namespaces and SLA red lines are not checked",
                   "import one (`chargeback policy import`) or pass --policy FILE", "/policy", "Open Policy")
        return
    outside = {h for h in hosts if h and policy.pool_for_node(h) is None}
    if outside:
        gpus = sum(len(hosts[h]) for h in outside)
        report.add("nodes-not-in-policy", ERROR, f"{len(outside)} node(s) no pool names",
                   f"{_names(outside)} ({gpus} GPUs)",
                   "their GPUs go to the `unpooled` pool: use shown, never priced; closing the period needs them "
                   "assigned or accepted with a reason",
                   "add them to a pool's `pools[].nodes` in the policy (a change request)", *POLICY_CHANGE)


def _namespaces(report: Report, units: dict, policy: PolicyDocument | None) -> None:
    if policy is None:
        return
    unclaimed = Counter(w.namespace for ws in units.values() for w in ws
                        if policy.tenant_for_namespace(w.namespace) is None)
    if unclaimed:
        report.add("unclaimed-namespaces", ERROR, f"{len(unclaimed)} namespace(s) no tenant claims",
                   ", ".join(f"{ns or '(empty)'} ({n} units)" for ns, n in sorted(unclaimed.items())[:SHOWN]),
                   "their use is billed to the platform as `unallocated`, not to a tenant",
                   "add the namespace to a tenant's `tenants[].namespaces` in the policy", *POLICY_CHANGE)


def _time_slicing(report: Report, reader: PromReader, at: float, units: dict, hosts: dict,
                  policy: PolicyDocument | None) -> None:
    """GPUs requested beyond the physical ones on a node (kube-state-metrics) mean time-slicing or MPS."""
    try:
        requests = reader.query('sum by (node) (kube_pod_container_resource_requests{resource="nvidia_com_gpu"})', at)
    except AppError:
        return
    sliced = []
    with_vgpu = {k[0] for k in units if k[3]}
    # nodes the policy marks as time-sliced are split among the pods holding GPUs there
    marked = {n for pool in (policy.pools if policy else ()) for n in getattr(pool, "time_sliced_nodes", ()) or ()}
    for labels, points in requests:
        node = labels.get("node", "")
        if node in hosts and points and points[-1][1] > len(hosts[node]) and node not in with_vgpu | marked:
            sliced.append(node)
    if sliced:
        report.add("time-slicing-without-vgpu", ERROR, "time-sliced GPUs without the `vgpu` label",
                   f"pods request more GPUs than {_names(sliced)} have; the exporter shows one of the sharing pods",
                   "a shared GPU's use goes to the one pod its series names",
                   "run dcgm-exporter with --kubernetes-virtual-gpus (env KUBERNETES_VIRTUAL_GPUS=true, chart "
                   "`arguments`/`extraEnv`) for exact per-replica attribution, or list the node in the policy's "
                   "`pools[].time_sliced_nodes` to split each GPU among the pods kube-state-metrics shows")


def _exporter_gaps(report: Report, reader: PromReader, start: float, at: float, series: list[dict],
                   pod_nodes: dict) -> None:
    """What the exporter does not collect: PROF metrics, the energy counter."""
    gpus: dict[tuple[str, str], str] = {}
    mig_gpus, prof_gpus = set(), set()
    for m in series:
        gpu = (host_of(m, pod_nodes), m.get("UUID") or m.get("uuid", ""))
        gpus[gpu] = m.get("modelName", "")
        if m.get("GPU_I_PROFILE"):
            mig_gpus.add(gpu)
        if m.get("__name__") == PROF:
            prof_gpus.add(gpu)
    no_prof = {g for g in gpus if g not in prof_gpus}
    if no_prof:
        models = Counter(gpus[g] for g in no_prof)
        geforce = all(any(k in model for k in GEFORCE) for model in models)
        report.add("no-prof", ERROR if no_prof & mig_gpus else INFO if geforce else WARNING,
                   f"{len(no_prof)} GPU(s) without `{PROF}`", f"models: {_counts(models)}",
                   "MIG instances report occupancy only through PROF metrics: without them their use is lost"
                   if no_prof & mig_gpus else
                   "occupancy still comes from GPU_UTIL; efficiency (engine activity) is not reported for them",
                   "GeForce cards have no DCGM profiling metrics; nothing to fix" if geforce else
                   "collect it: the metrics CSV (`-f`/`DCGM_EXPORTER_COLLECTORS`, chart `customMetrics` or GPU "
                   "Operator `dcgmExporter.config`) must list DCGM_FI_PROF_GR_ENGINE_ACTIVE, and the exporter needs "
                   "SYS_ADMIN for profiling")
    try:
        energy = reader.series([ENERGY, POWER], start, at)
    except AppError as exc:
        _could_not_read(report, "the energy and power series", exc, "energy falls back to default_power_watts")
        return
    has = defaultdict(set)
    for m in energy:
        has[m.get("__name__", "")].add((host_of(m, pod_nodes), m.get("UUID") or m.get("uuid", "")))
    physical = set(gpus)
    no_energy = physical - has[ENERGY]
    if no_energy:
        no_power = no_energy - has[POWER]
        report.add("no-energy", WARNING, f"{len(no_energy)} GPU(s) without the energy counter",
                   f"`{ENERGY}` missing; {len(no_power)} of them report no `{POWER}` either",
                   "their energy cost uses mean power, else the model's `default_power_watts` from the policy",
                   "list DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION (counter) in the exporter's metrics CSV")


def _services(report: Report, reader: PromReader, at: float, policy: PolicyDocument | None) -> None:
    """Each SLA service: requests present, and whether the buckets resolve its red line."""
    if policy is None:
        return
    for sla in policy.sla:
        try:
            requests = reader.query(f"count({sla.requests})", at)
            buckets = reader.query(f"group by (le) ({sla.latency_histogram})", at)
        except AppError as exc:
            _could_not_read(report, f"the serving metrics of {sla.service}", exc,
                            "breach minutes and dark time of its pool cannot be computed")
            continue
        if not requests and not buckets:
            report.add("no-serving-metrics", ERROR, f"{sla.service}: no serving metrics",
                       f"neither `{sla.requests}` nor `{sla.latency_histogram}` has a sample",
                       "every minute counts as idle: co-located training is billed at the dark-time price and no "
                       "breach is ever charged",
                       "scrape the serving pods (a PodMonitor on vLLM's /metrics), or fix the selectors in `sla[]`",
                       *POLICY_CHANGE)
            continue
        bounds = histograms.boundaries(m.get("le", "") for m, _ in buckets)
        red = Decimal(sla.p99_ms) / 1000
        if not bounds:
            report.add("no-buckets", ERROR, f"{sla.service}: no latency buckets",
                       f"`{sla.latency_histogram}` has no series with an `le` label",
                       "no minute can be judged: no breach is ever billed",
                       "point `sla[].latency_histogram` at the `_bucket` series", *POLICY_CHANGE)
        elif not red_lines.resolvable(bounds, red):
            below, above = red_lines.nearest_boundaries(bounds, red)
            near = " and ".join(f"{(b * 1000).normalize():f} ms" for b in (below, above) if b is not None)
            report.add("red-line-unresolvable", ERROR, f"{sla.service}: red line {sla.p99_ms} ms is not a bucket boundary",
                       f"buckets (s): {', '.join(f'{b:g}' for b in bounds[:12])}{' ...' if len(bounds) > 12 else ''}; "
                       f"nearest boundaries: {near}",
                       "minutes whose P99 falls in the bucket around the red line are unresolved: shown, never billed",
                       f"set `sla[].p99_ms` to a boundary ({near}), or add a bucket at {red.normalize():f} s to the histogram",
                       *POLICY_CHANGE)
