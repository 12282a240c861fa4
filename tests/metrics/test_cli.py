"""`chargeback ingest` and `chargeback worker --once` as a user runs them (a real process, a real Prometheus)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from sqlmodel import Session, select

from app.core.db import make_engine, unit_of_work
from app.core.timeutil import from_epoch
from app.metrics.models import IngestHour
from tests.support import scenario
from tests.support.ingest import add_policy
from tests.support.prometheus import free_port

CHARGEBACK = str(Path(sys.executable).parent / "chargeback")


def run(args, db_url, prometheus_url, **extra_env):
    env = os.environ | extra_env | {"CHARGEBACK_DATABASE_URL": db_url, "CHARGEBACK_PROMETHEUS_URL": prometheus_url,
                        "CHARGEBACK_SCRAPE_INTERVAL_S": "30", "CHARGEBACK_PROMETHEUS_TIMEOUT_S": "5"}
    return subprocess.run([CHARGEBACK, *args], env=env, capture_output=True, text=True, timeout=120)


def iso(epoch):
    return from_epoch(epoch).isoformat()


def test_ingest_command_reports_hours_and_exits_2_on_gaps(fresh_db_url, scenario_prometheus):
    engine = make_engine(fresh_db_url)
    with unit_of_work(engine) as session:
        add_policy(session)
    done = run(["ingest", "--start", iso(scenario.H), "--end", iso(scenario.H + 3 * 3600)], fresh_db_url, scenario_prometheus.url)
    assert done.returncode == 0, done.stderr
    assert "ok: 3" in done.stderr and "gaps: 0" in done.stderr and "3/3" in done.stderr

    dead = f"http://127.0.0.1:{free_port()}"
    done = run(["ingest", "--start", iso(scenario.H + 3 * 3600), "--end", iso(scenario.H + 5 * 3600)], fresh_db_url, dead)
    assert done.returncode == 2, done.stderr
    assert "ok: 0" in done.stderr and "gaps: 2" in done.stderr and "did not answer" in done.stderr
    with Session(engine) as session:
        statuses = [r.status for r in session.exec(select(IngestHour).order_by(IngestHour.hour))]
    assert statuses == ["ok"] * 3 + ["gap"] * 2
    engine.dispose()


def test_ingest_command_rejects_a_bad_time(fresh_db_url, scenario_prometheus):
    done = run(["ingest", "--start", "yesterday", "--end", iso(scenario.H)], fresh_db_url, scenario_prometheus.url)
    assert done.returncode == 2 and "--start" in done.stderr and "ISO 8601" in done.stderr


def test_worker_once_ingests_the_finished_hours(fresh_db_url, scenario_prometheus):
    engine = make_engine(fresh_db_url)
    with unit_of_work(engine) as session:
        add_policy(session)
    # A delay that makes H+2h the last finished hour (the scenario's history ends there).
    delay = int(time.time()) - (scenario.H + 3 * 3600) - 60
    done = run(["worker", "--once", "--backfill-start", iso(scenario.H)], fresh_db_url, scenario_prometheus.url,
               CHARGEBACK_INGEST_DELAY_S=str(delay))
    assert done.returncode == 0, done.stderr
    with Session(engine) as session:
        rows = session.exec(select(IngestHour).order_by(IngestHour.hour)).all()
    assert [(r.hour, r.status) for r in rows] == [(from_epoch(scenario.H + k * 3600), "ok") for k in range(3)]
    assert "ingested 3 hours, 0 gaps" in done.stdout
    engine.dispose()
