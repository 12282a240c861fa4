"""A 10,000-GPU fleet end to end: simulated history in a real Prometheus, `chargeback worker` x N, rating, serving.

    .venv/bin/python benchmarks/fleet_e2e.py --gpus 10000 --hours 4 --workers 3

1. Prepare (cached in --data-dir): the simulator (seed 42) writes the fleet's dcgm-exporter and vLLM history
   hour by hour as OpenMetrics (--jobs processes at once), promtool turns each hour into TSDB blocks and the
   file is removed; Debian's `prometheus` then opens the blocks once and compacts them, so that the timed runs
   below do not pay for that compaction.
2. Ingest, twice, each time into a fresh PostgreSQL database holding the simulator's policy: one
   `chargeback worker --once --batch-hours 1` process, then --workers of them started together (the per-hour
   advisory-lock claims share the hours out). The hours are exactly the simulated window: the worker's
   `--backfill-start` is its first hour and CHARGEBACK_INGEST_DELAY_S is set so that its last finished hour is
   the window's last. Measured per run: wall time, each worker's CPU and peak RSS (wait4), Prometheus's CPU
   (/proc/<pid>/stat) and the queries it answered; checked: every hour `ok` exactly once (the workers' own
   "ingested N hours" add up to the window, no gaps) and the same GPU-seconds in both runs.
3. Rate the month (`chargeback rate --period YYYY-MM`), then the database size: pg_total_relation_size and rows
   per table, the tables keyed by hour extrapolated to a 30-day month (the others do not grow with time).
4. Serve (`chargeback serve`) and load the main pages with 32 requests in flight, between /healthz phases,
   with the client of benchmarks/dashboard_load.py (`interleaved`, `report`), over the month's range; with
   --replicate-days the ingested hours are first copied (INSERT ... SELECT, hour shifted) to fill that many
   days, and the pages are loaded again, to show how month-long reads grow with the rows.

The live fleet view is left out: it reads "now" from a Prometheus scraping an exporter, not from history.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

START = datetime(2026, 11, 20, tzinfo=UTC)
CHARGEBACK = shutil.which("chargeback", path=str(Path(sys.executable).parent)) or "chargeback"
CLOCK_TICK = os.sysconf("SC_CLK_TCK")


# ---- 1. prepare ----


def _write_hour(gpus: int, hour: int, hours: int, out: str) -> tuple[int, float]:
    """OpenMetrics of one hour of the window (the first also holds the 10 minutes before it; the last ends at its end)."""
    from app.core.timeutil import epoch
    from app.metrics.simulator import Simulator
    from app.metrics.simulator.openmetrics import _families, _window, _write
    from benchmarks.ingest import FAMILIES

    began = time.process_time()
    sim = Simulator(seed=42, gpus=gpus, scrape_interval_s=30)
    step = sim.scrape_interval_s
    first, last = _window(sim, START, START + timedelta(hours=hours))
    h0 = epoch(START) + hour * 3600
    a = first if hour == 0 else h0
    b = last if hour == hours - 1 else h0 + 3600 - step
    samples = _write(sim, Path(out), a, b, _families(FAMILIES), None)
    return samples, time.process_time() - began


def _build_hour(gpus: int, hour: int, hours: int, root: str) -> dict:
    from tests.support.prometheus import PROMTOOL

    om = Path(root) / f"hour-{hour:03d}.om"
    began = time.perf_counter()
    samples, sim_cpu = _write_hour(gpus, hour, hours, str(om))
    sim_wall = time.perf_counter() - began
    size = om.stat().st_size
    began = time.perf_counter()
    done = subprocess.run([PROMTOOL, "tsdb", "create-blocks-from", "openmetrics", str(om), str(Path(root) / "data")],
                          capture_output=True, text=True)
    om.unlink()
    if done.returncode != 0:
        raise RuntimeError(f"promtool failed on hour {hour}: {done.stderr[-2000:]}")
    return {"hour": hour, "samples": samples, "bytes": size, "sim_wall_s": sim_wall, "sim_cpu_s": sim_cpu,
            "promtool_s": time.perf_counter() - began}


def proc_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a running process."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICK


def settle(server, quiet_s: float = 0.2, window_s: float = 5.0, timeout_s: float = 900) -> float:
    """Wait until the Prometheus process uses under `quiet_s` CPU-s per `window_s` (its compaction is done)."""
    deadline = time.monotonic() + timeout_s
    began = time.perf_counter()
    while time.monotonic() < deadline:
        before = proc_cpu_s(server.process.pid)
        time.sleep(window_s)
        if proc_cpu_s(server.process.pid) - before < quiet_s:
            break
    return time.perf_counter() - began


def prepare(data_dir: Path, gpus: int, hours: int, jobs: int) -> tuple[Path, dict]:
    from tests.support.prometheus import PrometheusServer

    root = data_dir / f"fleet-{gpus}g-{hours}h"
    ready = root / "READY"
    if ready.exists():
        return root, json.loads(ready.read_text())
    shutil.rmtree(root, ignore_errors=True)
    (root / "data").mkdir(parents=True)
    print(f"preparing {hours} h of {gpus:,} simulated GPUs in {root} ({jobs} jobs)", flush=True)
    began = time.perf_counter()
    parts = []
    with ProcessPoolExecutor(jobs) as pool:
        for part in pool.map(_build_hour, [gpus] * hours, range(hours), [hours] * hours, [str(root)] * hours):
            parts.append(part)
            print(f"  hour {part['hour']}: {part['samples']:,} samples ({part['bytes'] / 2**30:.2f} GiB of text), "
                  f"simulator {part['sim_wall_s']:.0f} s wall / {part['sim_cpu_s']:.0f} CPU-s, "
                  f"promtool {part['promtool_s']:.0f} s", flush=True)
    build_s = time.perf_counter() - began
    server = PrometheusServer(root).start(timeout_s=900)
    try:
        settle_s = settle(server)
    finally:
        server.stop()
    info = {"gpus": gpus, "hours": hours, "samples": sum(p["samples"] for p in parts),
            "text_bytes": sum(p["bytes"] for p in parts), "sim_cpu_s": sum(p["sim_cpu_s"] for p in parts),
            "sim_wall_s": sum(p["sim_wall_s"] for p in parts), "promtool_s": sum(p["promtool_s"] for p in parts),
            "build_wall_s": build_s, "compaction_s": settle_s, "jobs": jobs,
            "tsdb_bytes": sum(f.stat().st_size for f in (root / "data").rglob("*") if f.is_file())}
    ready.write_text(json.dumps(info))
    return root, info


# ---- 2. ingest ----


def prometheus_requests(url: str) -> int:
    """Range and instant queries Prometheus has answered so far (its own /metrics; it does not scrape itself)."""
    import httpx

    handlers = ('handler="/api/v1/query_range"', 'handler="/api/v1/query"')
    return sum(int(float(line.rsplit(" ", 1)[1])) for line in httpx.get(f"{url}/metrics", timeout=30).text.splitlines()
               if line.startswith("prometheus_http_requests_total{") and any(h in line for h in handlers))


def fresh_database(gpus: int) -> str:
    """A migrated throwaway PostgreSQL database holding the simulated fleet's policy."""
    from app.core.db import make_engine, unit_of_work
    from app.metrics.simulator import Simulator
    from app.policy.service import import_version
    from tests.support.databases import migrated, new_postgres_database

    url = migrated(new_postgres_database("cbfleet"))
    engine = make_engine(url)
    with unit_of_work(engine) as session:
        import_version(session=session, document=Simulator(seed=42, gpus=gpus).policy(), actor="benchmark",
                       effective_from=START - timedelta(days=1))
    engine.dispose()
    return url


def table_sizes(url: str) -> dict[str, tuple[int, int]]:
    """{table: (bytes with indexes and TOAST, rows)} of every table."""
    from sqlalchemy import text

    from app.core.db import make_engine

    engine = make_engine(url)
    with engine.connect() as conn:
        names = conn.execute(text("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")).scalars().all()
        out = {name: (conn.execute(text(f"SELECT pg_total_relation_size('public.\"{name}\"')")).scalar_one(),
                      conn.execute(text(f'SELECT count(*) FROM public."{name}"')).scalar_one()) for name in names}
    engine.dispose()
    return out


def run_workers(n: int, *, url: str, server, hours: int, log_dir: Path) -> dict:
    """`n` workers started together over the window; wall, per-worker CPU/RSS/hours, Prometheus CPU and queries."""
    from sqlalchemy import text

    from app.core.db import make_engine
    from app.core.timeutil import utcnow

    end = START + timedelta(hours=hours)
    # The worker's last finished hour is floor(now - delay): `end` for the next 50 minutes.
    delay = int((utcnow() - end).total_seconds()) - 600
    env = {**os.environ, "CHARGEBACK_DATABASE_URL": url, "CHARGEBACK_PROMETHEUS_URL": server.url,
           "CHARGEBACK_INGEST_DELAY_S": str(delay)}
    for name in ("CHARGEBACK_SCRAPE_INTERVAL_S", "CHARGEBACK_CLUSTERS", "CHARGEBACK_CLUSTERS_FILE"):
        env.pop(name, None)
    cmd = [CHARGEBACK, "worker", "--once", "--batch-hours", "1", "--backfill-start", START.isoformat()]
    queries, prom_cpu = prometheus_requests(server.url), proc_cpu_s(server.process.pid)
    began = time.perf_counter()
    procs = []
    for i in range(n):
        with open(log_dir / f"worker-{n}-{i}.out", "w") as out, open(log_dir / f"worker-{n}-{i}.log", "w") as err:
            procs.append(subprocess.Popen(cmd, stdout=out, stderr=err, env=env, cwd=ROOT))
    workers = []
    pending = {p.pid: (i, p) for i, p in enumerate(procs)}
    while pending:
        pid, status, usage = os.wait4(-1, 0)
        if pid not in pending:
            continue
        i, proc = pending.pop(pid)
        proc.returncode = os.waitstatus_to_exitcode(status)
        said = (log_dir / f"worker-{n}-{i}.out").read_text().strip().splitlines()
        if proc.returncode != 0 or not said:
            raise SystemExit(f"worker {i} of {n} failed ({proc.returncode}): "
                             f"{(log_dir / f'worker-{n}-{i}.log').read_text()[-3000:]}")
        words = said[-1].split()  # "ingested N hours, G gaps, S skipped"
        workers.append({"wall_s": time.perf_counter() - began, "cpu_s": usage.ru_utime + usage.ru_stime,
                        "rss_mib": usage.ru_maxrss / 1024, "ingested": int(words[1]), "gaps": int(words[3]),
                        "skipped": int(words[5])})
    wall = time.perf_counter() - began
    prom_cpu = proc_cpu_s(server.process.pid) - prom_cpu
    queries = prometheus_requests(server.url) - queries
    engine = make_engine(url)
    with engine.connect() as conn:
        rows = conn.execute(text("SELECT hour, status, duration_s FROM ingest_hour WHERE cluster = 'default' "
                                 "ORDER BY hour")).all()
        gpu_seconds = conn.execute(text("SELECT sum(gpu_seconds) FROM usage_rollup")).scalar_one()
        unit_hours = conn.execute(text("SELECT count(*) FROM unit_hour")).scalar_one()
    engine.dispose()
    want = [START + timedelta(hours=h) for h in range(hours)]
    ok = [r.hour.replace(tzinfo=UTC) if r.hour.tzinfo is None else r.hour for r in rows if r.status == "ok"]
    once = ok == want and len(rows) == hours and sum(w["ingested"] for w in workers) == hours and \
        not any(w["gaps"] for w in workers)
    return {"workers": n, "wall_s": wall, "per_worker": workers, "prom_cpu_s": prom_cpu, "queries": queries,
            "gpu_seconds": str(gpu_seconds), "unit_hours": unit_hours, "exactly_once": once,
            "hour_s": [r.duration_s for r in rows]}


def rate(url: str, period: str) -> float:
    env = {**os.environ, "CHARGEBACK_DATABASE_URL": url}
    began = time.perf_counter()
    done = subprocess.run([CHARGEBACK, "rate", "--period", period], env=env, cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"rating failed: {done.stdout[-2000:]}{done.stderr[-2000:]}")
    return time.perf_counter() - began


# ---- 4. serve ----


def page_routes() -> list[tuple[str, str, dict]]:
    """dashboard_load's routes over an explicit range (the data is not in the current month), without the live view."""
    from benchmarks import dashboard_load

    return [(label, "/?start={start}&end={end}" if path == "/" else path, headers)
            for label, path, headers in dashboard_load.ROUTES if label != "fleet: live refresh"]


def serve_and_load(url: str, *, gpus: int, prom_url: str, start: str, end: str, args) -> list[tuple[str, dict]]:
    """`chargeback serve` on the database, an admin session, and dashboard_load's interleaved load of the pages."""
    from app.auth import service, sessions
    from app.core.db import make_engine, unit_of_work
    from app.core.errors import NotFound
    from app.metrics.simulator import Simulator
    from benchmarks import dashboard_load
    from tests.support.server import running_portal

    engine = make_engine(url)
    with unit_of_work(engine) as session:
        try:
            user = service.get_user_by_name(session=session, name="bench")
        except NotFound:
            user = service.create_user(session=session, name="bench", role="admin", password=None, actor="bench")
        session_id = service.start_session(session=session, user=user)
    engine.dispose()
    mig = next(g.uuid for g in Simulator(seed=42, gpus=gpus).topology.gpus if g.mig)
    env = {**os.environ, "CHARGEBACK_PROMETHEUS_URL": prom_url}
    with running_portal(url, command=(CHARGEBACK, "serve"), env=env, timeout_s=120) as portal:
        print(f"load: {args.requests} requests per route, {args.concurrency} in flight, cap {args.time_cap:.0f} s, "
              f"range {start}..{end}, `chargeback serve` at {portal.base}", flush=True)
        return asyncio.run(dashboard_load.run_load(portal.base, sessions.sign_session_id(session_id), args, start, end,
                                                   mig, routes_=page_routes()))


def replicate(url: str, *, hours: int, days: int) -> tuple[int, float]:
    """Copy the ingested hours forward (dashboard_load's INSERT ... SELECT, shifted by whole windows) to fill `days`."""
    from sqlalchemy import text

    from app.core.db import make_engine
    from benchmarks.dashboard_load import REPLICATE

    statements = [s.replace("days => :shift", "hours => :shift") for s in REPLICATE]
    copies = days * 24 // hours - 1
    engine = make_engine(url)
    began = time.perf_counter()
    for c in range(1, copies + 1):
        with engine.begin() as conn:
            for statement in statements:
                conn.execute(text(statement), {"s": START, "e": START + timedelta(hours=hours), "shift": c * hours})
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("VACUUM ANALYZE"))
    engine.dispose()
    return copies * hours, time.perf_counter() - began


def summary(info: dict, runs: dict, sizes: dict, args) -> None:
    hours, gpus = args.hours, args.gpus
    print(f"\n== {gpus:,} GPUs, {hours} h of history (scrapes every 30 s) ==")
    print(f"prepare: {info['samples']:,} samples, {info['text_bytes'] / 2**30:.1f} GiB of OpenMetrics; per hour of fleet "
          f"{info['sim_cpu_s'] / hours:.0f} simulator CPU-s, {info['promtool_s'] / hours:.0f} s promtool; "
          f"TSDB {info['tsdb_bytes'] / 2**20 / hours:.0f} MiB per hour ({info['tsdb_bytes'] / 2**30 * 24 / hours:.1f} "
          f"GiB a day, extrapolated)")
    for n, r in runs.items():
        cpu = sum(w["cpu_s"] for w in r["per_worker"])
        did = ", ".join(f"{w['ingested']}/{w['skipped']}" for w in r["per_worker"])
        rss = ", ".join(f"{w['rss_mib']:.0f}" for w in r["per_worker"])
        print(f"{n} worker(s): wall {r['wall_s']:.1f} s = {r['wall_s'] / hours:.1f} s per hour of fleet "
              f"(a day: {r['wall_s'] / hours * 24 / 60:.1f} min, {'measured' if hours == 24 else 'extrapolated'}); worker CPU {cpu / hours:.1f} s/h, "
              f"Prometheus CPU {r['prom_cpu_s'] / hours:.1f} s/h; {r['queries']} queries; peak RSS per worker "
              f"{rss} MiB; hours ingested/skipped per worker "
              f"{did}; every hour ok exactly once: {r['exactly_once']}; GPU-seconds {r['gpu_seconds']}; "
              f"unit_hour rows {r['unit_hours']:,}; each hour's own ingestion (ingest_hour.duration_s) "
              f"{min(r['hour_s']):.1f}-{max(r['hour_s']):.1f} s")
    one, many = runs[1], runs[max(runs)]
    if len(runs) > 1:
        print(f"{max(runs)} workers vs 1: wall {one['wall_s'] / many['wall_s']:.2f}x faster; GPU-seconds "
              f"{'equal' if one['gpu_seconds'] == many['gpu_seconds'] else 'DIFFER'}")
    before, ingested, rated = sizes["before"], sizes["ingested"], sizes["rated"]
    print(f"\ndatabase (PostgreSQL) after ingesting {hours} h, per table (bytes incl. indexes) and per 30-day month:")
    grown = {t: (ingested[t][0] - before.get(t, (0, 0))[0], ingested[t][1] - before.get(t, (0, 0))[1]) for t in ingested}
    total = 0
    for table, (size, rows) in sorted(grown.items(), key=lambda kv: -kv[1][0]):
        if rows <= 0 and size <= 8192 * 2:
            continue
        month = size * 720 / hours
        total += month
        print(f"  {table:28} {rows:>10,} rows {size / 2**20:>9.1f} MiB -> month {month / 2**30:>7.2f} GiB "
              f"({rows * 720 // hours:,} rows)")
    print(f"  total per month of {gpus:,} GPUs: {total / 2**30:.1f} GiB (extrapolated from {hours} h)")
    rating = {t: rated[t][0] - ingested.get(t, (0, 0))[0] for t in rated}
    print(f"rating the month ({sizes['rate_s']:.1f} s) added {sum(rating.values()) / 2**20:.1f} MiB: "
          + ", ".join(f"{t} {b / 2**20:.1f}" for t, b in sorted(rating.items(), key=lambda kv: -kv[1]) if b > 0))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gpus", type=int, default=10_000)
    parser.add_argument("--hours", type=int, default=4, help="hours of fleet history simulated and ingested")
    parser.add_argument("--workers", type=int, default=3, help="`chargeback worker` processes of the parallel run")
    parser.add_argument("--jobs", type=int, default=2, help="simulator processes while preparing")
    parser.add_argument("--data-dir", type=Path, default=Path(tempfile.gettempdir()) / "chargeback-bench-fleet")
    parser.add_argument("--prepare-only", action="store_true")
    parser.add_argument("--requests", type=int, default=320, help="requests per route")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--time-cap", type=float, default=60.0, help="seconds per route at most")
    parser.add_argument("--replicate-days", type=int, default=0,
                        help="then copy the ingested hours to fill this many days and load the pages again")
    parser.add_argument("--skip-load", action="store_true")
    parser.add_argument("--keep", action="store_true", help="keep the database of the parallel run")
    args = parser.parse_args()
    args.data_dir.mkdir(parents=True, exist_ok=True)
    root, info = prepare(args.data_dir, args.gpus, args.hours, args.jobs)
    print(json.dumps(info))
    if args.prepare_only:
        return

    from benchmarks.dashboard_load import report
    from tests.support.databases import drop_postgres_database
    from tests.support.prometheus import PrometheusServer

    server = PrometheusServer(root)
    logs = Path(tempfile.mkdtemp(prefix="fleet-e2e-"))
    url = None
    loads = []
    try:
        began = time.perf_counter()
        server.start(timeout_s=900)
        print(f"prometheus {server.url} ready in {time.perf_counter() - began:.0f} s, settled after "
              f"{settle(server):.0f} s more; worker logs in {logs}", flush=True)
        runs, sizes = {}, {}
        for n in dict.fromkeys((1, args.workers)):
            if url:
                drop_postgres_database(url)
            url = fresh_database(args.gpus)
            sizes["before"] = table_sizes(url)
            print(f"{n} worker(s) ingesting {args.hours} h ...", flush=True)
            runs[n] = run_workers(n, url=url, server=server, hours=args.hours, log_dir=logs)
            print("  " + json.dumps(runs[n]), flush=True)
        sizes["ingested"] = table_sizes(url)
        period = START.strftime("%Y-%m")
        sizes["rate_s"] = rate(url, period)
        sizes["rated"] = table_sizes(url)
        summary(info, runs, sizes, args)
        month_start = START.replace(day=1).date().isoformat()
        month_end = ((START.replace(day=28) + timedelta(days=4)).replace(day=1) - timedelta(days=1)).date().isoformat()
        if not args.skip_load:
            loads.append((f"{args.hours} h ingested", serve_and_load(url, gpus=args.gpus, prom_url=server.url,
                                                                     start=month_start, end=month_end, args=args)))
            report(loads[-1][1], goal=5)
        if args.replicate_days:
            copied, copy_s = replicate(url, hours=args.hours, days=args.replicate_days)
            print(f"\ncopied the ingested hours to {args.replicate_days} days ({copied} h more) in {copy_s:.0f} s",
                  flush=True)
            sizes["replicated"] = table_sizes(url)
            for table in ("unit_hour", "usage_rollup", "pool_hour", "breach_minute"):
                size, rows = sizes["replicated"][table]
                print(f"  {table}: {rows:,} rows, {size / 2**20:.0f} MiB")
            print(f"  rating the month again: {rate(url, period):.1f} s", flush=True)
            if not args.skip_load:
                loads.append((f"{args.replicate_days} days", serve_and_load(
                    url, gpus=args.gpus, prom_url=server.url, start=month_start, end=month_end, args=args)))
                report(loads[-1][1], goal=5)
    finally:
        server.stop()
        if url and not args.keep:
            drop_postgres_database(url)
        elif url:
            print(f"database kept: {url}")
    print(f"load average at the end: {os.getloadavg()}")
    print(json.dumps({"info": info, "runs": runs}, default=str))


if __name__ == "__main__":
    main()
