"""A real single-node VictoriaMetrics (Debian `victoria-metrics`) for tests, loaded from Prometheus TSDB blocks.

    with VictoriaMetricsServer(tmp_path / "vm") as vm:
        vm.load_prometheus_blocks(prom.data)      # every sample of the blocks, through /api/v1/import
        PrometheusSource(vm.url, ...)             # the same HTTP query API

Caching and the latency offset are turned off so that a query answers what is stored, now.

The blocks are not imported with `vmctl prometheus --prom-snapshot`: Debian's vmctl (1.79) silently drops the last
series it has read whenever its import worker has not drained its input queue (4 series per worker) by the time the
reader finishes (`Importer.Close` and the queue race in one `select`; drained on close upstream since 1.85.0, commit
05cf8a6ecc). Its own tally counts only what it sent, and a retry races the same way on the same last series. Instead
promtool (the Prometheus TSDB code) dumps every sample of the blocks, and they are posted in the JSON-lines import
format vmctl uses; the load returns once searches see exactly the blocks' series and samples.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import httpx

from tests.support.prometheus import PROMTOOL, free_port, stop_group

VICTORIA = shutil.which("victoria-metrics") or "/usr/bin/victoria-metrics"

_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"(?:, |})')
_ESCAPE = re.compile(r'\\(?:x([0-9a-fA-F]{2})|u([0-9a-fA-F]{4})|U([0-9a-fA-F]{8})|(.))', re.DOTALL)
_SIMPLE = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v", "\\": "\\", '"': '"'}


def _go_unquote(text: str) -> str:
    """The inverse of Go's strconv.Quote body (promtool prints label values with it)."""
    if "\\" not in text:
        return text
    out, raw, pos = [], bytearray(), 0

    def flush_raw() -> None:
        if raw:
            out.append(raw.decode("utf-8", errors="surrogateescape"))
            raw.clear()

    for m in _ESCAPE.finditer(text):
        if m.start() > pos:
            flush_raw()
            out.append(text[pos:m.start()])
        byte, u4, u8, simple = m.groups()
        if byte:
            raw.append(int(byte, 16))
        else:
            flush_raw()
            out.append(chr(int(u4 or u8, 16)) if (u4 or u8) else _SIMPLE[simple])
        pos = m.end()
    flush_raw()
    out.append(text[pos:])
    return "".join(out)


def _labels(text: str) -> dict[str, str]:
    labels = {m.group(1): _go_unquote(m.group(2)) for m in _LABEL.finditer(text)}
    if not text.startswith("{") or "__name__" not in labels:
        raise ValueError(f"unexpected series in promtool's dump: {text!r}")
    return labels


def _value(text: str) -> str:
    """A dumped value (Go %g: the shortest text that reads back as the same float64) as the import format takes it."""
    value = float(text)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(value)


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def dump_blocks(prometheus_data: Path, scratch: Path) -> tuple[list[str], int, int, int]:
    """Every sample of the blocks in a (stopped) Prometheus data directory, as /api/v1/import JSON lines.

    Returns (lines, samples, min timestamp ms, max timestamp ms). Raises unless the dump holds exactly the samples the
    blocks' meta.json files count. promtool reads a (hard-linked) copy: it wants a WAL directory and writes chunks_head.
    """
    metas = [json.loads(p.read_text()) for p in Path(prometheus_data).glob("*/meta.json")]
    if not metas:
        raise RuntimeError(f"no TSDB blocks in {prometheus_data}")
    expected = sum(m["stats"]["numSamples"] for m in metas)
    shutil.rmtree(scratch, ignore_errors=True)
    shutil.copytree(prometheus_data, scratch, copy_function=_link_or_copy,
                    ignore=shutil.ignore_patterns("wal", "chunks_head", "lock", "queries.active"))
    (scratch / "wal").mkdir()
    try:
        done = subprocess.run([PROMTOOL, "tsdb", "dump", str(scratch)], capture_output=True, text=True, timeout=600,
                              check=False)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if done.returncode != 0:
        raise RuntimeError(f"promtool tsdb dump failed: {done.stderr[-2000:]}")
    series: dict[str, tuple[list[int], list[str]]] = {}
    samples, lo, hi = 0, None, None
    for line in filter(None, done.stdout.split("\n")):  # one sample a line; label values are Go-quoted
        labels, value, stamp = line.rsplit(" ", 2)
        timestamps, values = series.setdefault(labels, ([], []))
        t = int(stamp)
        timestamps.append(t)
        values.append(_value(value))
        samples += 1
        lo = t if lo is None or t < lo else lo
        hi = t if hi is None or t > hi else hi
    if samples != expected:
        raise RuntimeError(f"promtool dumped {samples} samples, the blocks' meta.json count {expected}")
    lines = [f'{{"metric":{json.dumps(_labels(labels), separators=(",", ":"))},'
             f'"timestamps":[{",".join(map(str, ts))}],"values":[{",".join(vs)}]}}'
             for labels, (ts, vs) in series.items()]
    return lines, samples, lo, hi


class VictoriaMetricsServer:
    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.data = self.root / "data"
        self.data.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = self.root / "victoria.log"
        self.process: subprocess.Popen | None = None

    def start(self, timeout_s: float = 30) -> VictoriaMetricsServer:
        args = [VICTORIA, f"-storageDataPath={self.data}", f"-httpListenAddr=127.0.0.1:{self.port}",
                "-retentionPeriod=100y", "-dedup.minScrapeInterval=1ms", "-search.disableCache", "-search.latencyOffset=0s", "-loggerLevel=WARN"]
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"victoria-metrics exited: {self.log.read_text()[-2000:]}")
            try:
                # Ours, not another server that took the free port first (ours then fails to listen and exits).
                if (httpx.get(self.url + "/health", timeout=1).status_code == 200
                        and f'-storageDataPath="{self.data}"' in httpx.get(self.url + "/flags", timeout=5).text):
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise TimeoutError(f"victoria-metrics not ready after {timeout_s}s: {self.log.read_text()[-2000:]}")

    def load_prometheus_blocks(self, prometheus_data: Path, timeout_s: float = 120) -> int:
        """Import every sample of every block of a (stopped) Prometheus data directory.

        Returns once VictoriaMetrics searches exactly the samples (and series) the blocks hold; returns their number.
        """
        lines, samples, lo, hi = dump_blocks(prometheus_data, self.root / "blocks")
        answer = httpx.post(self.url + "/api/v1/import", content="\n".join(lines).encode() + b"\n", timeout=600)
        if answer.status_code != 204:
            raise RuntimeError(f"import failed: {answer.status_code} {answer.text[-2000:]}")
        return self._wait_searchable(len(lines), samples, lo, hi, timeout_s)

    def _wait_searchable(self, series: int, samples: int, lo: int, hi: int, timeout_s: float) -> int:
        """Wait until searches over [lo, hi] (ms) see exactly `series` series holding `samples` samples."""
        window = f'count_over_time({{__name__=~".+"}}[{hi - lo + 1}ms])'
        want = (series, samples)
        deadline = time.monotonic() + timeout_s
        while True:
            httpx.get(self.url + "/internal/force_flush", timeout=30)
            found = tuple(self._scalar(f"{agg}({window})", hi) for agg in ("count", "sum"))
            if found == want:
                return samples
            if found[0] > series or found[1] > samples or time.monotonic() > deadline:
                raise RuntimeError(f"victoria-metrics searches {found[0]} series with {found[1]} samples, "
                                   f"the blocks hold {series} with {samples}")
            time.sleep(0.2)

    def _scalar(self, query: str, at_ms: int) -> int:
        body = httpx.get(self.url + "/api/v1/query", params={"query": query, "time": f"{at_ms / 1000:.3f}"},
                         timeout=30).json()
        if body.get("status") != "success":
            raise RuntimeError(body)
        result = body["data"]["result"]
        return int(float(result[0]["value"][1])) if result else 0

    def stop(self) -> None:
        stop_group(self.process)
        self.process = None

    def __enter__(self) -> VictoriaMetricsServer:
        if self.process is None:
            self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
