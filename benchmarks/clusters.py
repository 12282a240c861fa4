"""Several clusters benchmark: ingest two clusters of N GPUs against one cluster of 2N GPUs (the same fleet size).

    .venv/bin/python benchmarks/clusters.py --gpus 256 --hours 6 --repeat 3

The simulator writes each fleet's history (one of 2N GPUs, seed 42; two of N GPUs, seeds 1 and 2) as
OpenMetrics, promtool turns it into TSDB blocks (cached in --data-dir), and real `prometheus` servers
serve them: one for the single cluster, one per cluster for the pair. Each measurement is one
`run_worker` round (as `chargeback worker --once` runs it) into a fresh database, taking the
clusters' hours in turn; the single and the pair are measured alternately so that the machine's load
drifts over both. Printed, from the same run: wall time and process CPU of each, their ratio
(two clusters / one), the queries issued and the GPU-seconds ingested.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
# The pair's policy names its clusters: validation reads the configured names (sources are handed in below).
os.environ["CHARGEBACK_CLUSTERS"] = json.dumps([{"name": "default"}, {"name": "east"}, {"name": "west"}])

START = datetime(2026, 11, 20, tzinfo=UTC)


def prepare(data_dir: Path, seed: int, gpus: int, hours: int) -> Path:
    """TSDB blocks of one simulated fleet (built once, reused by later runs)."""
    from app.metrics.simulator import Simulator
    from tests.support.prometheus import PROMTOOL

    root = data_dir / f"sim-s{seed}-{gpus}g-{hours}h"
    if (root / "READY").exists():
        return root
    (root / "data").mkdir(parents=True, exist_ok=True)
    om = root / "history.om"
    began = time.perf_counter()
    samples = Simulator(seed=seed, gpus=gpus).write_openmetrics(om, START, START + timedelta(hours=hours))
    subprocess.run([PROMTOOL, "tsdb", "create-blocks-from", "openmetrics", "--max-block-duration=24h", str(om),
                    str(root / "data")], check=True, capture_output=True)
    om.unlink()
    (root / "READY").write_text(json.dumps({"samples": samples}))
    print(f"  seed {seed}, {gpus} GPUs: {samples:,} samples, blocks built in {time.perf_counter() - began:.0f}s",
          flush=True)
    return root


def measure(*, database_url: str, sims: dict, urls: dict, hours: int) -> dict:
    """One worker round over `hours` hours of every cluster into a fresh database: wall, CPU, queries, GPU-seconds."""
    from sqlalchemy import func, select
    from sqlmodel import Session

    from app.core.db import make_engine, unit_of_work
    from app.core.migrate import upgrade
    from app.core.settings import Settings
    from app.metrics.models import UsageRollup
    from app.metrics.prometheus_source import PrometheusSource
    from app.metrics.simulator.policy import clusters_policy
    from app.metrics.worker import run_worker
    from app.policy.service import import_version

    if database_url.startswith("sqlite"):
        Path(database_url.split("///", 1)[1]).unlink(missing_ok=True)
    upgrade(database_url)
    engine = make_engine(database_url)
    with unit_of_work(engine) as session:
        import_version(session=session, document=clusters_policy(sims), actor="benchmark",
                       effective_from=START - timedelta(days=1))
    logs: dict[str, list] = {c: [] for c in sims}
    sources = {c: PrometheusSource(urls[c], timeout_s=600, log=logs[c]) for c in sims}
    settings = Settings(ingest_delay_s=0)
    began, cpu = time.perf_counter(), time.process_time()
    report = run_worker(engine=engine, settings=settings, once=True, backfill_start=START, sources=sources,
                        now=lambda: START + timedelta(hours=hours, minutes=5))
    wall, cpu = time.perf_counter() - began, time.process_time() - cpu
    assert len(report.ingested) == hours * len(sims) and not report.gaps, report
    with Session(engine) as session:
        gpu_seconds = session.execute(select(func.sum(UsageRollup.gpu_seconds))).scalar_one()
    engine.dispose()
    return {"wall_s": wall, "cpu_s": cpu, "queries": sum(len(log) for log in logs.values()),
            "gpu_seconds": str(gpu_seconds)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gpus", type=int, default=256, help="the fleet: one cluster of this many, or two of half")
    parser.add_argument("--hours", type=int, default=6)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--data-dir", default=str(Path(tempfile.gettempdir()) / "chargeback-bench-clusters"))
    parser.add_argument("--database-url", default="", help="default: a fresh SQLite file per measurement")
    args = parser.parse_args()

    from app.metrics.simulator import Simulator
    from tests.support.prometheus import PrometheusServer

    data = Path(args.data_dir)
    half = args.gpus // 2
    layouts = {"one": {"default": (42, args.gpus)}, "two": {"east": (1, half), "west": (2, args.gpus - half)}}
    print(f"preparing: one cluster of {args.gpus} GPUs, two of {half} ({args.hours} h)", flush=True)
    servers, urls, sims = {}, {}, {}
    try:
        for name, clusters in layouts.items():
            sims[name] = {c: Simulator(seed=s, gpus=g) for c, (s, g) in clusters.items()}
            urls[name] = {}
            for cluster, (seed, gpus) in clusters.items():
                server = servers[(name, cluster)] = PrometheusServer(prepare(data, seed, gpus, args.hours))
                server.start(timeout_s=300)
                urls[name][cluster] = server.url
        results: dict[str, list[dict]] = {"one": [], "two": []}
        with tempfile.TemporaryDirectory() as work:
            database = args.database_url or f"sqlite:///{Path(work) / 'bench.db'}"
            for name in ("one", "two"):  # a first pass of each, not counted: caches, imports, the TSDB's page cache
                measure(database_url=database, sims=sims[name], urls=urls[name], hours=args.hours)
            for _ in range(args.repeat):
                for name in ("one", "two"):
                    results[name].append(measure(database_url=database, sims=sims[name], urls=urls[name],
                                                 hours=args.hours))
    finally:
        for server in servers.values():
            server.stop()

    def median(name: str, key: str) -> float:
        return statistics.median(r[key] for r in results[name])

    load = os.getloadavg()[0]
    print(f"\n{args.gpus} GPUs, {args.hours} h, {args.repeat} runs each, load average {load:.1f}")
    for name, label in (("one", f"1 cluster x {args.gpus}"), ("two", f"2 clusters x {half}")):
        walls = ", ".join(f"{r['wall_s']:.2f}" for r in results[name])
        print(f"  {label:>18}: wall {walls} s (median {median(name, 'wall_s'):.2f}), CPU median "
              f"{median(name, 'cpu_s'):.2f} s, {results[name][0]['queries']} queries, "
              f"GPU-seconds {results[name][0]['gpu_seconds']}")
    print(f"  two / one: wall {median('two', 'wall_s') / median('one', 'wall_s'):.2f}x (median), "
          f"{min(r['wall_s'] for r in results['two']) / min(r['wall_s'] for r in results['one']):.2f}x (min); "
          f"CPU {median('two', 'cpu_s') / median('one', 'cpu_s'):.2f}x")


if __name__ == "__main__":
    main()
