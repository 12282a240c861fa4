"""Ingestion benchmark: a day of a simulated >= 256-GPU cluster, backfilled into a real Prometheus.

    .venv/bin/python benchmarks/ingest.py --gpus 256 512 --hours 24 --intervals 30 15

For each cluster size: the simulator writes OpenMetrics, promtool builds TSDB blocks (cached in
--data-dir), a real `prometheus` serves them, and a child process ingests the window into a fresh
SQLite database (or --database-url), with the scrape interval inferred from the data (no override)
and the install-independent label handling on; --intervals adds fleets scraped every 15 s. Printed, measured in the same run:
  (a) ingestion time / time of the same PromQL queries issued alone (raw HTTP, body read, no parsing);
  (b) speed-up over a naive pull of the raw series ingestion reads, DCGM and serving (prometheus-api-client
      get_metric_range_data + pandas MetricRangeDataFrame, per-minute sample counts with groupby), and
      over its DCGM part alone — at the first size of each interval;
  (c) peak RSS of the ingesting process at each size.
With --workers N (PostgreSQL: CHARGEBACK_TEST_PG_URL), the first fleet is also ingested by one
`chargeback worker --once` process and then by N started together (each into a fresh database,
benchmarks/fleet_e2e.py's runner): wall time of N against one, every hour `ok` exactly once, the same
GPU-seconds as one worker and as the ingestion above.

    .venv/bin/python benchmarks/ingest.py --gpus 256 --hours 24 --workers 3 --skip-naive
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

START = datetime(2026, 11, 20, tzinfo=UTC)
FAMILIES = ["DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "DCGM_FI_DEV_FB_USED",
            "DCGM_FI_DEV_POWER_USAGE", "vllm:request_success_total", "vllm:e2e_request_latency_seconds"]


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def prepare(data_dir: Path, gpus: int, hours: int, interval_s: int = 30) -> Path:
    """TSDB blocks for `gpus` GPUs over `hours` hours at `interval_s` (built once, reused by later runs)."""
    from app.metrics.simulator import Simulator
    from tests.support.prometheus import PROMTOOL

    root = data_dir / (f"sim-{gpus}g-{hours}h" + ("" if interval_s == 30 else f"-{interval_s}s"))
    done = root / "READY"
    if done.exists():
        return root
    (root / "data").mkdir(parents=True, exist_ok=True)
    sim = Simulator(seed=42, gpus=gpus, scrape_interval_s=interval_s)
    om = root / "history.om"
    began = time.perf_counter()
    samples = sim.write_openmetrics(om, START, START + timedelta(hours=hours), metrics=FAMILIES)
    print(f"  {gpus} GPUs: {samples:,} samples written in {time.perf_counter() - began:.0f}s", flush=True)
    began = time.perf_counter()
    subprocess.run([PROMTOOL, "tsdb", "create-blocks-from", "openmetrics", "--max-block-duration=24h", str(om),
                    str(root / "data")], check=True, capture_output=True)
    print(f"  promtool built blocks in {time.perf_counter() - began:.0f}s", flush=True)
    om.unlink()
    done.write_text(json.dumps({"gpus": gpus, "hours": hours, "samples": samples}))
    return root


def serve(root: Path):
    from tests.support.prometheus import PrometheusServer

    server = PrometheusServer(root)
    server.start(timeout_s=300)
    return server


# ---- child processes (each measures its own peak RSS) ----


def child_ingest(args) -> dict:
    import httpx
    from sqlmodel import Session, select

    from app.core.db import make_engine, unit_of_work
    from app.core.migrate import upgrade
    from app.core.timeutil import epoch
    from app.metrics.ingest import ingest_hours
    from app.metrics.models import UsageRollup
    from app.metrics.prometheus_source import PrometheusSource
    from app.metrics.simulator import Simulator
    from app.policy.service import import_version

    url = args.database_url or f"sqlite:///{Path(args.work) / 'bench.db'}"
    if url.startswith("sqlite"):
        Path(url.split("///", 1)[1]).unlink(missing_ok=True)
    upgrade(url)
    engine = make_engine(url)
    sim = Simulator(seed=42, gpus=args.gpus, scrape_interval_s=args.intervals[0])
    with unit_of_work(engine) as session:
        import_version(session=session, document=sim.policy(), actor="benchmark", effective_from=START - timedelta(days=1))
    end = START + timedelta(hours=args.hours)

    def ingest_once() -> tuple[float, list]:
        log: list = []
        # No interval override: each target's interval is inferred from the stored samples.
        source = PrometheusSource(args.url, timeout_s=600, log=log)
        began, cpu = time.perf_counter(), time.process_time()
        with unit_of_work(engine) as session:
            report = ingest_hours(session=session, source=source, start=START, end=end)
        assert len(report.ok) == args.hours and not report.gaps, report
        cpu_s.append(time.process_time() - cpu)
        return time.perf_counter() - began, log

    def queries_alone(log) -> float:
        with httpx.Client(base_url=args.url, timeout=600) as client:
            began = time.perf_counter()
            for q in log:
                r = client.get("/api/v1/query_range", params={"query": q.query, "start": q.start, "end": q.end, "step": q.step})
                r.raise_for_status()
                r.read()
            return time.perf_counter() - began

    ingest_s, alone_s, cpu_s = [], [], []
    t, log = ingest_once()
    ingest_s.append(t)
    rss = peak_rss_mib()  # before the queries-alone pass reads its own bodies
    for _ in range(args.repeat):
        alone_s.append(queries_alone(log))
        t, _ = ingest_once()
        ingest_s.append(t)
    rss = max(rss, peak_rss_mib())
    with Session(engine) as session:
        stored = session.exec(select(UsageRollup)).all()
        rows = len(stored)
        gpu_seconds = str(sum((u.gpu_seconds for u in stored), 0))
    engine.dispose()
    return {"ingest_s": ingest_s, "alone_s": alone_s, "cpu_s": cpu_s, "queries": len(log), "rss_mib": rss, "rows": rows, "gpu_seconds": gpu_seconds,
            "series_returned": sum(q.series for q in log), "hours": args.hours, "first_hour": epoch(START)}


# The raw series ingestion reads: the DCGM metrics, then the serving counters of the SLAs.
NAIVE_DCGM = ["DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
              "DCGM_FI_DEV_POWER_USAGE"]
NAIVE_SERVING = ["vllm:request_success_total", "vllm:e2e_request_latency_seconds_bucket"]


def child_naive(args) -> dict:
    """Pull every raw series the ingestion needs and count samples per minute with pandas (timed per metric)."""
    import pandas as pd
    from prometheus_api_client import MetricRangeDataFrame, PrometheusConnect

    pc = PrometheusConnect(url=args.url, timeout=600)
    end = START + timedelta(hours=args.hours)
    seconds, counted = {}, {}
    for metric in NAIVE_DCGM + NAIVE_SERVING:
        began = time.perf_counter()
        data = pc.get_metric_range_data(metric, start_time=START, end_time=end, chunk_size=timedelta(hours=1))
        counted[metric] = 0
        if data:
            frame = MetricRangeDataFrame(data)
            labels = [c for c in frame.columns if c != "value"]
            frame["minute"] = frame.index.ceil("min")
            counts = frame.groupby(labels + ["minute"], dropna=False)["value"].count()
            counted[metric] = int(counts.sum())
            del frame, counts
        del data
        seconds[metric] = time.perf_counter() - began
    return {"naive_s": sum(seconds.values()), "dcgm_s": sum(seconds[m] for m in NAIVE_DCGM), "seconds": seconds,
            "rss_mib": peak_rss_mib(), "samples": sum(counted.values()),
            "dcgm_samples": sum(counted[m] for m in NAIVE_DCGM), "pandas": pd.__version__}


def workers_against_one(server, gpus: int, args) -> tuple[dict, dict]:
    """The fleet ingested by one worker process, then by `args.workers` at once, each into a fresh PostgreSQL database."""
    from benchmarks.fleet_e2e import fresh_database, run_workers
    from tests.support.databases import drop_postgres_database

    out = []
    for n in (1, args.workers):
        url = fresh_database(gpus)
        try:
            print(f"{gpus} GPUs: {n} `chargeback worker` process(es) over {args.hours} h", flush=True)
            out.append(run_workers(n, url=url, server=server, hours=args.hours, log_dir=args.data_dir))
        finally:
            drop_postgres_database(url)
    return out[0], out[1]


def run_child(kind: str, url: str, args, gpus: int, interval_s: int = 30) -> dict:
    cmd = [sys.executable, __file__, "--child", kind, "--url", url, "--gpus", str(gpus), "--hours", str(args.hours),
           "--work", str(args.data_dir), "--repeat", str(args.repeat), "--intervals", str(interval_s)]
    if args.database_url:
        cmd += ["--database-url", args.database_url]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if done.returncode != 0:
        raise SystemExit(f"{kind} child failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gpus", type=int, nargs="+", default=[256, 512])
    parser.add_argument("--hours", type=int, default=24)
    parser.add_argument("--intervals", type=int, nargs="+", default=[30], help="scrape intervals of the fleets (s)")
    parser.add_argument("--data-dir", type=Path, default=Path(os.environ.get("TMPDIR", "/tmp")) / "chargeback-bench")
    parser.add_argument("--database-url", default=None, help="default: a fresh SQLite file in --data-dir")
    parser.add_argument("--repeat", type=int, default=3, help="timed passes of each (min and median are reported)")
    parser.add_argument("--skip-naive", action="store_true")
    parser.add_argument("--workers", type=int, default=0, help="also ingest the first fleet with 1 and with N worker processes")
    parser.add_argument("--child", choices=["ingest", "naive"])
    parser.add_argument("--url")
    parser.add_argument("--work")
    args = parser.parse_args()
    if args.child:
        args.gpus = args.gpus[0]
        result = child_ingest(args) if args.child == "ingest" else child_naive(args)
        print(json.dumps(result))
        return

    if any(g < 256 for g in args.gpus):
        print("note: the goal is stated for clusters of at least 256 GPUs")
    args.data_dir.mkdir(parents=True, exist_ok=True)
    print(f"preparing {args.hours} h of simulated history (cached in {args.data_dir})", flush=True)
    fleets = [(g, s) for s in args.intervals for g in args.gpus]
    roots = {(g, s): prepare(args.data_dir, g, args.hours, s) for g, s in fleets}
    results = {}
    for i, (gpus, interval_s) in enumerate(fleets):
        server = serve(roots[(gpus, interval_s)])
        try:
            print(f"{gpus} GPUs every {interval_s} s: ingesting {args.hours} h from {server.url}", flush=True)
            ingest = run_child("ingest", server.url, args, gpus, interval_s)
            naive = None
            if (i == 0 or interval_s != args.intervals[0] and gpus == args.gpus[0]) and not args.skip_naive:
                print(f"{gpus} GPUs every {interval_s} s: naive pull (get_metric_range_data + pandas)", flush=True)
                naive = run_child("naive", server.url, args, gpus, interval_s)
            results[(gpus, interval_s)] = (ingest, naive)
            if i == 0 and args.workers:
                scaled = workers_against_one(server, gpus, args)
        finally:
            server.stop()

    print()
    print(f"{'GPUs':>6} {'scrape':>6} {'queries':>8} {'ingest s':>9} {'alone s':>8} {'(a) min/min':>11} {'median/median':>13} "
          f"{'portal CPU s':>12} {'(c) RSS MiB':>11} {'rows':>6}")
    for (gpus, interval_s), (ing, _) in results.items():
        best_ingest, best_alone = min(ing["ingest_s"]), min(ing["alone_s"])
        mid = statistics.median(ing["ingest_s"]) / statistics.median(ing["alone_s"])
        print(f"{gpus:>6} {interval_s:>5}s {ing['queries']:>8} {best_ingest:>9.2f} {best_alone:>8.2f} {best_ingest / best_alone:>11.2f} "
              f"{mid:>13.2f} {min(ing['cpu_s']):>12.2f} {ing['rss_mib']:>11.0f} {ing['rows']:>6}")
    for (gpus, interval_s), (ing, naive) in results.items():
        if naive:
            best = min(ing["ingest_s"])
            print(f"(b) naive pull at {gpus} GPUs every {interval_s} s, DCGM and serving series (like for like): "
                  f"{naive['naive_s']:.1f}s, peak RSS {naive['rss_mib']:.0f} MiB, {naive['samples']:,} raw samples "
                  f"-> speed-up {naive['naive_s'] / best:.1f}x; its DCGM part alone: {naive['dcgm_s']:.1f}s, "
                  f"{naive['dcgm_samples']:,} samples -> {naive['dcgm_s'] / best:.1f}x")
    for gpus in args.gpus:  # the same workloads at another scrape interval: the same GPU-seconds
        totals = {s: results[(gpus, s)][0]["gpu_seconds"] for s in args.intervals}
        print(f"GPU-seconds ingested at {gpus} GPUs by scrape interval: {totals}"
              + ("" if len(set(totals.values())) == 1 else "  <-- MISMATCH"))
    if args.workers:
        one, many = scaled
        first = results[(args.gpus[0], args.intervals[0])][0]
        print(f"workers at {args.gpus[0]} GPUs, {args.hours} h: 1 worker {one['wall_s']:.1f} s, {args.workers} workers "
              f"{many['wall_s']:.1f} s -> {one['wall_s'] / many['wall_s']:.2f}x; hours per worker "
              f"{[w['ingested'] for w in many['per_worker']]}; every hour once: {one['exactly_once']} / {many['exactly_once']}; "
              f"Prometheus CPU {one['prom_cpu_s']:.1f} s / {many['prom_cpu_s']:.1f} s; worker CPU "
              f"{sum(w['cpu_s'] for w in one['per_worker']):.1f} s / {sum(w['cpu_s'] for w in many['per_worker']):.1f} s")
        same = {Decimal(one["gpu_seconds"]), Decimal(many["gpu_seconds"]), Decimal(first["gpu_seconds"])}
        print(f"GPU-seconds: 1 worker {one['gpu_seconds']}, {args.workers} workers {many['gpu_seconds']}, ingestion above "
              f"{first['gpu_seconds']}" + ("" if len(same) == 1 else "  <-- MISMATCH"))
    print("goals: (a) <= 1.3, (b) >= 10x, (c) < 1024 MiB and flat across sizes")
    print(f"load average during the run: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print(json.dumps({f"{g}@{s}s": {"ingest": i, "naive": n} for (g, s), (i, n) in results.items()}))


if __name__ == "__main__":
    main()
