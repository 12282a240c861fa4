"""Benchmark: the finance API under load, `GET /api/v1/periods/{p}/invoices?limit=100` against /healthz.

Run:  .venv/bin/python benchmarks/api_load.py [--requests 640 --concurrency 64 --time-cap 60] [--allocation]
      .venv/bin/python benchmarks/api_load.py --workers 2   # throughput of `chargeback serve --workers 2` vs 1

`--allocation` adds phases of the allocation explorer's API over the same month
(`GET /api/v1/allocation?window={p}&aggregate=tenant`, and `aggregate=namespace`), each between healthz phases.

A throwaway PostgreSQL database gets one month of rollups for 500 tenants, 40 pools and 8,192 GPUs
(the rating benchmark's generator, bulk COPY in a child process) and is rated through
`periods.rate`. One uvicorn process serves it on loopback; an httpx async client keeps
`--concurrency` requests in flight with a finance bearer token, alternating phases of /healthz and
the invoice page in the same run, and prints p50, p99, throughput, the invoice p99 against the
neighbouring healthz phases' p99 (goal <= 3x) and the error count (goal 0).

`--workers N` measures scale-out instead: `chargeback serve --workers 1` and `--workers N` in turn
(1, N, 1, N: a neighbour's load drifts), the same invoice load on each after a warm-up, and prints
the throughput ratio (goal >= 1.7x for 2) with what it cost: CPU-seconds per request of the server
processes (all workers, from /proc) and of this load generator, which runs on the same machine.
`--load-generator wrk` drives the measured phases with wrk (Debian's `wrk`, C, one thread, `--duration` s each)
instead of this process's httpx client: a load generator that costs a fraction of a millisecond per request
leaves the cores to the server.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import re
import resource
import shutil
import subprocess
import sys
import time
from contextlib import ExitStack
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from benchmarks.dashboard_load import interleaved, load, report  # noqa: E402
from benchmarks.rating import create_database, drop_database, generate  # noqa: E402
from tests.support.billing import CLI  # noqa: E402
from tests.support.server import running_portal  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")


def seed(url: str, args) -> str:
    """Generate and rate the month; returns a finance user's raw API token."""
    from app.auth import service
    from app.billing import periods
    from app.core.db import make_engine, unit_of_work
    from app.core.migrate import upgrade

    upgrade(url)
    t0 = time.perf_counter()
    child = multiprocessing.get_context("spawn").Process(target=generate, args=(url, args))
    child.start()
    child.join()
    if child.exitcode:
        raise SystemExit(f"generation failed (exit {child.exitcode})")
    t1 = time.perf_counter()
    engine = make_engine(url)
    with unit_of_work(engine) as session:
        periods.rate(session=session, period=args.month, actor="bench")
    t2 = time.perf_counter()
    with unit_of_work(engine) as session:
        user = service.create_user(session=session, name="bench-finance", role="finance", password=None,
                                   tenants=[], actor="bench")
        _, raw = service.create_token(session=session, user=user, scopes="read", lifetime=timedelta(days=1),
                                      actor="bench")
    engine.dispose()
    print(f"seeded: generation {t1 - t0:.1f} s, rating {t2 - t1:.1f} s", flush=True)
    return raw


async def run_load(base: str, token: str, args) -> list[tuple[str, dict]]:
    # Idle connections dropped after 2 s, below uvicorn's 5 s keep-alive (see dashboard_load: the close race).
    limits = httpx.Limits(max_connections=args.concurrency, max_keepalive_connections=args.concurrency,
                          keepalive_expiry=2.0)
    invoices = f"/api/v1/periods/{args.month}/invoices?limit=100"
    auth = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(base_url=base, timeout=60, limits=limits) as client:
        first = await client.get(invoices, headers=auth)
        body = first.json()
        if first.status_code != 200 or len(body["items"]) != 100 or not body["next_cursor"]:
            raise SystemExit(f"invoice page check failed: HTTP {first.status_code} {first.text[:200]}")
        phases = [("invoices?limit=100", invoices, auth)] * args.rounds
        if args.allocation:
            for aggregate in ("tenant", "namespace"):
                path = f"/api/v1/allocation?window={args.month}&aggregate={aggregate}"
                answer = await client.get(path, headers=auth)
                if answer.status_code != 200 or len(answer.json()["rows"]) < args.tenants:
                    raise SystemExit(f"allocation check failed: HTTP {answer.status_code} {answer.text[:200]}")
                phases.append((f"allocation {aggregate}", path, auth))
        return await interleaved(client, phases, args)


def process_cpu() -> dict[int, tuple[int, float]]:
    """pid -> (parent pid, user + system CPU seconds) of every process on this machine."""
    stats = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue  # exited meanwhile
            stats[int(entry)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / TICKS)
    return stats


def tree_cpu(root: int, stats: dict[int, tuple[int, float]]) -> dict[int, float]:
    """CPU seconds of a process and every live descendant (uvicorn's workers are its children)."""
    tree = {root}
    for _ in range(4):  # supervisor -> workers (-> their helpers)
        tree |= {pid for pid, (ppid, _) in stats.items() if ppid in tree}
    return {pid: stats[pid][1] for pid in tree if pid in stats}


def backend_pids(url: str) -> set[int]:
    """PostgreSQL's backend processes connected to the benchmark's database (the server's pool)."""
    from sqlalchemy import create_engine, text

    engine = create_engine("postgresql+psycopg://" + url.split("://", 1)[1])
    with engine.connect() as conn:
        pids = set(conn.execute(text("SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                                     "AND pid <> pg_backend_pid()")).scalars())
    engine.dispose()
    return pids


def cpu_snapshot(root: int, url: str) -> dict[str, dict[int, float]]:
    stats = process_cpu()
    return {"server": tree_cpu(root, stats),
            "database": {pid: stats[pid][1] for pid in backend_pids(url) if pid in stats}}


def cpu_spent(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU seconds between two snapshots (a process started in between counts from zero)."""
    return sum(seconds - before.get(pid, 0.0) for pid, seconds in after.items())


def cpu_seconds(who: int = resource.RUSAGE_SELF) -> float:
    """User + system CPU seconds of this process (RUSAGE_SELF) or of its waited-for children (wrk)."""
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


_UNITS = {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60_000.0}


def _ms(value: str) -> float:
    number, unit = re.fullmatch(r"([\d.]+)(us|ms|s|m)", value).groups()
    return float(number) * _UNITS[unit]


def wrk_phase(base: str, path: str, token: str, args) -> dict:
    """One measured phase driven by wrk; its summary parsed into the same fields as `load`'s."""
    out = subprocess.run(
        ["wrk", "-t1", f"-c{args.concurrency}", f"-d{args.duration}s", "--latency", "--timeout", "60s",
         "-H", f"Authorization: Bearer {token}", base + path],
        capture_output=True, text=True, check=True,
    ).stdout
    done = int(re.search(r"(\d+) requests in", out).group(1))
    bad = int(m.group(1)) if (m := re.search(r"Non-2xx or 3xx responses: (\d+)", out)) else 0
    socket = sum(map(int, m.groups())) if (m := re.search(
        r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)) else 0
    latency = dict(re.findall(r"^\s+(50|99)%\s+([\d.]+(?:us|ms|s|m))\s*$", out, re.M))
    if len(latency) != 2:
        raise SystemExit(f"wrk printed no latency distribution:\n{out}")
    return {"n": done, "errors": bad + socket, "rps": float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1)),
            "p50": _ms(latency["50"]), "p99": _ms(latency["99"]),
            "kinds": {"non-2xx": bad, "socket": socket} if bad + socket else {}}


async def measured(base: str, pid: int, url: str, token: str, args) -> dict:
    """Warm every worker up, then one invoice phase with the CPU it cost the server, PostgreSQL and the load
    generator (this process's httpx client, or wrk)."""
    limits = httpx.Limits(max_connections=args.concurrency, max_keepalive_connections=args.concurrency,
                          keepalive_expiry=2.0)
    path, auth = f"/api/v1/periods/{args.month}/invoices?limit=100", {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(base_url=base, timeout=60, limits=limits) as client:
        await load(client, path, auth, requests=args.concurrency * 2, concurrency=args.concurrency, time_cap=args.time_cap)
    before = cpu_snapshot(pid, url)
    if args.load_generator == "wrk":
        client0 = cpu_seconds(resource.RUSAGE_CHILDREN)
        r = wrk_phase(base, path, token, args)
        client_s = cpu_seconds(resource.RUSAGE_CHILDREN) - client0
    else:
        async with httpx.AsyncClient(base_url=base, timeout=60, limits=limits) as client:
            client0 = cpu_seconds()
            r = await load(client, path, auth, requests=args.requests, concurrency=args.concurrency,
                           time_cap=args.time_cap)
            client_s = cpu_seconds() - client0
    after = cpu_snapshot(pid, url)
    for part in ("server", "database"):
        r[f"{part}_cpu_ms"] = cpu_spent(before[part], after[part]) * 1000 / r["n"]
    r["client_cpu_ms"] = client_s * 1000 / r["n"]
    return r


def scale_out(url: str, token: str, args) -> None:
    """Throughput of 1 serve worker and of `args.workers`, alternately, on the same data and load."""
    runs = []
    for workers in (1, args.workers, 1, args.workers):
        with running_portal(url, command=(str(CLI), "serve"), extra_args=("--workers", str(workers))) as portal:
            r = asyncio.run(measured(portal.base, portal.pid, url, token, args))
        runs.append((workers, r))
        print(f"workers {workers}: {r['n']} requests, {r['errors']} errors, {r['rps']:.1f} req/s, p50 {r['p50']:.0f} ms, "
              f"p99 {r['p99']:.0f} ms; CPU per request: server {r['server_cpu_ms']:.1f} ms, "
              f"PostgreSQL {r['database_cpu_ms']:.1f} ms, load generator {r['client_cpu_ms']:.1f} ms"
              + (f"; errors {r['kinds']}" if r["kinds"] else ""), flush=True)

    def mean(workers: int, key: str) -> float:
        values = [r[key] for w, r in runs if w == workers]
        return sum(values) / len(values)

    ratio = mean(args.workers, "rps") / mean(1, "rps")
    # What the machine could give with the load generator elsewhere: CPU per request of server + database.
    cost = {w: mean(w, "server_cpu_ms") + mean(w, "database_cpu_ms") for w in (1, args.workers)}
    print(f"\nthroughput {args.workers} workers / 1 worker = {ratio:.2f}x (goal >= 1.7x); server CPU per request "
          f"{mean(1, 'server_cpu_ms'):.1f} ms (1 worker) vs {mean(args.workers, 'server_cpu_ms'):.1f} ms "
          f"({args.workers}); load generator {mean(1, 'client_cpu_ms'):.1f} / {mean(args.workers, 'client_cpu_ms'):.1f} ms "
          f"per request; errors = {sum(r['errors'] for _, r in runs)}; load average {os.getloadavg()[0]:.1f} "
          f"on {os.cpu_count()} CPUs")
    print(f"server + PostgreSQL CPU per request: {cost[1]:.1f} ms (1 worker), {cost[args.workers]:.1f} ms "
          f"({args.workers}); 1 worker used {mean(1, 'rps') * mean(1, 'server_cpu_ms') / 1000:.2f} CPU of its own "
          f"and {mean(1, 'rps') * mean(1, 'database_cpu_ms') / 1000:.2f} of PostgreSQL's")
    # Capacity from CPU per request on an otherwise idle machine: a worker runs Python on one core at a
    # time (the GIL); all processes together on at most every core.
    cores = os.cpu_count() or 1
    client = mean(args.workers, "client_cpu_ms")

    def capacity(workers: int, with_client: bool) -> float:
        per_request = cost[workers] + (client if with_client else 0.0)
        return min(workers * 1000 / mean(workers, "server_cpu_ms"), cores * 1000 / per_request)

    for with_client, where in ((True, "on these cores"), (False, "on another machine")):
        one, many = capacity(1, with_client), capacity(args.workers, with_client)
        print(f"capacity from CPU per request on {cores} idle cores, load generator {where}: {one:.0f} req/s (1 worker), "
              f"{many:.0f} req/s ({args.workers}) = {many / one:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tenants", type=int, default=500)
    parser.add_argument("--pools", type=int, default=40)
    parser.add_argument("--gpus", type=int, default=8192)
    parser.add_argument("--month", default="2026-10")
    parser.add_argument("--requests", type=int, default=640, help="requests per phase")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--time-cap", type=float, default=60.0, help="seconds per phase at most")
    parser.add_argument("--rounds", type=int, default=2, help="invoice phases (each followed by a healthz phase)")
    parser.add_argument("--allocation", action="store_true", help="also load GET /api/v1/allocation (tenant, namespace)")
    parser.add_argument("--workers", type=int, default=1, help="N > 1: compare `chargeback serve --workers N` with 1")
    parser.add_argument("--load-generator", choices=("httpx", "wrk"), default="httpx",
                        help="with --workers: what drives the measured phases")
    parser.add_argument("--duration", type=int, default=20, help="seconds per wrk phase")
    args = parser.parse_args()
    if args.load_generator == "wrk" and not shutil.which("wrk"):
        raise SystemExit("--load-generator wrk needs wrk on PATH (Debian: apt-get install wrk)")

    url = create_database()
    stack = ExitStack()
    try:
        token = seed(url, args)
        if args.workers > 1:
            scale_out(url, token, args)
            return
        base = stack.enter_context(running_portal(url, extra_args=("--log-level", "warning", "--no-access-log"))).base
        print(f"load: {args.requests} requests per phase, {args.concurrency} concurrent, cap {args.time_cap:.0f} s, "
              f"1 uvicorn worker, loopback {base}; {args.tenants} tenants, month {args.month}")
        results = asyncio.run(run_load(base, token, args))
        report(results, goal=3)
    finally:
        stack.close()
        drop_database(url)


if __name__ == "__main__":
    main()
