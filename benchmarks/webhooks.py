"""Webhook delivery cost: the worker's claim/record bookkeeping against bare signed HTTP posts.

Run:  .venv/bin/python benchmarks/webhooks.py [--events 200] [--skip-postgres]

N events for each of two subscriptions are planned and delivered by `deliver_due` to a real HTTP
receiver process (tests/support/webhook_receiver.py, answering 200 at once), on SQLite and
PostgreSQL: once with one request in flight, once with CHARGEBACK_WEBHOOK_CONCURRENCY=4. Then the same
2N requests, signed the same way, are sent with bare `post` calls (sequentially, then from 4 threads).
Printed: deliveries per second, ms per delivery, and the ratio of the worker's time to the bare posts
(what claiming each delivery, logging its attempt and recording its outcome in transactions of their
own costs on top of HTTP). The machine is shared: compare the ratios of one run, not absolute times.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sqlalchemy import update  # noqa: E402
from sqlmodel import Session, select  # noqa: E402

from app.core.db import make_engine, unit_of_work  # noqa: E402
from app.core.events import Event, emit  # noqa: E402
from app.core.settings import Settings  # noqa: E402
from app.notify.webhook_deliver import body_of, deliver_due, plan  # noqa: E402
from app.notify.webhook_http import post  # noqa: E402
from app.notify.webhook_models import WebhookDelivery  # noqa: E402
from app.notify.webhook_sign import headers  # noqa: E402
from app.notify.webhook_subscriptions import create_subscription  # noqa: E402
from tests.support.databases import (  # noqa: E402
    drop_postgres_database,
    migrated,
    new_postgres_database,
    new_sqlite_database,
)
from tests.support.webhooks import webhook_receiver  # noqa: E402

NOW = datetime(2026, 11, 2, 9, tzinfo=UTC)


def _requeue(engine) -> None:
    with unit_of_work(engine) as s:
        s.execute(update(WebhookDelivery).values(status="pending", next_attempt_at=NOW, claimed_until=None,
                                                 round_attempts=0, first_attempt_at=None))


def run(url: str, label: str, events: int, workdir: Path) -> None:
    engine = make_engine(url)
    with webhook_receiver(workdir / label) as rx:
        with unit_of_work(engine) as s:
            subs = [create_subscription(session=s, actor="bench", url=rx.url(path), event_types=["correction.created"])
                    for path in ("/a", "/b")]
        with unit_of_work(engine) as s:
            for n in range(events):
                emit(session=s, type="correction.created", tenant="vision",
                     payload={"line_id": f"2026-11/vision/pool/correction/{n}", "amount": "-1.00"})
        started = time.perf_counter()
        with unit_of_work(engine) as s:
            plan(session=s, now=NOW, limit=events + 10)
        planned = time.perf_counter() - started
        total = 2 * events
        worker = {}
        for concurrency in (1, 4):
            _requeue(engine)
            settings = Settings(webhook_concurrency=concurrency)
            started = time.perf_counter()
            done = deliver_due(engine=engine, settings=settings, now=NOW, limit=total + 1)
            worker[concurrency] = time.perf_counter() - started
            assert len(done) == total and {d.status for d in done} == {"delivered"}, {d.last_error for d in done}
        # The same requests, bare: signed like the worker signs them, posted with the same bounded client.
        with Session(engine) as s:
            bodies = [body_of(e) for e in s.exec(select(Event).where(Event.type == "correction.created"))]
        jobs = [(sub.url, secret, body) for sub, secret in subs for body in bodies]
        settings = Settings()

        def bare_post(job) -> int:
            target, secret, body = job
            signed = headers([secret], msg_id="evt_bench", timestamp=int(time.time()), body=body)
            outcome = post(target, body, signed, connect_timeout_s=settings.webhook_connect_timeout_s,
                           read_timeout_s=settings.webhook_read_timeout_s, deadline_s=settings.webhook_deadline_s)
            assert outcome.ok, outcome
            return outcome.status or 0

        bare = {}
        started = time.perf_counter()
        for job in jobs:
            bare_post(job)
        bare[1] = time.perf_counter() - started
        started = time.perf_counter()
        with ThreadPoolExecutor(max_workers=4) as pool:
            list(pool.map(bare_post, jobs))
        bare[4] = time.perf_counter() - started
        assert len(rx.requests()) == 4 * total
    engine.dispose()
    print(f"{label:10s} {total} deliveries (2 subscriptions), plan {planned * 1000:.0f} ms")
    for c in (1, 4):
        print(f"           {c} in flight: worker {worker[c]:.2f} s ({total / worker[c]:.0f}/s, "
              f"{worker[c] / total * 1000:.2f} ms each); bare posts {bare[c]:.2f} s ({total / bare[c]:.0f}/s, "
              f"{bare[c] / total * 1000:.2f} ms each); worker / bare = {worker[c] / bare[c]:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=200, help="events per subscription (two subscriptions)")
    parser.add_argument("--skip-postgres", action="store_true")
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f}, {os.cpu_count()} CPUs")
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        run(migrated(new_sqlite_database(workdir)), "sqlite", args.events, workdir)
        if not args.skip_postgres:
            url = migrated(new_postgres_database("cbbench"))
            try:
                run(url, "postgresql", args.events, workdir)
            finally:
                drop_postgres_database(url)


if __name__ == "__main__":
    main()
