"""A real single-node VictoriaMetrics (Debian `victoria-metrics`) for tests, loaded from Prometheus TSDB blocks.

    with VictoriaMetricsServer(tmp_path / "vm") as vm:
        vm.load_prometheus_blocks(prom.data)      # vmctl prometheus --prom-snapshot
        PrometheusSource(vm.url, ...)             # the same HTTP query API

Caching and the latency offset are turned off so that a query answers what is stored, now.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import time
from pathlib import Path

import httpx

from tests.support.prometheus import free_port, stop_group

VICTORIA = shutil.which("victoria-metrics") or "/usr/bin/victoria-metrics"
VMCTL = shutil.which("vmctl") or "/usr/bin/vmctl"
SCRIPT = shutil.which("script") or "/usr/bin/script"


class VictoriaMetricsServer:
    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.data = self.root / "data"
        self.data.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = self.root / "victoria.log"
        self.process: subprocess.Popen | None = None

    def start(self, timeout_s: float = 30) -> "VictoriaMetricsServer":
        args = [VICTORIA, f"-storageDataPath={self.data}", f"-httpListenAddr=127.0.0.1:{self.port}",
                "-retentionPeriod=100y", "-dedup.minScrapeInterval=1ms", "-search.disableCache", "-search.latencyOffset=0s", "-loggerLevel=WARN"]
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"victoria-metrics exited: {self.log.read_text()[-2000:]}")
            try:
                if httpx.get(self.url + "/health", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise TimeoutError(f"victoria-metrics not ready after {timeout_s}s: {self.log.read_text()[-2000:]}")

    def load_prometheus_blocks(self, prometheus_data: Path, timeout_s: float = 60) -> int:
        """Import every block of a (stopped) Prometheus data directory with `vmctl prometheus --prom-snapshot`.

        Returns once every sample the blocks hold is searchable; returns their number.
        """
        command = [VMCTL, "prometheus", "-s", "--vm-disable-progress-bar", "--vm-concurrency", "1",
                   "--prom-snapshot", str(prometheus_data), "--vm-addr", self.url]
        failure = ""
        for _ in range(3):
            # vmctl 1.79 insists on a terminal (it fails with "inappropriate ioctl" without one): `script` gives it a pty.
            done = subprocess.run([SCRIPT, "-qec", shlex.join(command), "/dev/null"], capture_output=True, text=True,
                                  timeout=600, stdin=subprocess.DEVNULL)
            stats = {k: int(v) for k, v in re.findall(r"(total samples|samples|min time|max time): (\d+)", done.stdout)}
            if done.returncode != 0 or not {"samples", "min time", "max time"} <= stats.keys():
                failure = f"vmctl failed: {done.stdout[-2000:]} {done.stderr[-2000:]}"
                continue
            # What VictoriaMetrics can search decides, not vmctl's own tally (seen short under load):
            # import again when it falls short (dedup makes a second import idempotent).
            found = self._searchable(stats, timeout_s)
            if found >= stats["samples"]:
                return found
            failure = f"victoria-metrics counts {found} samples, the blocks hold {stats['samples']}"
        raise RuntimeError(failure)

    def _searchable(self, stats: dict[str, int], timeout_s: float) -> int:
        """Samples VictoriaMetrics counts in the imported span, once it holds them all or timeout_s has passed."""
        span_s = (stats["max time"] - stats["min time"]) // 1000 + 2
        params = {"query": f'sum(count_over_time({{__name__=~".+"}}[{span_s}s]))', "time": stats["max time"] / 1000 + 1}
        deadline = time.monotonic() + timeout_s
        while True:
            httpx.get(self.url + "/internal/force_flush", timeout=30)
            result = httpx.get(self.url + "/api/v1/query", params=params, timeout=30).json()["data"]["result"]
            found = int(float(result[0]["value"][1])) if result else 0
            if found >= stats["samples"] or time.monotonic() > deadline:
                return found
            time.sleep(0.2)

    def stop(self) -> None:
        stop_group(self.process)
        self.process = None

    def __enter__(self) -> "VictoriaMetricsServer":
        if self.process is None:
            self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
