"""Reliability under faults: what survives kill -9, a failing Prometheus, refused commits and floods.

Run:  .venv/bin/python benchmarks/reliability.py [--kills 8] [--flood 640] [--skip-postgres] [--only 12]

Faults tried, each against real processes (the `chargeback` CLI, uvicorn, Debian's prometheus,
PostgreSQL from CHARGEBACK_TEST_PG_URL) and each printed as counts:
  1. kill -9 of `chargeback ingest` (simulator source, SQLite) at spread-out moments, then a rerun:
     partial hours, integrity, and totals against an uninterrupted run.
  2. kill -9 of `chargeback close` (finalize, then issue in a second transaction) at spread-out
     moments: the period is rated, finalized with its documents pending, or finalized and issued,
     never in between (no document or event before all of them; one period.finalized event); an
     issued period's export matches its stored hash; a rerun of close (rated) or `chargeback
     issue` (pending, what the worker runs) completes it, and a further one issues nothing twice.
  3. Prometheus stopped before the n-th query of an ingest, or the n-th answer spoiled by a proxy
     (HTTP 503, an HTML error page, the connection cut mid-body), for every n: hours stored whole
     or recorded as gaps, and all filled (equal to an uninterrupted ingest) by the retry.
  4. Refused commits (PostgreSQL, a deferred constraint trigger) on token creation over HTTP:
     error answers, nothing kept, Idempotency-Key retries succeed exactly once.
  5. Floods against uvicorn on SQLite: parallel wrong guesses at one user (passwords checked, peak
     RSS), parallel sign-ins, and mixed requests 32 at a time (status counts; 500s).
  t. Hostile text and tenant scoping against uvicorn on SQLite (issue 25 items 2 and 3): every export
     (invoice CSV, FOCUS, /allocation.csv per aggregate) with label values and stored reasons holding
     CR, LF, NEL, U+2028 and formula prefixes, parsed back (cells live as a formula, rows split); every
     human-text input (reasons, titles, comments, descriptions, contacts, a department in a policy
     draft) sent control and line-separator characters (accepted, 5xx); every member of every subset of
     tenants asking every aggregate, API and CSV (rows, totals or forecasts over a tenant it cannot see).
  6. SSRF: receiver URLs an attacker tries (loopback, metadata, private, CGNAT, non-canonical numbers,
     IPv4-mapped, ...) through the API and the page of a uvicorn with no allow-list; deliveries to a
     loopback service whose permission was withdrawn; `chargeback doctor --json` against a
     Prometheus echoing the bearer token: requests tried, wrong grants, leaks, 5xx.
  7. Hostile input against uvicorn (SQLite, and PostgreSQL unless skipped), over raw sockets: every
     form field, query and path parameter and JSON field of every route, and the headers and cookies
     the portal reads, each with non-ASCII, a latin-1 byte, "²", NUL, CRLF, U+2028/U+0085 and 1 MB
     (tests/support/hostile.py), signed in as an admin with a valid CSRF token: requests per surface, 5xx.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from tests.support.server import free_port  # noqa: E402

PASSWORD = "correct horse battery staple"
START = datetime(2026, 11, 2, tzinfo=UTC)
INGEST_HOURS = 168
MONTH = "2026-11"


def cli(url: str, *args: str) -> subprocess.Popen:
    """`chargeback ARGS` on database `url`, as its own process (so that it can be killed)."""
    env = {**os.environ, "CHARGEBACK_DATABASE_URL": url, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-c", "from app.cli import app; app()", *args], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def run_cli(url: str, *args: str) -> int:
    proc = cli(url, *args)
    proc.communicate()
    return proc.returncode


def seed_policy(url: str, document=None) -> None:
    """Migrate `url` and store `document` (default: the simulator's own policy) as version 1."""
    from app.core.db import make_engine, unit_of_work
    from app.core.migrate import upgrade
    from app.metrics.simulator import Simulator
    from app.policy.service import import_version

    upgrade(url)
    engine = make_engine(url)
    with unit_of_work(engine) as s:
        import_version(session=s, document=document or Simulator(seed=42, gpus=32).policy(), actor="bench",
                       effective_from=datetime(2026, 1, 1, tzinfo=UTC))
    engine.dispose()


def sqlite_path(url: str) -> str:
    return url.split("///", 1)[1]


def hour_totals(path: str) -> dict[str, str]:
    """Per ingested hour: status and a digest of its usage rollup rows (whole-hour evidence)."""
    with sqlite3.connect(path) as db:
        statuses = dict(db.execute("SELECT hour, status FROM ingest_hour"))
        out = {}
        for hour, status in statuses.items():
            rows = db.execute("SELECT * FROM usage_rollup WHERE hour = ? ORDER BY pool, tenant, klass, dark", (hour,)).fetchall()
            digest = hashlib.sha256(repr([r[1:] for r in rows]).encode()).hexdigest()[:12]
            out[hour] = f"{status}:{len(rows)}:{digest}"
    return out


def integrity(path: str) -> str:
    with sqlite3.connect(path) as db:
        return db.execute("PRAGMA integrity_check").fetchone()[0]


def partial_hours(path: str) -> int:
    """Hours holding rollup rows without an ok status (a torn write would leave these)."""
    with sqlite3.connect(path) as db:
        return db.execute(
            "SELECT count(DISTINCT u.hour) FROM usage_rollup u LEFT JOIN ingest_hour h ON h.hour = u.hour "
            "WHERE h.status IS NULL OR h.status != 'ok'"
        ).fetchone()[0]


def moment(duration: float, i: int, kills: int) -> float:
    """The i-th fault's moment: spread from 40% to 110% of an uninterrupted run (the first ~40% is
    interpreter start-up and imports; past 100% the process may have finished: both are worth trying)."""
    return duration * (0.4 + 0.7 * (i + 0.5) / kills)


def ingest_args(hours: int = INGEST_HOURS) -> tuple[str, ...]:
    end = START + timedelta(hours=hours)
    return ("ingest", "--start", START.isoformat(), "--end", end.isoformat(), "--hours-per-fetch", "1")


# ---- 1. kill -9 during ingest ------------------------------------------------------------------


def kill_during_ingest(work: Path, kills: int) -> dict:
    clean = f"sqlite:///{work / 'clean.db'}"
    seed_policy(clean)
    t0 = time.monotonic()
    assert run_cli(clean, *ingest_args()) == 0
    duration = time.monotonic() - t0
    truth = hour_totals(sqlite_path(clean))
    out = Counter(trials=0, killed_mid_run=0, partial_hours=0, integrity_failures=0, equal_after_rerun=0)
    for i in range(kills):
        url = f"sqlite:///{work / f'ingest-{i}.db'}"
        seed_policy(url)
        kill_after(cli(url, *ingest_args()), moment(duration, i, kills), out)
        path = sqlite_path(url)
        out["partial_hours"] += partial_hours(path)
        out["integrity_failures"] += integrity(path) != "ok"
        assert run_cli(url, *ingest_args()) == 0
        out["equal_after_rerun"] += hour_totals(path) == truth
    out["uninterrupted_run_s"] = round(duration, 1)
    return dict(out)


def kill_after(proc, delay_s: float, out: Counter) -> None:
    """SIGKILL `proc` after `delay_s`, counting the trial and whether it was still running then."""
    time.sleep(delay_s)
    out["trials"] += 1
    if proc.poll() is None:
        out["killed_mid_run"] += 1
    proc.send_signal(signal.SIGKILL)
    proc.wait()


# ---- 2. kill -9 during close -------------------------------------------------------------------


def _close_state(path: Path) -> tuple[str, str | None, int, int]:
    """(status, csv hash, issued documents, period.finalized events) of MONTH in the SQLite file."""
    with sqlite3.connect(path) as db:
        status, csv_hash = db.execute("SELECT status, csv_sha256 FROM billing_period WHERE month = ?",
                                      (MONTH,)).fetchone()
        documents = db.execute("SELECT count(*) FROM issued_document JOIN billing_period ON billing_period.id ="
                               " issued_document.period_id WHERE month = ?", (MONTH,)).fetchone()[0]
        events = db.execute("SELECT count(*) FROM event WHERE type = 'period.finalized'").fetchone()[0]
    return status, csv_hash, documents, events


def kill_during_close(work: Path, kills: int) -> dict:
    """`chargeback close` finalizes (one transaction), then issues the documents (a second one). Killed at any
    moment, the month is rated (nothing of the close), finalized with every document pending (no hash, no
    document, no event), or finalized and issued (hashes, every document, one event); never in between."""
    rated = work / "rated.db"
    shutil.copy(work / "clean.db", rated)
    assert run_cli(f"sqlite:///{rated}", "rate", "--period", MONTH) == 0
    probe = work / "probe.db"
    shutil.copy(rated, probe)
    t0 = time.monotonic()
    assert run_cli(f"sqlite:///{probe}", "close", "--period", MONTH, "--accept-gaps", "--reason", "bench") == 0
    duration = time.monotonic() - t0
    expected = _close_state(probe)[2]
    out = Counter(trials=0, killed_mid_run=0, left_rated=0, left_pending=0, left_issued=0, inconsistent=0,
                  hash_mismatch=0, finalized_by_rerun=0, issued_by_rerun=0, issued_twice=0)

    def issued_whole(path: Path) -> bool:
        status, csv_hash, documents, events = _close_state(path)
        return status == "finalized" and csv_hash is not None and documents == expected and events == 1

    for i in range(kills):
        path = work / f"close-{i}.db"
        shutil.copy(rated, path)
        url = f"sqlite:///{path}"
        kill_after(cli(url, "close", "--period", MONTH, "--accept-gaps", "--reason", "bench"),
                   moment(duration, i, kills), out)
        status, csv_hash, documents, events = _close_state(path)
        if status == "finalized" and csv_hash is None:
            out["left_pending"] += 1
            out["inconsistent"] += documents > 0 or events > 0  # half an issue, or an event before its documents
            out["issued_by_rerun"] += run_cli(url, "issue") == 0 and issued_whole(path)  # what the worker runs
        elif status == "finalized":
            out["left_issued"] += 1
            out["inconsistent"] += not issued_whole(path)
            exported = work / f"close-{i}.csv"
            assert run_cli(url, "export", "--period", MONTH, "--format", "csv", "--out", str(exported)) == 0
            out["hash_mismatch"] += hashlib.sha256(exported.read_bytes()).hexdigest() != csv_hash
        elif status == "rated":
            out["left_rated"] += 1
            out["inconsistent"] += csv_hash is not None or documents > 0 or events > 0  # half a close
            out["finalized_by_rerun"] += run_cli(url, "close", "--period", MONTH, "--accept-gaps",
                                                 "--reason", "bench") == 0 and issued_whole(path)
        else:
            out["inconsistent"] += 1
        assert run_cli(url, "issue") == 0  # a later worker round: nothing more to issue
        out["issued_twice"] += _close_state(path)[2:] != (expected, 1)
    out["documents_per_close"] = expected
    out["uninterrupted_close_s"] = round(duration, 1)
    return dict(out)


# ---- 3. Prometheus failing mid-ingest ------------------------------------------------------------


def prometheus_failures(work: Path) -> dict:
    from sqlmodel import Session, select

    from app.core.db import make_engine, unit_of_work
    from app.core.timeutil import from_epoch
    from app.metrics.ingest import ingest_hours
    from app.metrics.models import IngestHour, UsageRollup
    from app.metrics.prometheus_source import PrometheusSource
    from tests.metrics import scenario
    from tests.metrics.policies import mixed_policy
    from tests.support.prometheus import PrometheusServer

    hours = 3
    start, end = from_epoch(scenario.H), from_epoch(scenario.H) + timedelta(hours=hours)
    now = end + timedelta(hours=2)

    class Stopping(PrometheusSource):
        def __init__(self, server, stop_before):
            super().__init__(server.url, scrape_interval_s=30, timeout_s=5, retries=0)
            self.server, self.stop_before, self.issued = server, stop_before, 0

        def _get(self, query, q_start, q_end, step):
            self.issued += 1
            if self.issued == self.stop_before:
                self.server.stop()
            return super()._get(query, q_start, q_end, step)

    def snapshot(engine):
        with Session(engine) as s:
            status = {h.hour: h.status for h in s.exec(select(IngestHour))}
            rows = sorted((str(r.hour), r.pool, r.tenant, r.klass, r.dark, str(r.gpu_seconds))
                          for r in s.exec(select(UsageRollup)))
        return status, rows

    def fresh(name):
        url = f"sqlite:///{work / name}"
        seed_policy(url, mixed_policy())
        return make_engine(url)

    out = Counter()
    with PrometheusServer.backfilled(work / "prom", scenario.text(hours)) as server:
        baseline = fresh("prom-clean.db")
        with unit_of_work(baseline) as s:
            ingest_hours(session=s, source=PrometheusSource(server.url, scrape_interval_s=30), start=start, end=end,
                         scrape_interval_s=30, hours_per_fetch=1, now=now)
        truth = snapshot(baseline)
        probe = Stopping(server, stop_before=10 ** 9)
        with unit_of_work(fresh("prom-count.db")) as s:
            ingest_hours(session=s, source=probe, start=start, end=end, scrape_interval_s=30, hours_per_fetch=1,
                         now=now)
        proxy = FaultyProxy(server.url)
        try:
            for mode in ("stopped", *FaultyProxy.MODES):
                for n in range(1, probe.issued + 1):
                    engine = fresh(f"prom-{mode}-{n}.db")
                    if mode == "stopped":
                        source = Stopping(server, n)
                    else:
                        proxy.arm(mode, n)
                        source = PrometheusSource(proxy.url, scrape_interval_s=30, timeout_s=5, retries=0)
                    with unit_of_work(engine) as s:
                        report = ingest_hours(session=s, source=source, start=start, end=end, scrape_interval_s=30,
                                              hours_per_fetch=1, now=now)
                    out[f"{mode}: fault points"] += 1
                    out[f"{mode}: hours stored whole"] += len(report.ok)
                    out[f"{mode}: hours recorded as gaps"] += len(report.gaps)
                    out[f"{mode}: partial hours"] += partial_hours(sqlite_path(str(engine.url)))
                    if mode == "stopped":
                        server.start()
                    with unit_of_work(engine) as s:
                        ingest_hours(session=s, source=PrometheusSource(server.url, scrape_interval_s=30),
                                     start=start, end=end, scrape_interval_s=30, hours_per_fetch=1,
                                     now=now + timedelta(hours=1))
                    out[f"{mode}: equal to uninterrupted after the retry"] += snapshot(engine) == truth
                    engine.dispose()
        finally:
            proxy.close()
    out["queries per ingest"] = probe.issued
    return dict(out)


class FaultyProxy:
    """A pass-through HTTP proxy in front of Prometheus that spoils exactly the n-th query once armed."""

    MODES = ("HTTP 503", "HTML error page", "connection cut mid-body")

    def __init__(self, upstream: str):
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        proxy = self
        self.upstream, self.mode, self.fail_at, self.seen = upstream, None, 0, 0
        self.lock = threading.Lock()

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def do_GET(self):
                with proxy.lock:
                    proxy.seen += 1
                    spoil = proxy.mode if proxy.seen == proxy.fail_at else None
                if spoil == "HTTP 503":
                    self._send(503, b"upstream unavailable", "text/plain")
                    return
                if spoil == "HTML error page":
                    self._send(200, b"<html><body>502 Bad Gateway</body></html>", "text/html")
                    return
                answer = httpx.get(proxy.upstream + self.path, timeout=30)
                if spoil == "connection cut mid-body":
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(answer.content)))
                    self.end_headers()
                    self.wfile.write(answer.content[: len(answer.content) // 2])
                    self.wfile.flush()
                    self.connection.shutdown(2)
                    return
                self._send(answer.status_code, answer.content, answer.headers.get("content-type", ""))

            def _send(self, status, body, content_type):
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def arm(self, mode: str, n: int) -> None:
        with self.lock:
            self.mode, self.fail_at, self.seen = mode, n, 0

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


# ---- servers -------------------------------------------------------------------------------------


class Server:
    """uvicorn on a loopback port, with its pid (for peak RSS)."""

    def __init__(self, url: str, work: Path):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, "CHARGEBACK_DATABASE_URL": url, "PYTHONPATH": str(ROOT)}
        self.log = open(work / f"uvicorn-{self.port}.log", "w")
        self.proc = subprocess.Popen([sys.executable, "-m", "uvicorn", "app.main:app", "--port", str(self.port)],
                                     cwd=ROOT, env=env, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.base}/healthz", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
        raise RuntimeError("uvicorn did not come up")

    def rss_mib(self, field: str = "VmRSS") -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
        return 0.0

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=20)
        self.log.close()


def seed_users(url: str, names: list[tuple[str, str]]) -> dict[str, str]:
    from app.auth import service
    from app.core.db import make_engine, unit_of_work

    engine = make_engine(url)
    tokens = {}
    with unit_of_work(engine) as s:
        for name, role in names:
            user = service.create_user(session=s, name=name, role=role, password=PASSWORD, actor="bench")
            _, tokens[name] = service.create_token(session=s, user=user, scopes="write", lifetime=timedelta(days=1),
                                                   actor="bench")
    engine.dispose()
    return tokens


def csrf_of(html: str) -> str:
    import re

    return re.search(r'name="csrf_token" value="([0-9a-f]+)"', html).group(1)


def sign_in(base: str, name: str, password: str = PASSWORD) -> tuple[httpx.Client, int]:
    client = httpx.Client(base_url=base, timeout=300)
    csrf = csrf_of(client.get("/login").text)
    return client, client.post("/login", data={"username": name, "password": password, "csrf_token": csrf}).status_code


# ---- 4. refused commits (PostgreSQL) -----------------------------------------------------------


def refused_commits(work: Path, n: int = 20) -> dict:
    from sqlalchemy import text

    from app.core.db import make_engine
    from tests.support.databases import drop_postgres_database, migrated, new_postgres_database

    url = migrated(new_postgres_database("cbrel"))
    engine = make_engine(url)
    tokens = seed_users(url, [("fred", "viewer")])
    server = Server(url, work)
    out = Counter()
    try:
        with engine.begin() as conn:
            conn.execute(text("CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS "
                              "$$ BEGIN RAISE EXCEPTION 'refused'; END $$"))
            conn.execute(text("CREATE CONSTRAINT TRIGGER refuse AFTER INSERT ON api_token DEFERRABLE INITIALLY "
                              "DEFERRED FOR EACH ROW EXECUTE FUNCTION refuse()"))

        def count() -> int:
            with engine.connect() as conn:
                return conn.execute(text("SELECT count(*) FROM api_token")).scalar_one()

        before = count()

        def post(i: int) -> str:
            answer = httpx.post(f"{server.base}/api/v1/tokens", json={"label": f"t{i}"}, timeout=60,
                                headers={"Authorization": f"Bearer {tokens['fred']}", "Idempotency-Key": f"k{i}"})
            return f"{answer.status_code}{' replayed' if answer.headers.get('idempotent-replayed') else ''}"

        out.update(f"refused_commit_answer_{s}" for s in map(post, range(n)))
        out["tokens_kept_after_refusal"] = count() - before
        with engine.begin() as conn:
            conn.execute(text("DROP TRIGGER refuse ON api_token"))
        out.update(f"retry_answer_{s}" for s in map(post, range(n)))
        out.update(f"second_retry_answer_{s}" for s in map(post, range(n)))
        out["tokens_created_by_retries"] = count() - before
    finally:
        server.stop()
        engine.dispose()
        drop_postgres_database(url)
    return dict(out)


# ---- 5. floods -----------------------------------------------------------------------------------


def floods(work: Path, requests: int) -> dict:
    url = f"sqlite:///{work / 'flood.db'}"
    seed_policy(url)
    people = [("victim", "viewer"), ("olga", "operator")] + [(f"user{i}", "viewer") for i in range(8)]
    tokens = seed_users(url, people)
    server = Server(url, work)
    out: dict = {}
    try:
        out["rss_idle_mib"] = round(server.rss_mib(), 1)
        forms = []
        for _ in range(200):
            client = httpx.Client(base_url=server.base, timeout=300)
            forms.append((client, csrf_of(client.get("/login").text)))

        def guess(form) -> int:
            client, csrf = form
            return client.post("/login", data={"username": "victim", "password": "wrong guess 1234",
                                               "csrf_token": csrf}).status_code

        with ThreadPoolExecutor(200) as pool:
            statuses = Counter(pool.map(guess, forms))
        for client, _ in forms:
            client.close()
        with sqlite3.connect(sqlite_path(url)) as db:
            checked = db.execute("SELECT count(*) FROM login_attempt WHERE username = 'victim'").fetchone()[0]
        out["guesses_200_parallel"] = dict(statuses)
        out["guesses_passwords_checked"] = checked

        def good(i: int) -> int:
            client, status = sign_in(server.base, f"user{i % 8}")
            client.close()
            return status

        t0 = time.monotonic()
        with ThreadPoolExecutor(64) as pool:
            out["signins_64_parallel"] = dict(Counter(pool.map(good, range(64))))
        out["signins_64_parallel_s"] = round(time.monotonic() - t0, 1)
        out["rss_peak_after_logins_mib"] = round(server.rss_mib("VmHWM"), 1)

        browser, _ = sign_in(server.base, "olga")
        change = httpx.post(f"{server.base}/api/v1/policy/changes", timeout=60,
                            headers={"Authorization": f"Bearer {tokens['olga']}"},
                            json={"title": "flood", "justification": "flood"}).json()["id"]

        def one(i: int) -> int:
            kind = i % 4
            if kind == 0:
                return httpx.get(f"{server.base}/api/v1/me", timeout=300,
                                 headers={"Authorization": f"Bearer {tokens[f'user{i % 8}']}"}).status_code
            if kind == 1:
                client, status = sign_in(server.base, "olga")
                client.close()
                return status
            if kind == 2:
                return httpx.get(f"{server.base}/policy", cookies=browser.cookies, timeout=300).status_code
            return httpx.post(f"{server.base}/api/v1/policy/changes/{change}/comments", timeout=300,
                              headers={"Authorization": f"Bearer {tokens['olga']}"},
                              json={"body": f"c{i}"}).status_code

        t0 = time.monotonic()
        with ThreadPoolExecutor(32) as pool:
            out[f"mixed_{requests}_at_32"] = dict(Counter(pool.map(one, range(requests))))
        out[f"mixed_{requests}_at_32_s"] = round(time.monotonic() - t0, 1)
        browser.close()
        out["rss_peak_mib"] = round(server.rss_mib("VmHWM"), 1)
    finally:
        server.stop()
    return out


# ---- t. hostile text and tenant scoping (issue 25) ---------------------------------------------

HOSTILE = ["late fix\r=SUM(1+2)", "x\n@cmd", "=HYPERLINK(\"http://evil.example\")", "\uff1dcmd", "a\u2028+1",
           "b\x85-2+3", "c\u2029=1", "\tcmd", "\r=1", "d\x0b=2"]
HOSTILE_INPUT = ["late fix\r=SUM(1+2)", "two\nlines", "ne\x85xt", "line\u2028sep", "para\u2029sep", "esc\x1b[31m",
                 "del\x7f", "nul\x00", "tab\there", "c1\x9b"]
SCOPED_TENANTS = ("search", "vision", "etl")
SCOPED_DEPARTMENT = {"search": "consumer", "vision": "research", "etl": "research"}


def _live_cells(data: bytes, columns: int) -> tuple[int, int, int]:
    """(cells, cells or lines inside a cell a spreadsheet would run, rows not `columns` wide) of a CSV."""
    import csv
    import io
    import re

    from app.core.safe_text import FORMULA_START, LINE_BREAKS

    number = re.compile(r"-?[0-9]+(\.[0-9]+)?")
    rows = list(csv.reader(io.StringIO(data.decode("utf-8"), newline="")))
    cells = live = 0
    for row in rows:
        for cell in row:
            cells += 1
            lines = re.split("[" + re.escape(LINE_BREAKS) + "]", cell)
            if not number.fullmatch(cell) and (cell[:1] in FORMULA_START or any(l[:1] in FORMULA_START for l in lines[1:])):
                live += 1
    return cells, live, sum(1 for row in rows if len(row) != columns)


def hostile_text_and_scoping(work: Path) -> dict:
    from sqlalchemy import text

    from app.core.db import make_engine, unit_of_work
    from app.core.migrate import upgrade
    from tests.support.billing import add_namespaces, month_hours, policy_doc
    from tests.support.budgets import seed_to_now
    from tests.support.policies import SPEC_TENANTS

    url = f"sqlite:///{work / 'hostile.db'}"
    upgrade(url)
    engine = make_engine(url)
    doc = policy_doc(tenants=[{**t, "namespaces": list(t["namespaces"]), "department": SCOPED_DEPARTMENT[t["name"]]}
                              for t in SPEC_TENANTS])
    with unit_of_work(engine) as s:
        this, known, _ = seed_to_now(s, doc)
        # Label values are the cluster's: unallocated use in namespaces named as an attacker would.
        hour = month_hours(this)[0]
        add_namespaces(s, hour=hour, parts=[("unallocated", "unallocated", False, name, 60) for name in HOSTILE])
    last = (datetime.strptime(this + "-01", "%Y-%m-%d") - timedelta(days=1)).strftime("%Y-%m")
    members = [(f"m{mask}", [t for i, t in enumerate(SCOPED_TENANTS) if mask >> i & 1]) for mask in range(1, 8)]
    tokens = seed_users(url, [("fin", "finance"), ("olga", "operator"), ("root", "admin")])
    from app.auth import service

    with unit_of_work(engine) as s:
        for name, tenants in members:
            user = service.create_user(session=s, name=name, role="tenant", password=PASSWORD, tenants=tenants,
                                       actor="bench")
            _, tokens[name] = service.create_token(session=s, user=user, scopes="read", lifetime=timedelta(days=1),
                                                   actor="bench")
    server = Server(url, work)
    out: Counter = Counter()
    statuses: Counter = Counter()
    browsers: dict[str, httpx.Client] = {}
    accepted: list[str] = []

    def call(method: str, path: str, who: str, **kw) -> httpx.Response:
        if path.startswith("/api/"):
            response = httpx.request(method, f"{server.base}{path}", timeout=300,
                                     headers={"Authorization": f"Bearer {tokens[who]}"}, **kw)
        else:  # pages and their CSV: a signed-in browser session
            if who not in browsers:
                browsers[who], status = sign_in(server.base, who)
                assert status == 303, status
            response = browsers[who].request(method, path, **kw)
            assert response.status_code == 200, (path, response.status_code)
        statuses[response.status_code // 100 * 100] += 1
        return response

    try:
        assert call("POST", f"/api/v1/periods/{last}/rate", "fin").status_code == 200
        with engine.begin() as db:  # reasons and services as stored before validation refused them
            ids = [r[0] for r in db.execute(text("SELECT id FROM charge_line ORDER BY id LIMIT :n"), {"n": len(HOSTILE)})]
            for line_id, value in zip(ids, HOSTILE, strict=False):
                db.execute(text("UPDATE charge_line SET reason = :v, service = :v, source = 'correction', "
                                "corrects = 'x' WHERE id = :id"), {"v": value, "id": line_id})
        # 1. exports
        for fmt, columns in (("csv", None), ("focus", None)):
            response = call("GET", f"/api/v1/periods/{last}/export", "fin", params={"format": fmt})
            width = len(response.content.split(b"\n", 1)[0].split(b","))
            cells, live, split = _live_cells(response.content, columns or width)
            out["export_requests"] += 1
            out["export_cells"] += cells
            out["export_live_formulas"] += live
            out["export_split_rows"] += split
        for who in ["fin", *[m for m, _ in members]]:
            for aggregate in ("tenant", "department", "pool", "class", "namespace"):
                response = call("GET", "/allocation.csv", who, params={"aggregate": aggregate})
                cells, live, split = _live_cells(response.content, 9)
                out["export_requests"] += 1
                out["export_cells"] += cells
                out["export_live_formulas"] += live
                out["export_split_rows"] += split
        # 2. human-text inputs
        change = call("POST", "/api/v1/policy/changes", "olga", json={"title": "t", "justification": "j"}).json()["id"]
        line = call("GET", f"/api/v1/periods/{last}/invoices/vision", "fin").json()["lines"][0]["line_id"]
        draft = call("GET", f"/api/v1/policy/changes/{change}", "olga").json()["document"]
        for value in HOSTILE_INPUT:
            tries = [
                ("POST", f"/api/v1/periods/{this}/corrections", "fin",
                 {"line_id": line, "amount": "1", "reason": value}),
                ("POST", f"/api/v1/periods/{last}/close", "fin", {"accept_gaps": True, "reason": value}),
                ("POST", "/api/v1/policy/changes", "olga", {"title": value, "justification": "j"}),
                ("PUT", "/api/v1/tenants/vision/contacts", "fin", {"emails": [f"ana{value}@vision.example"]}),
                ("POST", "/api/v1/webhooks", "root", {"url": "https://erp.example/hook", "event_types": ["period.rated"],
                                                      "description": value}),
                ("POST", "/api/v1/policy/changes", "olga",
                 {"title": "dept", "justification": "j", "document": draft.replace("department: research",
                                                                                 "department: " + json.dumps("re" + value))}),
            ]
            if value not in ("two\nlines", "tab\there"):  # prose keeps its line breaks and tabs
                tries.append(("POST", f"/api/v1/policy/changes/{change}/comments", "olga", {"body": value}))
            for method, path, who, body in tries:
                response = call(method, path, who, json=body)
                out["input_requests"] += 1
                kept = response.status_code < 400
                if kept and "document" in body:  # a draft is stored as typed: its validation must refuse it
                    kept = not any("U+" in str(e.get("message")) for e in response.json().get("validation", {}).get(
                        "errors", [])) and "U+" not in response.text
                out["input_accepted"] += int(kept)
                if kept:
                    accepted.append(f"{method} {path} {value!r} -> {response.status_code}")
        # 3. scoping: every member, every aggregate, API and CSV, against the staff's per-tenant figures
        staff = {r["name"]: r for r in call("GET", "/api/v1/allocation", "fin").json()["rows"] if r["kind"] == "allocated"}
        from decimal import Decimal as D

        for who, visible in members:
            for aggregate in ("tenant", "department", "pool", "class", "namespace"):
                body = call("GET", "/api/v1/allocation", who, params={"aggregate": aggregate}).json()
                out["scope_requests"] += 1
                rows = body["rows"]
                leaked = {r["kind"] for r in rows} - {"allocated"}
                if aggregate == "tenant":
                    leaked |= {r["name"] for r in rows} - set(visible)
                if aggregate == "namespace":
                    leaked |= {r["tenant"] for r in rows} - set(visible)
                if D(body["total"]["cost"]) != sum((D(staff[t]["cost"]) for t in visible), D(0)):
                    leaked.add("total")
                if aggregate == "department":
                    for r in rows:
                        mine = [t for t in visible if SCOPED_DEPARTMENT[t] == r["name"]]
                        want = sum((D(staff[t]["forecast_cost"]) for t in mine), D(0))
                        if abs(D(r["forecast_cost"]) - want) > D("0.01") * len(mine):  # each tenant's rounding
                            leaked.add(f"forecast {r['name']}")
                out["scope_leaks"] += len(leaked)
                shown = call("GET", "/allocation.csv", who, params={"aggregate": aggregate}).text
                out["scope_requests"] += 1
                others = set(SCOPED_TENANTS) - set(visible)
                if aggregate in ("tenant", "namespace"):
                    import csv as _csv
                    import io as _io

                    names = {row[1 if aggregate == "tenant" else 2] for row in _csv.reader(_io.StringIO(shown))}
                    out["scope_leaks"] += len(names & others)
        out["known_hours"] = known
    finally:
        for client in browsers.values():
            client.close()
        server.stop()
        engine.dispose()
    return {**dict(out), "status_classes": dict(sorted(statuses.items())), "accepted": accepted}
# ---- 6. SSRF and secrets (issue 25 items 1 and 6) ------------------------------------------------


def ssrf_and_secrets(work: Path) -> dict:
    """Receiver URLs an attacker would try (API and page, no allow-list), deliveries to a subscription whose
    permission was withdrawn, and a Prometheus that echoes the credentials it is sent, read by the doctor."""
    import json

    from app.core.db import make_engine, unit_of_work
    from app.core.migrate import upgrade
    from app.core.settings import Settings
    from app.notify.webhook_deliver import webhook_task
    from app.notify.webhook_models import WebhookAttempt
    from app.notify.webhook_subscriptions import create_subscription
    from tests.support.echoing import EchoingProxy
    from tests.support.webhooks import TEST_WEBHOOK_ALLOW, webhook_receiver

    url = f"sqlite:///{work / 'ssrf.db'}"
    upgrade(url)
    tokens = seed_users(url, [("root", "admin")])
    out: Counter = Counter()
    with webhook_receiver(work / "internal", plan={"*": ["say:200:INTERNAL-ONLY admin console, db=prod"]}) as rx:
        p = rx.port
        attempts = [f"http://127.0.0.1:{p}/internal", f"http://localhost:{p}/", f"http://[::1]:{p}/",
                    f"http://0x7f000001:{p}/", f"http://2130706433:{p}/", f"http://0177.0.0.1:{p}/",
                    f"http://127.1:{p}/", f"http://[::ffff:127.0.0.1]:{p}/", f"http://127.0.0.1.:{p}/",
                    f"http://0.0.0.0:{p}/", f"http://[::]:{p}/", "http://169.254.169.254/latest/meta-data/",
                    "http://[fd00:ec2::254]/", "http://[::ffff:169.254.169.254]/", "http://10.0.0.1/",
                    "http://172.16.0.1/", "http://192.168.1.1/", "http://100.64.0.1/", "http://[fc00::1]/",
                    "http://[fe80::1]/", "http://224.0.0.1/", "http://240.0.0.1/", "http://[64:ff9b::7f00:1]/",
                    "http://[2002:7f00:1::1]/", f"http://user:pw@127.0.0.1:{p}/", "http://nowhere.invalid/"]
        # A server with no allow-list: what production without CHARGEBACK_WEBHOOK_ALLOW does.
        env_allow = os.environ.pop("CHARGEBACK_WEBHOOK_ALLOW", None)
        try:
            server = Server(url, work)
            api = httpx.Client(base_url=server.base, timeout=60, headers={"Authorization": f"Bearer {tokens['root']}"})
            page, _ = sign_in(server.base, "root")
            csrf = csrf_of(page.get("/admin/webhooks").text)
            for target in attempts:
                a = api.post("/api/v1/webhooks", json={"url": target, "event_types": ["correction.created"]})
                b = page.post("/admin/webhooks", data={"url": target, "event_types": ["correction.created"],
                                                       "csrf_token": csrf})
                for answer in (a, b):
                    out["subscribe requests tried"] += 1
                    out[f"subscribe answered {answer.status_code}"] += 1
                    out["wrong grants (subscription saved)"] += answer.status_code in (200, 201)
                    out["5xx"] += answer.status_code >= 500
            out["subscriptions saved"] = len(api.get("/api/v1/webhooks").json()["items"])
            server.stop()
        finally:
            if env_allow is not None:
                os.environ["CHARGEBACK_WEBHOOK_ALLOW"] = env_allow
        # Deliveries: subscribed while the operator permitted loopback, then permission withdrawn.
        engine = make_engine(url)
        allowed = Settings(database_url=url, webhook_allow=TEST_WEBHOOK_ALLOW)
        with unit_of_work(engine) as s:
            create_subscription(session=s, actor="root", url=rx.url("/internal"), event_types=["correction.created"],
                                settings=allowed)
            from app.core.events import emit

            for i in range(20):
                emit(session=s, type="correction.created", tenant="t", payload={
                    "period": "2026-11", "line_id": f"2026-11/t/pool/correction/{i + 1}", "corrects": "x",
                    "corrected_period": "2026-10", "account": "t", "pool": "pool", "amount": "-1.00",
                    "currency": "USD", "reason": "bench", "created_by": "fin"})
        for _ in range(3):
            webhook_task(engine, settings=Settings(database_url=url, webhook_allow="", webhook_deadline_s=2))
        from sqlmodel import Session, select

        with Session(engine) as s:
            tried = list(s.exec(select(WebhookAttempt)))
        out["deliveries tried without permission"] = len(tried)
        out["requests reaching the internal service"] = len(rx.requests())
        out["answers of it kept (leaks)"] = sum(1 for t in tried if t.response)
        engine.dispose()
    # The doctor against a Prometheus that echoes the bearer token, each shape, as `chargeback doctor --json`.
    token = "bench-token-5b7f0c2a9e"
    with EchoingProxy() as proxy:
        for shape in ("500", "400", "status", "warning", "not-json"):
            proxy.shape = shape
            env = {k: v for k, v in os.environ.items() if k != "CHARGEBACK_PROMETHEUS_URL"}
            env |= {"CHARGEBACK_DATABASE_URL": url, "PYTHONPATH": str(ROOT), "CHARGEBACK_PROMETHEUS_TIMEOUT_S": "5",
                    "CHARGEBACK_CLUSTERS": json.dumps([{"name": "east", "url": proxy.url, "bearer_token": token}])}
            run = subprocess.run([sys.executable, "-c", "from app.cli import app; app()", "doctor", "--json"],
                                 cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
            out["doctor runs against an echoing Prometheus"] += 1
            out["token shown (leaks)"] += token in run.stdout + run.stderr
            out["doctor crashed (Traceback)"] += "Traceback" in run.stderr
            out["doctor reports with the echo shown masked (***)"] += "***" in run.stdout
        out["requests the echoing Prometheus answered"] = proxy.requests
        bad = subprocess.run([sys.executable, "-c", "from app.cli import app; app()", "doctor", "--url",
                              f"http://svc:{token}@127.0.0.1:1"], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT),
                             "CHARGEBACK_DATABASE_URL": url}, capture_output=True, text=True, timeout=120)
        out["credentials in --url refused"] = int(bad.returncode == 2)
        out["token shown (leaks)"] += token in bad.stdout + bad.stderr
    return dict(sorted(out.items()))


# ---- 7. hostile input --------------------------------------------------------------------------


def raw_status(port: int, case) -> int | None:
    """Send `case` as bytes over a fresh connection; the status uvicorn answers, None when it closed without one."""
    import socket

    target = case.raw_path + (b"?" + case.query if case.query else b"")
    head = [case.method.encode() + b" " + target + b" HTTP/1.1"]
    head += [k + b": " + v for k, v in case.headers]
    head.append(b"connection: close")
    data = b"\r\n".join(head) + b"\r\n\r\n" + case.body
    with socket.create_connection(("127.0.0.1", port), timeout=120) as conn:
        try:
            conn.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server answered (431, 413) and closed before the whole request was sent
        answer = b""
        try:
            while b"\r\n" not in answer:
                chunk = conn.recv(4096)
                if not chunk:
                    break
                answer += chunk
        except ConnectionResetError:
            pass
    line = answer.split(b"\r\n", 1)[0].split()
    return int(line[1]) if len(line) >= 2 and line[1].isdigit() else None


def hostile_input(work: Path, label: str, url: str) -> dict:
    from app.auth import sessions
    from app.main import create_app
    from tests.support.hostile import Browser, cases

    seed_policy(url)
    seed_users(url, [("ada", "admin")])
    server = Server(url, work)
    per_surface: dict[str, Counter] = {}
    try:
        client, status = sign_in(server.base, "ada")
        assert status == 303, status
        token = csrf_of(client.get("/admin/users").text)
        browser = Browser(session_cookie=client.cookies[sessions.SESSION_COOKIE],
                          csrf_nonce=client.cookies[sessions.CSRF_COOKIE], csrf_token=token,
                          host=f"127.0.0.1:{server.port}")
        t0 = time.monotonic()
        for case in cases(create_app(), browser):
            if case.route == "/logout" and case.surface != "form":
                continue  # a valid logout would end the session the other cases ride on
            status = raw_status(server.port, case)
            counts = per_surface.setdefault(case.surface, Counter())
            counts["tried"] += 1
            if status is None:
                counts["closed without answer"] += 1
            elif status >= 500:
                counts["5xx"] += 1
                print(f"  {label}: {status} {case.describe()}", flush=True)
            else:
                counts[f"{status // 100}xx"] += 1
        elapsed = time.monotonic() - t0
        alive = client.get("/api/v1/me").status_code
        client.close()
    finally:
        server.stop()
    tracebacks = (work / f"uvicorn-{server.port}.log").read_text().count("Traceback")
    out: dict = {surface: dict(sorted(c.items())) for surface, c in sorted(per_surface.items())}
    out["total tried"] = sum(c["tried"] for c in per_surface.values())
    out["total 5xx"] = sum(c["5xx"] for c in per_surface.values())
    out["tracebacks in the server log"] = tracebacks
    out["session still valid after"] = alive
    out["seconds"] = round(elapsed, 1)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=8, help="kill -9 trials per scenario")
    parser.add_argument("--flood", type=int, default=640, help="mixed requests in the request flood")
    parser.add_argument("--skip-postgres", action="store_true")
    parser.add_argument("--only", default="1234567t", help="scenarios to run, e.g. 12 (2 needs 1's database)")
    parser.add_argument("--ingest-kills", type=int, default=None, help="kill -9 trials of scenario 1 (default --kills)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="chargeback-reliability-"))
    only = set(args.only) | ({"1"} if "2" in args.only else set())
    try:
        results = {}
        if "1" in only:
            results["1. kill -9 during ingest"] = kill_during_ingest(
                work, args.kills if args.ingest_kills is None else args.ingest_kills)
        if "2" in only:
            results["2. kill -9 during close"] = kill_during_close(work, args.kills)
        if "3" in only:
            results["3. Prometheus failing mid-ingest"] = prometheus_failures(work)
        if "4" in only and not args.skip_postgres:
            results["4. refused COMMIT (PostgreSQL), token creation"] = refused_commits(work)
        if "5" in only:
            results["5. floods (SQLite, one uvicorn)"] = floods(work, args.flood)
        if "t" in only:
            results["t. hostile text and tenant scoping (SQLite, one uvicorn)"] = hostile_text_and_scoping(work)
        if "6" in only:
            results["6. SSRF attempts and echoed secrets (SQLite, one uvicorn)"] = ssrf_and_secrets(work)
        if "7" in only:
            results["7. hostile input (SQLite, one uvicorn)"] = hostile_input(
                work, "sqlite", f"sqlite:///{work / 'hostile.db'}")
            if not args.skip_postgres:
                from tests.support.databases import drop_postgres_database, new_postgres_database

                pg = new_postgres_database("cbhostile")
                try:
                    results["7. hostile input (PostgreSQL, one uvicorn)"] = hostile_input(work, "postgres", pg)
                finally:
                    drop_postgres_database(pg)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for name, counts in results.items():
        print(f"\n{name}")
        for key, value in counts.items():
            print(f"  {key}: {value}")


if __name__ == "__main__":
    main()
