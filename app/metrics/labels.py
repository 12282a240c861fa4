"""Who holds a GPU unit, read from one stored dcgm-exporter series' labels. Pure: no I/O.

How Prometheus stores the exporter's pod labels depends on the install (SPEC section 2):
- kube-prometheus ServiceMonitor, `honorLabels: false` (dcgm-exporter Helm chart and GPU Operator
  default): the workload's labels become `exported_pod`/`exported_namespace`/`exported_container` and
  `pod`/`namespace`/`container` are the scrape target's, i.e. the exporter pod's own;
- `honor_labels: true`: the workload's labels stay; a free unit (no pod labels since exporter 3.3.5,
  empty strings before, which Prometheus drops) is filled in with the exporter pod's labels;
- a plain static scrape: the workload's labels as the exporter prints them, nothing on a free unit.
So a series is a *free* unit when it names no pod, or only the exporter's own pod. One rule decides
that, for ingestion and `chargeback doctor` alike: `workload_of(m, exporter, target_pods(series))`.
The exporter's pod is recognised by its container or pod name (`ExporterIdentity`: defaults from the
Helm chart and the GPU Operator's manifests, settings CHARGEBACK_EXPORTER_CONTAINERS/_POD_REGEX), or
as the scrape target seen beside `exported_*` labels (`target_pods`). `suspected_exporter_pods` (a
scrape target's pod on every GPU of a node) is only the doctor's cross-check: where it names a pod the
rule bills, the doctor reports the mis-billing and the setting that fixes it; it never decides.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

# dcgm-exporter Helm chart: container `exporter`, Service/job = the release fullname (`dcgm-exporter`),
# pods `dcgm-exporter-xxxxx`. GPU Operator: DaemonSet, container, Service and job (jobLabel: app)
# `nvidia-dcgm-exporter` in namespace `gpu-operator`.
DEFAULT_CONTAINERS = ("exporter", "nvidia-dcgm-exporter", "dcgm-exporter")
DEFAULT_JOBS = ("dcgm-exporter", "nvidia-dcgm-exporter")
DEFAULT_POD_REGEX = r"(nvidia-)?dcgm-exporter(-.*)?"
# dcgm-exporter's old attribute names (before `pod`/`namespace`/`container`), still printed by some builds.
OLD_NAMES = {"pod": "pod_name", "namespace": "pod_namespace", "container": "container_name"}
# Labels that only say who scraped a series: copies differing only in these are one unit's duplicates.
SCRAPE_LABELS = ("job", "instance", "endpoint", "service", "prometheus", "prometheus_replica", "replica",
                 "__replica__", "cluster_replica")


@dataclass(frozen=True)
class Workload:
    """The pod (and time-slicing replica) a series says holds its unit."""

    namespace: str
    pod: str
    container: str = ""
    vgpu: str = ""  # the replica index with --kubernetes-virtual-gpus, else ""


@dataclass(frozen=True)
class ExporterIdentity:
    """How to recognise dcgm-exporter's own pod (settings may override each rule)."""

    containers: tuple[str, ...] = DEFAULT_CONTAINERS
    jobs: tuple[str, ...] = DEFAULT_JOBS
    pod_regex: str = DEFAULT_POD_REGEX

    @classmethod
    def from_settings(cls, settings: object) -> ExporterIdentity:
        """Identity from `exporter_containers`/`exporter_jobs`/`exporter_pod_regex` settings (comma lists)."""
        def listed(name: str, default: tuple[str, ...]) -> tuple[str, ...]:
            value = getattr(settings, name, None)
            if not value:
                return default
            return tuple(v.strip() for v in value.split(",") if v.strip()) if isinstance(value, str) else tuple(value)
        return cls(containers=listed("exporter_containers", DEFAULT_CONTAINERS),
                   jobs=listed("exporter_jobs", DEFAULT_JOBS),
                   pod_regex=getattr(settings, "exporter_pod_regex", None) or DEFAULT_POD_REGEX)

    def is_exporter(self, *, pod: str = "", container: str = "", job: str = "") -> bool:
        """Whether a pod/container/job names the exporter itself."""
        if container and container in self.containers:
            return True
        if pod and re.fullmatch(self.pod_regex, pod):
            return True
        # The job alone only counts when the series names no other container than the exporter's.
        return bool(job) and job in self.jobs and not container and not pod


DEFAULT_EXPORTER = ExporterIdentity()


def host_of(m: Mapping[str, str], pod_nodes: Mapping[str, str] | None = None) -> str:
    """The node of a series: `Hostname`/`hostname`, mapped through kube_pod_info when it is the exporter pod's name."""
    host = m.get("Hostname") or m.get("hostname") or ""
    if pod_nodes:
        # Without NODE_NAME the exporter prints its own pod name; kube_pod_info knows that pod's node.
        if host in pod_nodes:
            return pod_nodes[host]
        if not host:
            target = m.get("pod", "") if _exported(m) else ""
            return pod_nodes.get(target, "")
    return host


def _exported(m: Mapping[str, str]) -> bool:
    return any(k in m for k in ("exported_pod", "exported_namespace", "exported_container"))


def _raw(m: Mapping[str, str], name: str) -> str:
    return m.get(name) or m.get(OLD_NAMES[name]) or ""


def target_pods(series: Iterable[Mapping[str, str]]) -> set[tuple[str, str]]:
    """(namespace, pod) of the scrape targets seen beside `exported_*` labels: the exporter's own, whatever its names."""
    return {(m.get("namespace", ""), m["pod"]) for m in series if m.get("exported_pod") and m.get("pod")}


def workload_of(m: Mapping[str, str], exporter: ExporterIdentity = DEFAULT_EXPORTER,
                exporter_pods: frozenset[tuple[str, str]] | set[tuple[str, str]] = frozenset()) -> Workload | None:
    """The workload holding the series' unit, or None for a free unit (no pod, or the exporter's own).

    The one rule for ingestion and the doctor; `exporter_pods` is `target_pods` of the series read with `m`.
    """
    vgpu = m.get("vgpu", "")
    if _exported(m):
        pod = m.get("exported_pod", "")
        if not pod:
            return None  # the unexported pod labels are the scrape target's: the exporter
        return Workload(namespace=m.get("exported_namespace", ""), pod=pod,
                        container=m.get("exported_container", ""), vgpu=vgpu)
    pod, namespace, container = _raw(m, "pod"), _raw(m, "namespace"), _raw(m, "container")
    if not pod:
        return None
    if exporter.is_exporter(pod=pod, container=container) or (namespace, pod) in exporter_pods:
        return None
    return Workload(namespace=namespace, pod=pod, container=container, vgpu=vgpu)


def suspected_exporter_pods(series: Iterable[Mapping[str, str]],
                            targets: Iterable[Mapping[str, str]]) -> set[tuple[str, str]]:
    """The doctor's cross-check: (namespace, pod) on every GPU of a node at once that is also a scrape target (`up`'s pod).

    A training pod holding all GPUs of a node is on every GPU too, but it is never the target that
    was scraped, so only pods that `up` (or any series carrying target labels) names qualify. Never
    used to decide a free unit (ingestion cannot see `up` per hour): see `workload_of`.
    """
    target_pods = {(t.get("namespace", ""), t.get("pod", "")) for t in targets if t.get("pod")}
    gpus: dict[str, set[str]] = defaultdict(set)
    holders: dict[tuple[str, str], dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for m in series:
        host, uuid = host_of(m), m.get("UUID") or m.get("uuid", "")
        gpus[host].add(uuid)
        pod = _raw(m, "pod")  # behind a ServiceMonitor the target's pod is on busy (exported_*) series too
        if pod:
            holders[(_raw(m, "namespace"), pod)][host].add(uuid)
    return {pod for pod, per_host in holders.items() if pod in target_pods
            and any(uuids == gpus[host] for host, uuids in per_host.items())}


def label_style(series: Iterable[Mapping[str, str]], exporter: ExporterIdentity = DEFAULT_EXPORTER,
                exporter_pods: frozenset[tuple[str, str]] | set[tuple[str, str]] = frozenset()) -> str:
    """How the store labels pods: "exported" | "honor_labels" | "static" | "legacy-empty"."""
    honor = legacy = False
    for m in series:
        if _exported(m):
            return "exported"
        if any(k in m for k in OLD_NAMES.values()) or any(m.get(k) == "" for k in ("pod", "namespace", "container")):
            legacy = True
        pod, container = _raw(m, "pod"), _raw(m, "container")
        if pod and (exporter.is_exporter(pod=pod, container=container) or (_raw(m, "namespace"), pod) in exporter_pods):
            honor = True
    if honor:
        return "honor_labels"
    return "legacy-empty" if legacy else "static"


def dedup_key(m: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """A series' labels without the ones that only name who scraped it (two jobs, HA replicas)."""
    return tuple(sorted((k, v) for k, v in m.items() if k not in SCRAPE_LABELS and k != "__name__"))
