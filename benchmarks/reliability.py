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
  6. Hostile input against uvicorn (SQLite, and PostgreSQL unless skipped), over raw sockets: every
     form field, query and path parameter and JSON field of every route, and the headers and cookies
     the portal reads, each with non-ASCII, a latin-1 byte, "²", NUL, CRLF, U+2028/U+0085 and 1 MB
     (tests/support/hostile.py), signed in as an admin with a valid CSRF token: requests per surface, 5xx.
"""

from __future__ import annotations

import argparse
import hashlib
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


# ---- 6. hostile input --------------------------------------------------------------------------


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
    parser.add_argument("--only", default="123456", help="scenarios to run, e.g. 12 (2 needs 1's database)")
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
        if "6" in only:
            results["6. hostile input (SQLite, one uvicorn)"] = hostile_input(
                work, "sqlite", f"sqlite:///{work / 'hostile.db'}")
            if not args.skip_postgres:
                from tests.support.databases import drop_postgres_database, new_postgres_database

                pg = new_postgres_database("cbhostile")
                try:
                    results["6. hostile input (PostgreSQL, one uvicorn)"] = hostile_input(work, "postgres", pg)
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
