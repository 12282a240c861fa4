"""Scaling out on one PostgreSQL database: two `chargeback serve` processes and three `chargeback worker` processes.

Every hour is ingested once, by one of the workers; either serve process gives the same JSON; a write
through one is seen at once by the other's caches; sign-in failures lock out across both, and a session
opened on one is a session on the other.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from sqlmodel import Session, select

from app.auth import service
from app.auth.service import MAX_FAILURES
from app.core.db import make_engine, unit_of_work
from app.core.timeutil import HOUR, floor_hour
from app.metrics.models import IngestHour
from app.metrics.simulator import Simulator
from app.policy.service import import_version
from tests.support.billing import CLI, month_hours, record_gaps
from tests.support.databases import drop_postgres_database, migrated, new_postgres_database
from tests.support.routes import page_csrf
from tests.support.server import running_portal

pytestmark = pytest.mark.postgres

HOURS = 24
GPUS = 32  # the simulator's smallest default fleet
PASSWORD = "correct horse battery staple"


def _first_day_of_last_month(now: datetime) -> datetime:
    return (now.replace(day=1, hour=0, minute=0, second=0, microsecond=0) - timedelta(days=1)).replace(day=1)


@pytest.fixture
def pg_url() -> Iterator[str]:
    url = migrated(new_postgres_database())
    try:
        yield url
    finally:
        drop_postgres_database(url)


def _environment(url: str, *, delay_s: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHARGEBACK_")}
    return env | {"CHARGEBACK_DATABASE_URL": url, "CHARGEBACK_SIMULATOR_GPUS": str(GPUS),
                  "CHARGEBACK_INGEST_DELAY_S": str(delay_s)}


def _prepare(url: str, start: datetime) -> dict[str, str]:
    """The simulator's policy from `start`, a sign-in user, and a finance token (committed)."""
    engine = make_engine(url)
    with unit_of_work(engine) as session:
        import_version(session=session, document=Simulator(gpus=GPUS).policy(), actor="test",
                       effective_from=start - timedelta(days=1), comment="scale-out test")
        for name in ("alice", "bob"):
            service.create_user(session=session, name=name, role="viewer", password=PASSWORD, actor="test")
        fin = service.create_user(session=session, name="fin", role="finance", password=None, actor="test")
        _, raw = service.create_token(session=session, user=fin, scopes="read write", lifetime=timedelta(days=1),
                                      actor="test")
    engine.dispose()
    return {"Authorization": f"Bearer {raw}"}


def _ingested(url: str) -> list[IngestHour]:
    engine = make_engine(url)
    with Session(engine) as session:
        rows = list(session.exec(select(IngestHour).order_by(IngestHour.hour)))
    engine.dispose()
    return rows


def _wait_for(condition, what: str, timeout_s: float = 240, logs: tuple[Path, ...] = ()):
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}\n" + "\n".join(p.read_text() for p in logs))
        time.sleep(0.2)  # state-free: polls condition() until the deadline


def _same_answers(a: str, b: str, headers: dict, paths: list[str]) -> dict[str, object]:
    answers = {}
    for path in paths:
        left, right = httpx.get(a + path, headers=headers, timeout=60), httpx.get(b + path, headers=headers, timeout=60)
        assert left.status_code == right.status_code == 200, (path, left.text, right.text)
        assert left.json() == right.json(), path
        answers[path] = left.json()
    return answers


def test_two_serve_processes_and_three_workers_share_one_database(pg_url, tmp_path):
    now = datetime.now(UTC)
    start = _first_day_of_last_month(now) + timedelta(days=9)  # a day wholly inside last month
    end = start + HOURS * HOUR
    # The worker's last finished hour ends at `end` for the next half hour whatever the clock says.
    delay_s = int((now - end).total_seconds()) - 1800
    assert floor_hour(now - timedelta(seconds=delay_s)) == end
    headers = _prepare(pg_url, start)
    env = _environment(pg_url, delay_s=delay_s)
    month = f"{start:%Y-%m}"
    allocation = f"/api/v1/allocation?window={month}&aggregate=tenant"

    serve = (str(CLI), "serve")
    with running_portal(pg_url, command=serve, env=env) as a, running_portal(pg_url, command=serve, env=env) as b:
        # Both cache the month's allocation while nothing is ingested.
        empty = _same_answers(a.base, b.base, headers, [allocation])[allocation]
        assert empty["rows"] == [] or all(float(r["gpu_hours"]) == 0 for r in empty["rows"])

        logs, workers = [], []
        for i in range(3):
            log = tmp_path / f"worker-{i}.log"
            logs.append(log)
            with open(log, "w") as out:
                workers.append(subprocess.Popen(
                    [str(CLI), "worker", "--poll-seconds", "0.5", "--batch-hours", "2", "--backfill-start", start.isoformat()],
                    env=env, stdout=out, stderr=subprocess.STDOUT))
        try:
            rows = _wait_for(lambda: (r := _ingested(pg_url)) and len(r) == HOURS and all(x.status == "ok" for x in r) and r,
                             "every hour ingested", logs=tuple(logs))
            # Each worker has logged its last round once no hour is pending: the counts are final.
            counts = _wait_for(lambda: _worker_counts(logs) if sum(_worker_counts(logs)) == HOURS else None,
                               "the workers' logs to account for every hour", logs=tuple(logs))
        finally:
            for proc in workers:
                proc.terminate()
            for proc in workers:
                proc.wait(timeout=30)
        assert [r.hour for r in rows] == [start + k * HOUR for k in range(HOURS)]
        assert [r.attempts for r in rows] == [1] * HOURS  # no hour ingested twice, none retried
        print(f"hours ingested per worker: {counts}")

        # Ingested by other processes: neither serve process answers from its cached empty month.
        paths = [allocation, f"/api/v1/usage?start={start:%Y-%m-%dT%H:%M:%S}&end={end:%Y-%m-%dT%H:%M:%S}&group_by=pool", "/api/v1/periods", "/api/v1/me",
                 f"/api/v1/allocation?window={month}&aggregate=pool"]
        before = _same_answers(a.base, b.base, headers, paths)
        assert before[allocation] != empty and [m["source"] for m in before[allocation]["months"]] == ["estimate"]

        rated = httpx.post(f"{a.base}/api/v1/periods/{month}/rate", headers=headers, timeout=120)
        assert rated.status_code == 200, rated.text
        # A draft is rated from the rollups as they are: still the estimate, the same through both.
        drafted = _same_answers(a.base, b.base, headers, [allocation, "/api/v1/periods"])
        assert [m["source"] for m in drafted[allocation]["months"]] == ["estimate"]
        # The rest of the month was tried and the source could not answer (gaps): finance closes it through A.
        with unit_of_work(make_engine(pg_url)) as session:
            assert record_gaps(session, month) == len(month_hours(month)) - HOURS
        closed = httpx.post(f"{a.base}/api/v1/periods/{month}/close", headers=headers, timeout=120,
                            json={"accept_gaps": True, "reason": "the cluster was exported from the 10th on"})
        assert closed.status_code == 200, closed.text
        # Written through A, read from B at once: B's cached estimate is not served any more.
        after = httpx.get(b.base + allocation, headers=headers, timeout=60).json()
        assert [m["source"] for m in after["months"]] == ["invoice"]
        _same_answers(a.base, b.base, headers, [*paths, f"/api/v1/periods/{month}/invoices"])

        # Failed sign-ins count in the database: alternating processes, the fifth locks both out.
        with httpx.Client(timeout=60) as browser:
            statuses = []
            for attempt in range(MAX_FAILURES):
                base = (a.base, b.base)[attempt % 2]
                statuses.append(_sign_in(browser, base, "wrong password").status_code)
            assert statuses == [401] * (MAX_FAILURES - 1) + [429]
            refused = _sign_in(browser, b.base if MAX_FAILURES % 2 else a.base, PASSWORD)
            assert refused.status_code == 429 and "Too many failed sign-ins" in refused.text

        # A session opened through A is a session on B (no sticky sessions), and signing out on B ends it on A.
        with httpx.Client(timeout=60) as browser:
            assert _sign_in(browser, a.base, PASSWORD, name="bob").status_code == 303
            page = browser.get(f"{b.base}/")
            assert page.status_code == 200 and "bob" in page.text
            browser.post(f"{b.base}/logout", data={"csrf_token": page_csrf(page.text)})
            assert browser.get(f"{a.base}/", follow_redirects=False).status_code in (302, 303, 307)


def _worker_counts(logs: list[Path]) -> list[int]:
    """Hours each worker reported ingesting (its log lines 'ingested N hours, M gaps')."""
    return [sum(int(n) for n in re.findall(r"ingested (\d+) hours", log.read_text())) for log in logs]


def _sign_in(browser: httpx.Client, base: str, password: str, name: str = "alice") -> httpx.Response:
    form = browser.get(f"{base}/login")
    return browser.post(f"{base}/login", data={"username": name, "password": password,
                                               "csrf_token": page_csrf(form.text)})
