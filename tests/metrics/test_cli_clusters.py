"""`chargeback ingest` and `chargeback doctor` with several clusters, as a user runs them (real processes, a real
Prometheus for one cluster, nothing listening for the other)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from sqlmodel import Session, select

from app.core.db import make_engine, unit_of_work
from app.core.timeutil import from_epoch
from app.metrics.models import IngestHour
from tests.support import scenario
from tests.support.ingest import add_policy
from tests.support.prometheus import free_port

CHARGEBACK = str(Path(sys.executable).parent / "chargeback")
SECRET = "sekrit-bearer-7f3a"


def run(args, db_url, clusters, **extra_env):
    env = {k: v for k, v in os.environ.items() if k != "CHARGEBACK_PROMETHEUS_URL"}
    env |= extra_env | {"CHARGEBACK_DATABASE_URL": db_url, "CHARGEBACK_CLUSTERS": json.dumps(clusters),
                        "CHARGEBACK_SCRAPE_INTERVAL_S": "30", "CHARGEBACK_PROMETHEUS_TIMEOUT_S": "5", "COLUMNS": "200"}
    return subprocess.run([CHARGEBACK, *args], env=env, capture_output=True, text=True, timeout=180)


def iso(epoch):
    return from_epoch(epoch).isoformat()


def test_ingest_and_doctor_per_cluster(fresh_db_url, scenario_prometheus):
    engine = make_engine(fresh_db_url)
    with unit_of_work(engine) as session:
        add_policy(session)  # its pools are the default cluster's
    clusters = [{"name": "default", "url": scenario_prometheus.url},
                {"name": "down", "url": f"http://127.0.0.1:{free_port()}", "bearer_token": SECRET}]
    window = ["--start", iso(scenario.H), "--end", iso(scenario.H + 3 * 3600)]

    done = run(["ingest", *window], fresh_db_url, clusters)
    assert done.returncode == 2, done.stderr  # gaps remain: in the cluster that is down
    assert "default: hours: 3  ok: 3  gaps: 0" in done.stderr and "down: hours: 3  ok: 0  gaps: 3" in done.stderr
    assert "did not answer" in done.stderr and SECRET not in done.stderr + done.stdout
    with Session(engine) as session:
        rows = session.exec(select(IngestHour).order_by(IngestHour.cluster, IngestHour.hour)).all()
    assert [(r.cluster, r.status) for r in rows] == [("default", "ok")] * 3 + [("down", "gap")] * 3

    only = run(["ingest", "--cluster", "default", *window], fresh_db_url, clusters)
    assert only.returncode == 0, only.stderr
    assert "ok: 3" in only.stderr and "down" not in only.stderr
    unknown = run(["ingest", "--cluster", "north", *window], fresh_db_url, clusters)
    assert unknown.returncode == 2 and "unknown cluster 'north' (configured: default, down)" in unknown.stderr

    at = ["--at", iso(scenario.H + 3 * 3600), "--lookback", "3600", "--json"]
    one = run(["doctor", "--cluster", "default", *at], fresh_db_url, clusters)
    report = json.loads(one.stdout)
    assert report["cluster"] == "default" and report["url"] == scenario_prometheus.url
    both = run(["doctor", *at], fresh_db_url, clusters)
    assert both.returncode == 1  # the cluster that is down would mis-bill: its hours cannot be read
    reports = json.loads(both.stdout)["clusters"]
    assert set(reports) == {"default", "down"}
    assert [f["code"] for f in reports["down"]["findings"]] == ["could-not-read"] and reports["down"]["failing"]
    assert SECRET not in both.stdout + both.stderr
    engine.dispose()


def test_a_bad_cluster_list_stops_the_command_without_echoing_secrets(fresh_db_url):
    done = run(["ingest", "--start", iso(scenario.H), "--end", iso(scenario.H + 3600)], fresh_db_url,
               [{"name": "east", "url": "ftp://east", "bearer_token": SECRET}])
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip() == "configuration error: CHARGEBACK_CLUSTERS[east]: url must be an http:// or https:// URL"
    assert SECRET not in done.stderr + done.stdout
