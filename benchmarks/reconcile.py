"""Reconciliation benchmark (issue 24): the reconcile pass's time per cluster-day against ingesting that day.

    .venv/bin/python benchmarks/reconcile.py --gpus 1024 --hours 24

For each fleet size: the simulated history is built and served as benchmarks/ingest.py does (the same
cached TSDB blocks in --data-dir, a real `prometheus`); then, in one process and a fresh SQLite
database, the cluster-day is ingested (`ingest_hours`, as the worker does) and reconciled
(`reconcile_hours`, as the worker's task and `chargeback reconcile` do), alternately, --repeat times.
Printed from that one run: min and median of each, the ratio reconcile / ingest (goal <= 0.5), the
reconcile queries and the seconds Prometheus spent answering them, and the verdicts (every hour of the
simulator's day must agree: the check is only worth its time if it finds nothing on correct rollups).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections import Counter
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from ingest import START, prepare, serve  # noqa: E402  (the same cached blocks and server as the ingestion benchmark)


def measure(url: str, gpus: int, hours: int, repeat: int, work: Path) -> dict:
    from app.core.db import make_engine, unit_of_work
    from app.core.migrate import upgrade
    from app.metrics.ingest import ingest_hours
    from app.metrics.prometheus_source import PrometheusSource
    from app.metrics.reconcile.service import reconcile_hours
    from app.metrics.reconcile.source import ReconcileSource
    from app.metrics.simulator import Simulator
    from app.policy.service import import_version

    db = work / f"reconcile-{gpus}.db"
    db.unlink(missing_ok=True)
    upgrade(f"sqlite:///{db}")
    engine = make_engine(f"sqlite:///{db}")
    with unit_of_work(engine) as session:
        import_version(session=session, document=Simulator(seed=42, gpus=gpus).policy(), actor="benchmark",
                       effective_from=START - timedelta(days=1))
    end = START + timedelta(hours=hours)
    ingest_s, reconcile_s, answered_s = [], [], []
    verdicts: Counter = Counter()
    queries = 0
    for _ in range(repeat):
        began = time.perf_counter()
        with unit_of_work(engine) as session:
            report = ingest_hours(session=session, source=PrometheusSource(url, timeout_s=600), start=START, end=end)
        ingest_s.append(time.perf_counter() - began)
        assert len(report.ok) == hours and not report.gaps, report
        log: list = []
        began = time.perf_counter()
        with unit_of_work(engine) as session:
            checked = reconcile_hours(session=session, source=ReconcileSource(url, timeout_s=600, log=log),
                                      cluster="default", start=START, end=end, until=end + timedelta(hours=1))
        reconcile_s.append(time.perf_counter() - began)
        answered_s.append(sum(q.seconds for q in log))
        verdicts, queries = checked.verdicts, len(log)
    engine.dispose()
    return {"ingest": ingest_s, "reconcile": reconcile_s, "answered": answered_s, "verdicts": dict(verdicts),
            "queries": queries}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gpus", type=int, nargs="+", default=[1024])
    parser.add_argument("--hours", type=int, default=24)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--data-dir", type=Path, default=Path(os.environ.get("TMPDIR", "/tmp")) / "chargeback-bench")
    args = parser.parse_args()
    args.data_dir.mkdir(parents=True, exist_ok=True)
    print(f"preparing {args.hours} h of simulated history (cached in {args.data_dir})", flush=True)
    rows = []
    for gpus in args.gpus:
        root = prepare(args.data_dir, gpus, args.hours)
        server = serve(root)
        try:
            got = measure(server.url, gpus, args.hours, args.repeat, args.data_dir)
        finally:
            server.stop()
        ing, rec = got["ingest"], got["reconcile"]
        rows.append((gpus, min(ing), statistics.median(ing), min(rec), statistics.median(rec),
                     min(rec) / min(ing), statistics.median(rec) / statistics.median(ing),
                     statistics.median(got["answered"]), got["queries"], got["verdicts"]))
        print(f"  {gpus} GPUs done: {rows[-1]}", flush=True)
    print(f"\none cluster-day ({args.hours} h, 30 s scrapes), {args.repeat} passes each, alternating, one run:")
    print("| GPUs | ingest min | ingest median | reconcile min | reconcile median | ratio min/min | ratio median/median "
          "| Prometheus answering (median) | queries | verdicts |")
    print("|-----:|-----------:|--------------:|--------------:|-----------------:|--------------:|--------------------:"
          "|------------------------------:|--------:|:---------|")
    for gpus, imin, imed, rmin, rmed, rmm, rmed_ratio, answered, queries, verdicts in rows:
        print(f"| {gpus:,} | {imin:.2f} s | {imed:.2f} s | {rmin:.2f} s | {rmed:.2f} s | **{rmm:.2f}** | **{rmed_ratio:.2f}** "
              f"| {answered:.2f} s | {queries} | {', '.join(f'{k} {v}' for k, v in sorted(verdicts.items()))} |")


if __name__ == "__main__":
    main()
