"""Exporters for the doctor tests: dcgm-exporter and vLLM text exposition served over HTTP, scraped by a real
Prometheus whose scrape configs reproduce each install (ServiceMonitor target labels, honor_labels, static).

The dcgm-exporter lines follow its renderer (internal/pkg/rendermetrics): `gpu, UUID, pci_bus_id, device,
modelName[, GPU_I_PROFILE, GPU_I_ID], hostname` (3.x: `Hostname`), then label fields such as
`DCGM_FI_DRIVER_VERSION`, then the pod attributes in key order `container, namespace, pod[, vgpu]`; a free
GPU prints no pod attributes (3.3.5+).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from tests.support.prometheus import PrometheusServer, free_port

A100 = "NVIDIA A100-SXM4-80GB"
H100 = "NVIDIA H100 80GB HBM3"
RTX4090 = "NVIDIA GeForce RTX 4090"
DRIVER = "550.54.15"
HELP = {
    "DCGM_FI_DEV_GPU_UTIL": ("gauge", "GPU utilization (in %)."),
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": ("gauge", "Ratio of time the graphics engine is active."),
    "DCGM_FI_DEV_POWER_USAGE": ("gauge", "Power draw (in W)."),
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": ("counter", "Total energy consumption since boot (in mJ)."),
}
# vLLM's e2e request latency buckets (seconds), as vllm/v1/metrics/loggers.py defines them.
VLLM_E2E = ("0.3", "0.5", "0.8", "1.0", "1.5", "2.0", "2.5", "5.0", "10.0", "15.0", "20.0", "30.0", "40.0",
            "50.0", "60.0", "120.0", "240.0", "480.0", "960.0", "1920.0", "7680.0")


@dataclass(frozen=True)
class Unit:
    """One GPU or MIG instance as the exporter prints it; `pod` empty = free."""

    gpu: int
    uuid: str
    model: str
    host: str
    pod: str = ""
    namespace: str = ""
    container: str = "main"
    mig: tuple[str, str] | None = None  # (GPU_I_PROFILE, GPU_I_ID)
    vgpu: str = ""
    host_label: str = "hostname"  # dcgm-exporter 4.x; 3.x prints `Hostname`


def unit_labels(u: Unit) -> str:
    parts = [f'gpu="{u.gpu}"', f'UUID="{u.uuid}"', f'pci_bus_id="00000000:{0x07 + u.gpu:02X}:00.0"',
             f'device="nvidia{u.gpu}"', f'modelName="{u.model}"']
    if u.mig:
        parts += [f'GPU_I_PROFILE="{u.mig[0]}"', f'GPU_I_ID="{u.mig[1]}"']
    parts += [f'{u.host_label}="{u.host}"', f'DCGM_FI_DRIVER_VERSION="{DRIVER}"']
    if u.pod:
        parts += [f'container="{u.container}"', f'namespace="{u.namespace}"', f'pod="{u.pod}"']
        if u.vgpu:
            parts.append(f'vgpu="{u.vgpu}"')
    return ",".join(parts)


def dcgm_exposition(units: list[Unit], *, prof: bool = True, energy: bool = True) -> str:
    """The exporter's /metrics page: PROF only where the card has it, GPU_UTIL only on whole GPUs."""
    out = []
    # device-level fields (power, energy) come once per physical GPU, without MIG or pod labels
    physical = list({u.uuid: replace(u, mig=None, pod="") for u in units if u.mig}.values())
    for metric, (kind, text) in HELP.items():
        rows = []
        device_level = metric in ("DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION")
        for u in [u for u in units if not (device_level and u.mig)] + (physical if device_level else []):
            if metric == "DCGM_FI_DEV_GPU_UTIL" and u.mig:
                continue  # MIG instances report no GPU_UTIL
            if metric == "DCGM_FI_PROF_GR_ENGINE_ACTIVE" and (not prof or "GeForce" in u.model):
                continue
            if metric == "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION" and not energy:
                continue
            value = {"DCGM_FI_DEV_GPU_UTIL": 87 if u.pod else 0, "DCGM_FI_PROF_GR_ENGINE_ACTIVE": 0.61 if u.pod else 0,
                     "DCGM_FI_DEV_POWER_USAGE": 312.5, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": 123456789}[metric]
            rows.append(f"{metric}{{{unit_labels(u)}}} {value}")
        if rows:
            out += [f"# HELP {metric} {text}", f"# TYPE {metric} {kind}", *rows]
    return "\n".join(out) + "\n"


def vllm_exposition(model: str = "meta-llama/Llama-3.1-8B-Instruct") -> str:
    """vLLM's /metrics histogram and request counter (most requests between 0.3 s and 0.5 s)."""
    name = "vllm:e2e_request_latency_seconds"
    labels = f'engine="0",model_name="{model}"'
    cumulative, total = [], 0
    for le in VLLM_E2E:
        total += {"0.3": 10, "0.5": 900, "0.8": 80}.get(le, 1)
        cumulative.append((le, total))
    out = [f"# HELP {name} Histogram of e2e request latency in seconds.", f"# TYPE {name} histogram"]
    out += [f'{name}_bucket{{{labels},le="{le}"}} {n}' for le, n in cumulative]
    out += [f'{name}_bucket{{{labels},le="+Inf"}} {total}', f"{name}_sum{{{labels}}} {total * 0.42:.3f}",
            f"{name}_count{{{labels}}} {total}"]
    out += ["# HELP vllm:request_success_total Count of successfully processed requests.",
            "# TYPE vllm:request_success_total counter",
            f'vllm:request_success_total{{{labels},finished_reason="stop"}} {total}']
    return "\n".join(out) + "\n"


class _Handler(BaseHTTPRequestHandler):
    pages: dict[str, str] = {}

    def do_GET(self) -> None:
        body = self.pages.get(self.path.split("?")[0])
        if body is None:
            self.send_error(404)
            return
        data = body.encode()
        self.send_response(200)
        kind = "text/html" if body.startswith("<") else "application/json" if body.startswith("{") else \
            "text/plain; version=0.0.4; charset=utf-8"
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args) -> None:
        pass


@contextmanager
def serving(pages: dict[str, str]) -> Iterator[str]:
    """Serve `pages` (path -> text) on a free loopback port; yields host:port."""
    handler = type("Pages", (_Handler,), {"pages": pages})
    server = ThreadingHTTPServer(("127.0.0.1", free_port()), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def scrape_job(name: str, target: str, path: str, *, honor_labels: bool, labels: dict[str, str] | None = None,
               interval_s: int = 1) -> str:
    """One scrape config; `labels` are target labels, as prometheus-operator sets pod/namespace/container/job."""
    text = (f"  - job_name: {name}\n    scrape_interval: {interval_s}s\n    scrape_timeout: {interval_s}s\n"
            f"    metrics_path: {path}\n    honor_labels: {'true' if honor_labels else 'false'}\n"
            f"    static_configs:\n      - targets: ['{target}']\n")
    if labels:
        text += "        labels:\n" + "".join(f"          {k}: \"{v}\"\n" for k, v in labels.items())
    return text


@contextmanager
def scraping(root: Path, jobs: list[str], *, expect: str, series: int, samples: int = 3,
             timeout_s: float = 60) -> Iterator[PrometheusServer]:
    """A real Prometheus running `jobs`; ready once `series` series of `expect` hold `samples` samples each."""
    prom = PrometheusServer(root)
    prom.config.write_text("global:\n  scrape_interval: 1s\nscrape_configs:\n" + "".join(jobs))
    prom.start()
    try:
        deadline = time.monotonic() + timeout_s
        while True:  # wait for state: enough stored samples to infer intervals from
            counts = [len(r["values"]) for r in prom.query(f"{expect}[1m]")]  # raw samples per series
            if len(counts) >= series and min(counts) >= samples:
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"Prometheus stored too few samples of {expect}: {counts}")
            time.sleep(0.2)
        yield prom
    finally:
        prom.stop()
