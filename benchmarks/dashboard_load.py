"""Dashboard load benchmark: the overview and its htmx partials vs /healthz on one real uvicorn over PostgreSQL.

    .venv/bin/python benchmarks/dashboard_load.py --gpus 1024 --days 30 --requests 320 --concurrency 32

Seeding: a month of a simulated 1,024-GPU fleet, ingested from the simulator source through the real
ingestion path (timed and printed; about 0.35 s per hour of 1,024 GPUs here, so ~4 minutes a month).
`--ingest-hours 24` ingests one day and repeats its rollup rows for the rest of the month in bulk
(INSERT ... SELECT with the hour shifted: the same tables and shapes) for a quicker run.

Load: per route, a fixed number of requests from an httpx async client with `--concurrency` in flight,
stopped early at `--time-cap` seconds; loopback only. /healthz runs before, between and after the
dashboard routes on the same server in the same run. Printed: p50/p99 per route, each route's p99 over
the mean p99 of the healthz phases around it (goal <= 5x), and errors (goal 0).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
from sqlalchemy import text  # noqa: E402

from app.auth import service, sessions  # noqa: E402
from app.core.db import make_engine, unit_of_work  # noqa: E402
from app.core.timeutil import floor_hour, utcnow  # noqa: E402
from app.metrics.ingest import ingest_hours  # noqa: E402
from app.metrics.live import LIVE_METRICS  # noqa: E402
from app.metrics.simulator import Simulator, serve_exporter  # noqa: E402
from app.metrics.simulator.policy import seed_policy  # noqa: E402
from app.policy.service import import_version  # noqa: E402
from tests.support.databases import drop_postgres_database, migrated, new_postgres_database  # noqa: E402
from tests.support.prometheus import PrometheusServer  # noqa: E402
from tests.support.server import running_portal  # noqa: E402

HTMX = {"HX-Request": "true"}
# (label, path, headers): the overview page, its range swap (htmx content block) and its live partials.
ROUTES = [
    ("overview page", "/", {}),
    ("overview htmx range", "/?start={start}&end={end}", {**HTMX, "HX-Target": "main"}),
    ("partial: ingestion health", "/overview/health", HTMX),
    ("partial: SLA status", "/overview/sla", HTMX),
    # Issue 13: the per-GPU heatmap of the largest pool over the whole range, a MIG GPU's instances, and the
    # live fleet view's htmx refresh (one Prometheus query per refresh, cached a few seconds across requests).
    ("fleet: per-GPU heatmap h100", "/fleet?start={start}&end={end}&pool=h100", {}),
    ("fleet: MIG GPU's instances", "/fleet?start={start}&end={end}&pool=mixed-a100&gpu={mig}", {}),
    ("fleet: live refresh", "/fleet/live", {**HTMX, "HX-Target": "live"}),
]

# Day-by-day copies of the ingested rollups (PostgreSQL): the same rows with the hour shifted by :shift days.
SHIFT = "make_interval(days => :shift)"
REPLICATE = [
    f"""INSERT INTO ingest_hour (hour, status, policy_version_id, attempts, last_error, ingested_at, duration_s)
        SELECT hour + {SHIFT}, status, policy_version_id, attempts, last_error, ingested_at + {SHIFT}, duration_s
        FROM ingest_hour WHERE hour >= :s AND hour < :e""",
    f"""INSERT INTO pool_hour (hour, pool, gpus, capacity_gpu_seconds, dark_minutes, policy_version_id)
        SELECT hour + {SHIFT}, pool, gpus, capacity_gpu_seconds, dark_minutes, policy_version_id
        FROM pool_hour WHERE hour >= :s AND hour < :e""",
    f"""INSERT INTO pool_hour_model (hour, pool, model, gpus, measured_gpus, measured_kwh)
        SELECT hour + {SHIFT}, pool, model, gpus, measured_gpus, measured_kwh
        FROM pool_hour_model WHERE hour >= :s AND hour < :e""",
    f"""INSERT INTO usage_rollup (hour, pool, tenant, klass, dark, gpu_seconds, activity_sum, activity_samples,
                                 policy_version_id)
        SELECT hour + {SHIFT}, pool, tenant, klass, dark, gpu_seconds, activity_sum, activity_samples, policy_version_id
        FROM usage_rollup WHERE hour >= :s AND hour < :e""",
    f"""INSERT INTO unit_hour (hour, node, gpu_uuid, gpu_instance, gpu_index, mig_profile, model, pool,
                              capacity_gpu_seconds, gpu_seconds, activity_sum, activity_samples, tenants,
                              fb_used_peak_mib, policy_version_id)
        SELECT hour + {SHIFT}, node, gpu_uuid, gpu_instance, gpu_index, mig_profile, model, pool, capacity_gpu_seconds,
               gpu_seconds, activity_sum, activity_samples, tenants, fb_used_peak_mib, policy_version_id
        FROM unit_hour WHERE hour >= :s AND hour < :e""",
    f"""INSERT INTO breach_minute (hour, service, service_tenant, pool, minute_end, p99_ms)
        SELECT hour + {SHIFT}, service, service_tenant, pool, minute_end + {SHIFT}, p99_ms
        FROM breach_minute WHERE hour >= :s AND hour < :e""",
    f"""INSERT INTO breach_share (breach_id, tenant, gpu_seconds)
        SELECT nb.id, sh.tenant, sh.gpu_seconds
        FROM breach_minute ob JOIN breach_share sh ON sh.breach_id = ob.id
        JOIN breach_minute nb ON nb.service = ob.service AND nb.minute_end = ob.minute_end + {SHIFT}
        WHERE ob.hour >= :s AND ob.hour < :e""",
]


def seed(url: str, *, gpus: int, days: int, ingest_hours_n: int) -> dict:
    """Policy, admin session, `ingest_hours_n` simulator hours through ingestion, the rest copied in bulk."""
    engine = make_engine(url)
    sim = Simulator(seed=42, gpus=gpus, scrape_interval_s=30)
    end = floor_hour(utcnow())
    start = end - timedelta(days=days)
    with unit_of_work(engine) as session:
        import_version(session=session, document=seed_policy(sim), actor="bench", effective_from=start - timedelta(days=1))
        user = service.create_user(session=session, name="bench", role="admin", password=None, actor="bench")
        session_id = service.start_session(session=session, user=user)
    ingest_end = min(end, start + timedelta(hours=ingest_hours_n))
    began = time.perf_counter()
    with unit_of_work(engine) as session:
        report = ingest_hours(session=session, source=sim.source(), start=start, end=ingest_end, scrape_interval_s=30)
    ingest_s = time.perf_counter() - began
    hours_done = len(report.ok)
    assert hours_done and not report.gaps, (hours_done, report.gaps)
    per_hour = ingest_s / hours_done
    out = {"ingested_hours": hours_done, "ingest_s": ingest_s, "projected_month_s": per_hour * days * 24,
           "copied_hours": 0, "copy_s": 0.0, "start": start, "end": end, "session_id": session_id}
    if ingest_end < end:
        if (ingest_end - start) % timedelta(days=1):
            raise SystemExit("--ingest-hours must be a whole number of days when the rest is copied")
        span = (ingest_end - start) // timedelta(days=1)
        copies = days // span - 1
        began = time.perf_counter()
        with engine.begin() as conn:
            for c in range(1, copies + 1):  # the ingested block of `span` days, shifted by c * span days
                for statement in REPLICATE:
                    conn.execute(text(statement), {"s": start, "e": ingest_end, "shift": c * span})
        with engine.begin() as conn:
            conn.execute(text("ANALYZE"))
        out["copy_s"] = time.perf_counter() - began
        out["copied_hours"] = copies * span * 24
    with engine.connect() as conn:
        out["usage_rows"] = conn.execute(text("SELECT count(*) FROM usage_rollup")).scalar()
        out["pool_hours"] = conn.execute(text("SELECT count(*) FROM pool_hour")).scalar()
        out["breach_minutes"] = conn.execute(text("SELECT count(*) FROM breach_minute")).scalar()
        out["unit_hours"] = conn.execute(text("SELECT count(*) FROM unit_hour")).scalar()
    engine.dispose()
    return out


def reuse(url: str) -> dict:
    """The range and a fresh admin session of a database seeded by an earlier run."""
    engine = make_engine(url)
    with engine.connect() as conn:
        start, last = conn.execute(text("SELECT min(hour), max(hour) FROM ingest_hour")).one()
        usage_rows = conn.execute(text("SELECT count(*) FROM usage_rollup")).scalar()
        pool_hours = conn.execute(text("SELECT count(*) FROM pool_hour")).scalar()
    with unit_of_work(engine) as session:
        user = service.get_user_by_name(session=session, name="bench")
        session_id = service.start_session(session=session, user=user)
    engine.dispose()
    return {"start": start, "end": last + timedelta(hours=1), "session_id": session_id, "usage_rows": usage_rows,
            "pool_hours": pool_hours}


async def load(client: httpx.AsyncClient, path: str, headers: dict, *, requests: int, concurrency: int,
               time_cap: float) -> dict:
    """`requests` GETs with `concurrency` in flight (bounded by `time_cap` seconds); latencies in ms."""
    latencies: list[float] = []
    errors = 0
    kinds: dict[str, int] = {}
    sent = 0
    deadline = time.monotonic() + time_cap

    async def worker():
        nonlocal errors, sent
        while sent < requests and time.monotonic() < deadline:
            sent += 1
            t0 = time.perf_counter()
            try:
                r = await client.get(path, headers=headers)
                await r.aread()
                if r.status_code != 200:
                    errors += 1
                    kinds[f"HTTP {r.status_code}"] = kinds.get(f"HTTP {r.status_code}", 0) + 1
            except httpx.HTTPError as exc:
                errors += 1
                kinds[type(exc).__name__] = kinds.get(type(exc).__name__, 0) + 1
            latencies.append((time.perf_counter() - t0) * 1000)

    began = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    wall = time.perf_counter() - began
    latencies.sort()
    return {"n": len(latencies), "errors": errors, "kinds": kinds, "p50": statistics.median(latencies),
            "p99": latencies[max(0, int(len(latencies) * 0.99) - 1)], "rps": len(latencies) / wall}


async def interleaved(client: httpx.AsyncClient, phases: list[tuple[str, str, dict]], args) -> list[tuple[str, dict]]:
    """Each phase between two /healthz phases: a route is compared with the healthz runs right before and
    after it, so a neighbour's load on this shared machine hits both sides alike."""
    kw = {"requests": args.requests, "concurrency": args.concurrency, "time_cap": args.time_cap}
    results = [("/healthz", await load(client, "/healthz", {}, **kw))]
    for label, path, headers in phases:
        results.append((label, await load(client, path, headers, **kw)))
        results.append(("/healthz", await load(client, "/healthz", {}, **kw)))
    return results


def report(results: list[tuple[str, dict]], *, goal: float) -> None:
    """Print each phase and the worst p99 relative to its neighbouring /healthz phases."""
    width = max(len(label) for label, _ in results) + 2
    print(f"\n{'phase':{width}} {'n':>5} {'err':>4} {'p50 ms':>8} {'p99 ms':>8} {'req/s':>7} {'p99/healthz':>12}")
    errors, ratios = 0, []
    for i, (label, r) in enumerate(results):
        errors += r["errors"]
        ratio = ""
        if label != "/healthz":
            ratios.append(r["p99"] / ((results[i - 1][1]["p99"] + results[i + 1][1]["p99"]) / 2))
            ratio = f"{ratios[-1]:.2f}x"
        print(f"{label:{width}} {r['n']:>5} {r['errors']:>4} {r['p50']:>8.1f} {r['p99']:>8.1f} {r['rps']:>7.1f} "
              f"{ratio:>12}" + (f"  {r['kinds']}" if r["kinds"] else ""))
    best = min(r["p99"] for label, r in results if label == "/healthz")
    worst = max(r["p99"] for label, r in results if label != "/healthz")
    print(f"\nworst p99 / mean p99 of the neighbouring healthz phases = {max(ratios):.2f}x (goal <= {goal:g}x); "
          f"against the best healthz phase ({best:.0f} ms): {worst / best:.2f}x; errors = {errors} (goal 0); "
          f"load average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")


def prometheus_queries(url: str | None) -> int | None:
    """Instant queries Prometheus has answered so far, from its own /metrics (it does not scrape itself here)."""
    if not url:
        return None
    text = httpx.get(f"{url}/metrics", timeout=30).text
    return sum(int(float(line.rsplit(" ", 1)[1])) for line in text.splitlines()
               if line.startswith("prometheus_http_requests_total{") and 'handler="/api/v1/query"' in line)


async def run_load(base: str, cookie: str, args, start: str, end: str, mig: str = "",
                   prom: str | None = None, routes_: list[tuple[str, str, dict]] | None = None) -> list[tuple[str, dict]]:
    """Warm up and check every route, then `interleaved`; `routes_` replaces ROUTES (benchmarks/fleet_e2e.py)."""
    # The client drops a connection idle for 2 s: uvicorn closes idle ones after 5 s, and a request sent on a
    # connection the server is closing at that moment fails with ReadError (the keep-alive race), which is
    # the client's bookkeeping, not the route under test.
    limits = httpx.Limits(max_connections=args.concurrency, max_keepalive_connections=args.concurrency,
                          keepalive_expiry=2.0)
    async with httpx.AsyncClient(base_url=base, cookies={sessions.SESSION_COOKIE: cookie}, timeout=60,
                                 limits=limits) as client:
        routes = [(label, path.format(start=start, end=end, mig=mig), headers)
                  for label, path, headers in (ROUTES if routes_ is None else routes_)]
        for label, path, headers in routes:  # warm-up and a check that every route answers
            r = await client.get(path, headers=headers)
            if r.status_code != 200:
                raise SystemExit(f"{label} {path}: HTTP {r.status_code}")
        before = prometheus_queries(prom)
        began = time.monotonic()
        results = await interleaved(client, routes, args)
        if prom:
            asked = prometheus_queries(prom) - before
            minutes = (time.monotonic() - began) / 60
            print(f"live view: {asked} Prometheus instant queries over {minutes:.1f} min of load "
                  f"({results[-2][1]['n'] if results[-2][0] == 'fleet: live refresh' else '?'} live refreshes)")
        return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gpus", type=int, default=1024)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--ingest-hours", type=int, default=None,
                        help="hours ingested through the simulator (default: all; the rest is copied in bulk)")
    parser.add_argument("--requests", type=int, default=320, help="requests per route")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--time-cap", type=float, default=90.0, help="seconds per route at most")
    parser.add_argument("--workers", type=int, default=1, help="uvicorn worker processes")
    parser.add_argument("--keep", action="store_true", help="keep the seeded database and print its URL")
    parser.add_argument("--database-url", help="reuse a database seeded by an earlier --keep run (no seeding)")
    args = parser.parse_args()

    url = args.database_url or migrated(new_postgres_database("cbbench"))
    stack = ExitStack()
    try:
        if args.database_url:
            info = reuse(url)
            print(f"reusing {url}: {info['usage_rows']:,} usage rows, {info['pool_hours']:,} pool-hours")
        else:
            print(f"seeding {args.days} days of a {args.gpus}-GPU simulated fleet into PostgreSQL ...", flush=True)
            info = seed(url, gpus=args.gpus, days=args.days, ingest_hours_n=args.ingest_hours or args.days * 24)
            print(f"  simulator -> ingestion: {info['ingested_hours']} h in {info['ingest_s']:.1f} s "
                  f"({info['ingest_s'] / info['ingested_hours']:.2f} s/hour; a whole month would take "
                  f"~{info['projected_month_s'] / 60:.0f} min)")
            if info["copied_hours"]:
                print(f"  bulk copy of the ingested days: {info['copied_hours']} h in {info['copy_s']:.1f} s")
            print(f"  rows: usage_rollup {info['usage_rows']:,}, pool_hour {info['pool_hours']:,}, "
                  f"breach_minute {info['breach_minutes']:,}, unit_hour {info['unit_hours']:,}")
        server_args = ("--workers", str(args.workers), "--log-level", "warning", "--no-access-log")
        # The live view reads a real Prometheus scraping the simulator's exporter (the same fleet) every 15 s.
        # Only the device families the live view reads: rendering the vLLM histograms of 1,024 GPUs' replicas
        # takes ~17 s, past the scrape timeout (the SLA query then finds no traffic, at the same cost).
        sim = Simulator(seed=42, gpus=args.gpus, scrape_interval_s=30)
        exporter = serve_exporter(sim, families=LIVE_METRICS)
        stack.callback(exporter.shutdown)
        prom_root = Path(tempfile.mkdtemp(prefix="bench-prom-"))
        stack.callback(shutil.rmtree, prom_root, True)
        prom = stack.enter_context(PrometheusServer(prom_root, scrape_target=f"127.0.0.1:{exporter.server_address[1]}",
                                                    scrape_interval_s=15))
        deadline = time.monotonic() + 120
        while not prom.query("DCGM_FI_DEV_GPU_UTIL"):  # the first scrape of the whole fleet has been stored
            if time.monotonic() > deadline:
                raise SystemExit(f"Prometheus stored no scrape of the simulator in 120 s: {prom.log.read_text()[-2000:]}")
            time.sleep(0.5)
        env = {**os.environ, "CHARGEBACK_PROMETHEUS_URL": prom.url}
        base = stack.enter_context(running_portal(url, extra_args=server_args, env=env)).base
        mig = next(g.uuid for g in sim.topology.gpus if g.mig)
        cookie = sessions.sign_session_id(info["session_id"])
        from app.core.settings import get_settings

        tz = get_settings().tz
        start = info["start"].astimezone(tz).date().isoformat()
        end = (info["end"] - timedelta(seconds=1)).astimezone(tz).date().isoformat()
        print(f"load: {args.requests} requests per route, {args.concurrency} concurrent, cap {args.time_cap:.0f} s, "
              f"{args.workers} uvicorn worker(s), loopback {base}")
        results = asyncio.run(run_load(base, cookie, args, start, end, mig, prom.url))
        report(results, goal=5)
    finally:
        stack.close()
        if args.keep or args.database_url:
            print(f"database kept: {url}")
        else:
            drop_postgres_database(url)


if __name__ == "__main__":
    main()
