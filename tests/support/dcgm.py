"""dcgm-exporter fixtures in its exact text format, scraped by a real Prometheus the way each install does.

`render` prints series as dcgm-exporter's renderer (internal/pkg/rendermetrics) does: gpu, UUID,
pci_bus_id, device, modelName, [GPU_I_PROFILE, GPU_I_ID], hostname (or `Hostname` from 3.x), then
its label fields (DCGM_FI_DRIVER_VERSION) and the pod attributes container, namespace, pod[, vgpu],
each map in Go's sorted key order. `oracle` lets a real Prometheus scrape the fixtures with the
scrape configs of each install (a kube-prometheus ServiceMonitor is a job with the exporter pod's
target labels and `honor_labels: false`) and returns the label sets it stored; `history` backfills
hours of samples for exactly those label sets at each job's interval.
"""

from __future__ import annotations

import threading
import time
import zlib
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx

from tests.support.prometheus import PrometheusServer, openmetrics

A100 = "NVIDIA A100-SXM4-80GB"
RTX4090 = "NVIDIA GeForce RTX 4090"
DRIVER = "550.54.15"
HELP = {"DCGM_FI_DEV_GPU_UTIL": "GPU utilization (in %).",
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE": "Ratio of time the graphics engine is active."}
VALUE = {"DCGM_FI_DEV_GPU_UTIL": 50.0, "DCGM_FI_PROF_GR_ENGINE_ACTIVE": 0.5}


@dataclass(frozen=True)
class Pod:
    namespace: str
    pod: str
    container: str
    vgpu: str = ""


@dataclass
class Unit:
    """One GPU or MIG instance and who holds it when: [(pod or None, first minute, end minute)]."""

    host: str
    gpu: int
    model: str
    holders: list[tuple[Pod | None, int, int]]
    profile: str = ""
    instance: str = ""
    host_label: str = "hostname"  # dcgm-exporter 4.x; 3.x printed `Hostname`

    @property
    def uuid(self) -> str:
        return f"GPU-{zlib.crc32(self.host.encode()):08x}-0000-4000-8000-{self.gpu:012d}"

    @property
    def metrics(self) -> tuple[str, ...]:
        if self.instance:  # MIG instances report PROF metrics only
            return ("DCGM_FI_PROF_GR_ENGINE_ACTIVE",)
        if self.model == RTX4090:  # GeForce: no PROF metrics
            return ("DCGM_FI_DEV_GPU_UTIL",)
        return ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_PROF_GR_ENGINE_ACTIVE")


def _line(metric: str, unit: Unit, pod: Pod | None, value: float) -> str:
    text = (f'{metric}{{gpu="{unit.gpu}",UUID="{unit.uuid}",pci_bus_id="00000000:{unit.gpu + 7:02X}:00.0",'
            f'device="nvidia{unit.gpu}",modelName="{unit.model}"')
    if unit.profile:
        text += f',GPU_I_PROFILE="{unit.profile}",GPU_I_ID="{unit.instance}"'
    text += f',{unit.host_label}="{unit.host}",DCGM_FI_DRIVER_VERSION="{DRIVER}"'
    if pod is not None:
        text += f',container="{pod.container}",namespace="{pod.namespace}",pod="{pod.pod}"'
        if pod.vgpu:
            text += f',vgpu="{pod.vgpu}"'
    return text + f"}} {value:g}"


def render(units: Iterable[Unit]) -> str:
    """Every holder of every unit (busy and free versions alike), as dcgm-exporter prints them."""
    units = list(units)
    out = []
    for metric in ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_PROF_GR_ENGINE_ACTIVE"):
        out.append(f"# HELP {metric} {HELP[metric]}\n# TYPE {metric} gauge")
        for unit in units:
            if metric in unit.metrics:
                for pod in dict.fromkeys(p for p, _, _ in unit.holders):
                    out.append(_line(metric, unit, pod, VALUE[metric]))
    return "\n".join(out) + "\n"


@dataclass
class Job:
    """One scrape job over one fixture endpoint, as an install configures it."""

    name: str
    endpoint: str  # key of the fixture text it scrapes
    interval_s: int
    offset_s: int  # where in the interval its scrapes land (Prometheus spreads targets)
    honor_labels: bool = False
    target_labels: dict[str, str] = field(default_factory=dict)


@contextmanager
def _serve(texts: dict[str, str]) -> Iterator[dict[str, str]]:
    """Each fixture text on its own loopback port; yields endpoint -> host:port."""
    servers = {}
    for name, text in texts.items():
        body = text.encode()

        class Handler(BaseHTTPRequestHandler):
            payload = body

            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(self.payload)))
                self.end_headers()
                self.wfile.write(self.payload)

            def log_message(self, format: str, *args) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers[name] = server
    try:
        yield {name: f"127.0.0.1:{s.server_address[1]}" for name, s in servers.items()}
    finally:
        for server in servers.values():
            server.shutdown()
            server.server_close()


def _config(jobs: list[Job], addresses: dict[str, str]) -> str:
    lines = ["global:", "  scrape_interval: 1s", "scrape_configs:"]
    for job in jobs:
        lines += [f"  - job_name: {job.name}", "    scrape_interval: 1s", "    scrape_timeout: 1s",
                  f"    honor_labels: {'true' if job.honor_labels else 'false'}",
                  "    static_configs:", f"      - targets: ['{addresses[job.endpoint]}']"]
        if job.target_labels:
            lines.append("        labels:")
            lines += [f"          {k}: {v!r}" for k, v in job.target_labels.items()]
    return "\n".join(lines) + "\n"


def oracle(root: Path, units: dict[str, list[Unit]], jobs: list[Job], timeout_s: float = 60) -> list[dict]:
    """The DCGM label sets a real Prometheus stores when `jobs` scrape the rendered fixtures."""
    texts = {name: render(us) for name, us in units.items()}
    expected = sum(sum(1 for line in texts[j.endpoint].splitlines() if not line.startswith("#")) for j in jobs)
    with _serve(texts) as addresses:
        server = PrometheusServer(root)
        server.config.write_text(_config(jobs, addresses))
        with server.start():
            deadline = time.monotonic() + timeout_s
            while True:
                found = httpx.get(server.url + "/api/v1/series", params={"match[]": '{__name__=~"DCGM_.*"}'},
                                  timeout=10).json()["data"]
                if len(found) >= expected or time.monotonic() > deadline:
                    break
                time.sleep(0.2)  # poll the state, not a fixed wait: returns as soon as all are stored
    assert len(found) == expected, (len(found), expected)
    for labels in found:  # back to the fixture's addresses by endpoint name (ports change between runs)
        labels["instance"] = next(name for name, a in addresses.items() if a == labels["instance"])
    return found


def history(stored: list[dict], units: dict[str, list[Unit]], jobs: list[Job], start: int, hours: int,
            extra: Iterable[tuple[str, str, list]] = ()) -> str:
    """OpenMetrics for `hours` from `start`: each stored label set sampled at its job's interval while held."""
    by_job = {j.name: j for j in jobs}
    families: dict[str, list] = {}
    for labels in stored:
        labels = dict(labels)
        metric = labels.pop("__name__")
        job = by_job[labels["job"]]
        unit = next(u for u in units[job.endpoint] if u.uuid == labels["UUID"] and u.instance == labels.get("GPU_I_ID", ""))
        pod = _fixture_pod(labels, unit)
        points = []
        for holder, a, b in unit.holders:
            if holder == pod:
                first = start + a * 60 + job.offset_s
                points += [(t, VALUE[metric]) for t in range(first, start + b * 60, job.interval_s)]
        families.setdefault(metric, []).append((labels, sorted(points)))
    return openmetrics([*((name, "gauge", series) for name, series in families.items()), *extra])


def kube_state_metrics(start: int, holders: list[tuple[Pod, str, int, int, int]], exporters: dict[str, str],
                       hours: int, interval_s: int = 30) -> list[tuple[str, str, list]]:
    """kube-state-metrics 2.x families: GPU requests and pod info of (pod, node, GPUs, first, end minute) holders,
    and kube_pod_info of exporter pods (pod -> node) for the whole window."""
    def points(a: int, b: int, value: float) -> list:
        return [(t, value) for t in range(start + a * 60 + 5, start + b * 60, interval_s)]

    ksm = {"job": "kube-state-metrics", "instance": "10.0.0.9:8080"}
    requests, info = [], []
    for pod, node, gpus, a, b in holders:
        requests.append(({**ksm, "namespace": pod.namespace, "pod": pod.pod, "uid": f"uid-{pod.pod}",
                          "container": pod.container, "node": node, "resource": "nvidia_com_gpu", "unit": "integer"},
                         points(a, b, gpus)))
        info.append(({**ksm, "namespace": pod.namespace, "pod": pod.pod, "uid": f"uid-{pod.pod}", "node": node,
                      "created_by_kind": "Job", "host_network": "false"}, points(a, b, 1)))
    for pod, node in exporters.items():
        info.append(({**ksm, "namespace": "gpu-operator", "pod": pod, "uid": f"uid-{pod}", "node": node,
                      "created_by_kind": "DaemonSet", "created_by_name": "nvidia-dcgm-exporter",
                      "host_network": "false"}, points(0, hours * 60, 1)))
    return [("kube_pod_container_resource_requests", "gauge", requests), ("kube_pod_info", "gauge", info)]


def _fixture_pod(labels: dict, unit: Unit) -> Pod | None:
    """Which fixture holder a stored label set came from (the workload's labels, wherever they were stored)."""
    for pod in {p for p, _, _ in unit.holders if p is not None}:
        names = (labels.get("exported_pod"), labels.get("pod"))
        if pod.pod in names and labels.get("vgpu", "") == pod.vgpu:
            return pod
    return None
