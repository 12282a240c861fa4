"""Benchmark: the finance API under load, `GET /api/v1/periods/{p}/invoices?limit=100` against /healthz.

Run:  .venv/bin/python benchmarks/api_load.py [--requests 640 --concurrency 64 --time-cap 60] [--allocation]

`--allocation` adds phases of the allocation explorer's API over the same month
(`GET /api/v1/allocation?window={p}&aggregate=tenant`, and `aggregate=namespace`), each between healthz phases.

A throwaway PostgreSQL database gets one month of rollups for 500 tenants, 40 pools and 8,192 GPUs
(the rating benchmark's generator, bulk COPY in a child process) and is rated through
`periods.rate`. One uvicorn process serves it on loopback; an httpx async client keeps
`--concurrency` requests in flight with a finance bearer token, alternating phases of /healthz and
the invoice page in the same run, and prints p50, p99, throughput, the invoice p99 against the
neighbouring healthz phases' p99 (goal <= 3x) and the error count (goal 0).
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import sys
import time
from contextlib import ExitStack
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from benchmarks.dashboard_load import interleaved, report  # noqa: E402
from benchmarks.rating import create_database, drop_database, generate  # noqa: E402
from tests.support.server import running_portal  # noqa: E402


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
        if first.status_code != 200 or len(body["invoices"]) != 100 or not body["next_cursor"]:
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
    args = parser.parse_args()

    url = create_database()
    stack = ExitStack()
    try:
        token = seed(url, args)
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
