"""A real Debian `prometheus` for tests: backfilled from OpenMetrics with promtool, or scraping a target.

    with PrometheusServer.backfilled(tmp_path, openmetrics_text) as prom:
        PrometheusSource(prom.url, ...)
        prom.stop(); prom.start()   # an outage, same port and data

Ports are found by binding port 0; data lives under the given directory and is removed with it.
"""

from __future__ import annotations

import math
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterable
from pathlib import Path

import httpx

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def stop_group(process: subprocess.Popen | None) -> None:
    """SIGTERM a server started with start_new_session, SIGKILL it after 20 s, and reap it."""
    if process is None or process.poll() is not None:
        return
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def _label_value(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def openmetrics(families: Iterable[tuple[str, str, Iterable[tuple[dict, Iterable[tuple[float, float]]]]]]) -> str:
    """OpenMetrics text from (name, type, [(labels, [(t, value), ...]), ...]) families, with `# EOF`.

    A counter family is named without `_total` and its samples get the suffix, as OpenMetrics wants.
    """
    lines = []
    for name, kind, series in families:
        lines.append(f"# TYPE {name} {kind}")
        sample_name = name + "_total" if kind == "counter" else name
        for labels, points in series:
            label_text = ",".join(f'{k}="{_label_value(v)}"' for k, v in labels.items())
            prefix = f"{sample_name}{{{label_text}}}" if label_text else sample_name
            for t, v in points:
                value = "NaN" if isinstance(v, float) and math.isnan(v) else repr(float(v))
                stamp = str(int(t)) if float(t).is_integer() else repr(float(t))
                lines.append(f"{prefix} {value} {stamp}")
    lines.append("# EOF")
    return "\n".join(lines) + "\n"


class PrometheusServer:
    """One prometheus process on a free port; start/stop/restart keep the port and the data."""

    def __init__(self, root: Path, *, scrape_target: str | None = None, scrape_interval_s: float = 15,
                 extra_flags: tuple[str, ...] = ()):
        self.root = Path(root)
        self.data = self.root / "data"
        self.data.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.config = self.root / "prometheus.yml"
        interval = f"{scrape_interval_s:g}s"
        config = f"global:\n  scrape_interval: {interval}\n  evaluation_interval: {interval}\n"
        if scrape_target:
            config += (f"scrape_configs:\n  - job_name: target\n    scrape_interval: {interval}\n"
                       f"    scrape_timeout: {interval}\n    honor_labels: true\n"
                       f"    static_configs:\n      - targets: ['{scrape_target}']\n")
        self.config.write_text(config)
        self.extra_flags = extra_flags
        self.process: subprocess.Popen | None = None
        self.log = self.root / "prometheus.log"

    @classmethod
    def backfilled(cls, root: Path, text: str | Path, **kwargs) -> PrometheusServer:
        """A server whose TSDB was created from OpenMetrics (text or a file) by promtool; not yet started."""
        server = cls(root, **kwargs)
        server.backfill(text)
        return server

    @classmethod
    def from_simulator(cls, root: Path, sim, start, end, **kwargs) -> PrometheusServer:
        """A server holding the simulator's history for [start, end) (the OpenMetrics file is removed); not yet started."""
        history = root / "history.om"
        sim.write_openmetrics(history, start, end)
        server = cls.backfilled(root, history, **kwargs)
        history.unlink()
        return server

    def backfill(self, text: str | Path) -> None:
        """Write blocks from OpenMetrics into the data directory (`promtool tsdb create-blocks-from`)."""
        path = Path(text) if isinstance(text, Path) else self.root / "backfill.om"
        if not isinstance(text, Path):
            path.write_text(text)
        # 24 h blocks keep the block count (and startup time) low for a day of history.
        done = subprocess.run([PROMTOOL, "tsdb", "create-blocks-from", "openmetrics", "--max-block-duration=24h",
                               str(path), str(self.data)], capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            raise RuntimeError(f"promtool failed: {done.stderr[-2000:]}")

    def start(self, timeout_s: float = 30) -> PrometheusServer:
        args = [
            PROMETHEUS, f"--config.file={self.config}", f"--storage.tsdb.path={self.data}",
            f"--web.listen-address=127.0.0.1:{self.port}", "--storage.tsdb.retention.time=100y",
            "--web.enable-lifecycle", "--log.level=warn", *self.extra_flags,
        ]
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.wait_ready(timeout_s)
        return self

    def wait_ready(self, timeout_s: float = 30) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(f"prometheus exited: {self.log.read_text()[-2000:]}")
            try:
                if httpx.get(self.url + "/-/ready", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise TimeoutError(f"prometheus not ready after {timeout_s}s: {self.log.read_text()[-2000:]}")

    def stop(self) -> None:
        stop_group(self.process)
        self.process = None

    def query(self, promql: str, at: float | None = None) -> list[dict]:
        """An instant query, for assertions."""
        params = {"query": promql}
        if at is not None:
            params["time"] = str(at)
        body = httpx.get(self.url + "/api/v1/query", params=params, timeout=30).json()
        if body.get("status") != "success":
            raise RuntimeError(body)
        return body["data"]["result"]

    def __enter__(self) -> PrometheusServer:
        if self.process is None:
            self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
