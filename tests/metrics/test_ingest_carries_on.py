"""`chargeback ingest` over a range with trouble in the middle (issue 24, SPEC 4 "Gap, missing, ok"), as a user runs it:
a real process against a real Prometheus and VictoriaMetrics.

- The whole cluster's exporters go silent for four hours (longer than the outage look-back), then report again:
  every silent hour is a gap, never an ok hour of zero use, and ingestion carries on to the end of the range,
  past the first 24-hour unit of work.
- A query that fails in the middle of the range (a proxy answering 503 for one hour's reads): that hour is a gap
  with the source's answer, the hours after it are ingested.
- A source that answers `success` with no GPU series at all (a fresh install, a wrong URL path): every hour a gap.
"""

from __future__ import annotations

import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import pytest
from sqlmodel import Session, select

from app.core.db import make_engine, unit_of_work
from app.metrics.models import IngestHour
from tests.metrics.test_cli import iso, run
from tests.support.ingest import add_policy
from tests.support.policies import A100, mixed_policy
from tests.support.prometheus import PrometheusServer, openmetrics
from tests.support.scenario import H
from tests.support.victoria import VictoriaMetricsServer

STEP = 30
HOURS = 30  # more than one 24-hour unit of work of `chargeback ingest`
SILENT = range(2, 6)  # hours in which no exporter of the cluster reports
TIMES = range(H - 2 * 3600 + STEP, H + HOURS * 3600 + 1, STEP)


def history() -> str:
    util = []
    for host, uuid, gpu in [("gpu-a100-01", "GPU-A0", "0"), ("gpu-a100-02", "GPU-B0", "0")]:
        labels = {"gpu": gpu, "UUID": uuid, "modelName": A100, "Hostname": host,
                  "namespace": "vision-train", "pod": f"train-{uuid.lower()}", "container": "main"}
        util.append((labels, [(t, 90.0) for t in TIMES if (t - 1 - H) // 3600 not in SILENT]))
    return openmetrics([("DCGM_FI_DEV_GPU_UTIL", "gauge", util)])


@pytest.fixture(scope="module")
def engines(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("carries-on")
    prom = PrometheusServer.backfilled(root / "prom", history())
    with VictoriaMetricsServer(root / "vm") as vm:
        vm.load_prometheus_blocks(prom.data)
        with prom:
            yield {"prometheus": prom.url, "victoria": vm.url}


def statuses(db_url: str) -> dict[int, tuple[str, str]]:
    engine = make_engine(db_url)
    try:
        with Session(engine) as session:
            rows = session.exec(select(IngestHour)).all()
        return {(int(r.hour.timestamp()) - H) // 3600: (r.status, r.last_error) for r in rows}
    finally:
        engine.dispose()


def policy(db_url: str) -> None:
    engine = make_engine(db_url)
    with unit_of_work(engine) as session:
        add_policy(session, mixed_policy(sla=[]))
    engine.dispose()


@pytest.mark.parametrize("engine_name", ["prometheus", "victoria"])
def test_an_outage_in_the_middle_is_gaps_and_ingestion_goes_on_to_the_end(fresh_db_url, engines, engine_name):
    policy(fresh_db_url)
    done = run(["ingest", "--start", iso(H), "--end", iso(H + HOURS * 3600)], fresh_db_url, engines[engine_name])
    assert done.returncode == 2, done.stderr
    got = statuses(fresh_db_url)
    assert {h: s for h, (s, _) in got.items()} == {h: "gap" if h in SILENT else "ok" for h in range(HOURS)}
    # The fourth silent hour is past the look-back of nodes that reported before: the empty answer is the gap.
    assert "no occupancy series" in got[5][1] and "gpu-a100-01" in got[5][1]
    # Exit 2 names the gap hours in runs, each with its reason (nodes silent since they reported; then nothing at all).
    said = " ".join(done.stderr.split())
    assert f"gap {iso(H + 2 * 3600)[:16]}..{iso(H + 4 * 3600)[:16]}: no GPU of node(s) gpu-a100-01, gpu-a100-02" in said
    assert f"gap {iso(H + 5 * 3600)[:16]}: the source answered, but with no occupancy series" in said
    assert "ok: 26" in done.stderr and "gaps: 4" in done.stderr and "not attempted: 0" in done.stderr


class FailingProxy:
    """A real HTTP hop in front of a source that answers 503 to every query whose range ends at `fail_end`."""

    def __init__(self, upstream: str, fail_end: int) -> None:
        proxy = self
        self.refused = 0

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                query = parse_qs(urlsplit(self.path).query)
                ends = query.get("end", []) + query.get("time", [])
                if any(abs(float(e) - fail_end) < 1 for e in ends):
                    proxy.refused += 1
                    self.send_response(503)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                try:
                    with urllib.request.urlopen(upstream + self.path, timeout=30) as answer:
                        status, body, kind = answer.status, answer.read(), answer.headers.get("Content-Type", "")
                except urllib.error.HTTPError as exc:
                    status, body, kind = exc.code, exc.read(), exc.headers.get("Content-Type", "")
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FailingProxy:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_a_read_that_fails_mid_range_is_a_gap_and_the_hours_after_it_are_ingested(fresh_db_url, engines):
    policy(fresh_db_url)
    with FailingProxy(engines["prometheus"], fail_end=H + 11 * 3600) as proxy:
        done = run(["ingest", "--start", iso(H + 8 * 3600), "--end", iso(H + 14 * 3600), "--hours-per-fetch", "1"],
                   fresh_db_url, proxy.url)
    assert done.returncode == 2, done.stderr
    assert proxy.refused > 0
    got = statuses(fresh_db_url)
    assert {h: s for h, (s, _) in got.items()} == {8: "ok", 9: "ok", 10: "gap", 11: "ok", 12: "ok", 13: "ok"}
    assert "503" in got[10][1]


def test_a_source_with_no_gpu_series_at_all_gives_gaps_not_zero_use(fresh_db_url, tmp_path):
    policy(fresh_db_url)
    # A fresh install: the server answers every query `success`, but nothing exports GPU series to it.
    unrelated = openmetrics([("up", "gauge", [({"job": "node"}, [(t, 1.0) for t in TIMES])])])
    with PrometheusServer.backfilled(tmp_path / "empty", unrelated) as prom:
        done = run(["ingest", "--start", iso(H), "--end", iso(H + 3 * 3600)], fresh_db_url, prom.url)
    assert done.returncode == 2, done.stderr
    got = statuses(fresh_db_url)
    assert {h: s for h, (s, _) in got.items()} == {0: "gap", 1: "gap", 2: "gap"}
    assert all("no occupancy series" in why for _, why in got.values())
