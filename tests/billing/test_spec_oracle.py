"""Issue 24's month, priced to the cent against an oracle written from SPEC alone (tests/support/spec_oracle.py).

Pod churn on GPUs without an energy counter, an exporter outage in one of two clusters, an hour answered
with no series, and a line worth exactly half a cent: each cluster is its own real Prometheus (backfilled
by promtool) or its own real VictoriaMetrics (the same samples, imported sample-exact), and the portal
runs as a user runs it: `chargeback ingest` over the whole range, then `chargeback rate`, both real
processes, on SQLite and on PostgreSQL. The rated lines must equal the oracle's, cent for cent.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy.engine import Engine
from sqlmodel import Session, select

from app.billing.models import BillingPeriod, ChargeLineRecord
from app.core import settings as settings_module
from app.core.db import unit_of_work
from app.core.timeutil import from_epoch
from app.metrics.models import IngestHour
from app.policy.document import PolicyDocument
from tests.support import spec_oracle as oracle
from tests.support.billing import CLI
from tests.support.ingest import add_policy
from tests.support.prometheus import PrometheusServer
from tests.support.victoria import VictoriaMetricsServer

CLUSTERS = ("east", "west")


@pytest.fixture(scope="module")
def sources(tmp_path_factory) -> Iterator[dict[str, dict[str, str]]]:
    """{engine: {cluster: url}}: each cluster's history in a Prometheus and in a VictoriaMetrics of its own."""
    servers: list = []
    urls: dict[str, dict[str, str]] = {"prometheus": {}, "victoriametrics": {}}
    try:
        for cluster in CLUSTERS:
            prom = PrometheusServer.backfilled(tmp_path_factory.mktemp(f"prom-{cluster}"),
                                               oracle.openmetrics_text(cluster))
            vm = VictoriaMetricsServer(tmp_path_factory.mktemp(f"vm-{cluster}")).start()
            servers.append(vm)
            vm.load_prometheus_blocks(prom.data)  # before Prometheus opens (and compacts) its blocks
            servers.append(prom.start())
            urls["prometheus"][cluster], urls["victoriametrics"][cluster] = prom.url, vm.url
        yield urls
    finally:
        for server in servers:
            server.stop()


def _run(url: str, clusters: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "CHARGEBACK_PROMETHEUS_URL"}
    env |= {"CHARGEBACK_DATABASE_URL": url, "COLUMNS": "200", "CHARGEBACK_SCRAPE_INTERVAL_S": "30",
            "CHARGEBACK_CLUSTERS": json.dumps([{"name": c, "url": u} for c, u in clusters.items()])}
    return subprocess.run([str(CLI), *args], env=env, capture_output=True, text=True, timeout=600)


def _iso(epoch: int) -> str:
    return from_epoch(epoch).isoformat()


@pytest.mark.parametrize("engine_name", ["prometheus", "victoriametrics"])
def test_the_month_is_priced_to_the_cent_as_spec_says(sources, fresh_engine: Engine, engine_name, monkeypatch,
                                                   request):
    # The oracle's own premises: a line worth exactly half a cent, and lines of every family.
    expected, _ = oracle.expected_lines()
    assert oracle.half_cent_lines() == [("vision", oracle.WEST_POOL, "usage_dark")]
    assert expected[("vision", oracle.WEST_POOL, "usage_dark")] == oracle.Decimal("0.74")
    url = fresh_engine.url.render_as_string(hide_password=False)
    monkeypatch.setenv("CHARGEBACK_CLUSTERS", json.dumps([{"name": c, "url": sources[engine_name][c]} for c in CLUSTERS]))
    settings_module.get_settings.cache_clear()  # the policy names these clusters; import checks them
    request.addfinalizer(settings_module.get_settings.cache_clear)
    with unit_of_work(fresh_engine) as session:
        add_policy(session, PolicyDocument.model_validate(oracle.policy_data()), effective_epoch=oracle.H0 - 86400)

    done = _run(url, sources[engine_name], "ingest", "--start", _iso(oracle.H0),
                "--end", _iso(oracle.H0 + oracle.HOURS * 3600))
    # Gaps remain (exit 2), and ingestion carried on past them to the end of the range.
    assert done.returncode == 2, done.stdout + done.stderr
    with Session(fresh_engine) as session:
        rows = session.exec(select(IngestHour)).all()
    status = {(r.cluster, (int(r.hour.replace(tzinfo=UTC).timestamp()) - oracle.H0) // 3600): r.status for r in rows}
    assert status == {(c, h): ("gap" if (c, h) in oracle.GAPS else "ok")
                      for c in CLUSTERS for h in range(oracle.HOURS)}

    # The portal checks itself against the source by its second path: every ingested hour agrees.
    checked = _run(url, sources[engine_name], "reconcile", "--start", _iso(oracle.H0),
                   "--end", _iso(oracle.H0 + oracle.HOURS * 3600))
    assert checked.returncode == 0, checked.stdout + checked.stderr

    rated = _run(url, sources[engine_name], "rate", "--period", "2026-11")
    assert rated.returncode == 0, rated.stdout + rated.stderr
    with Session(fresh_engine) as session:
        period = session.exec(select(BillingPeriod).where(BillingPeriod.month == "2026-11")).one()
        lines = session.exec(select(ChargeLineRecord).where(ChargeLineRecord.period_id == period.id,
                                                            ChargeLineRecord.revision == period.revision)).all()
    kinds = {kind for _, _, kind in expected}
    got: dict[tuple[str, str, str], oracle.Decimal] = {}
    for line in lines:
        if line.kind in kinds:
            account = "platform" if line.kind == "unallocated_usage" else line.account
            key = (account, line.pool, line.kind)
            got[key] = got.get(key, oracle.Decimal(0)) + oracle.Decimal(line.amount)
    assert {k: v for k, v in got.items() if v} == {k: v for k, v in expected.items() if v}


def test_the_oracle_reads_the_hours_as_spec_does():
    """The oracle's arithmetic on its hardest hour, by hand: east's first hour, where a pod hands GPU-E0
    over at 00:50 (60 W for 50 minutes, 300 W for 10: a mean of 100 W, not the 300 W of the larger series)."""
    cost, gpus, use = oracle.hour_inputs(0)[oracle.EAST_POOL]
    capex = oracle.Fraction(9000, 3 * 8760)
    e0 = capex + oracle.Fraction("0.10") + oracle.Fraction(100, 1000) * oracle.PUE * oracle.ENERGY_PRICE
    e1 = capex + oracle.Fraction("0.10") + oracle.Fraction(150, 1000) * oracle.PUE * oracle.ENERGY_PRICE
    assert (cost, gpus) == (e0 + e1, 2)
    assert use == {("search", "inference"): 3000, ("vision", "training"): 600, ("etl", "preprocessing"): 3600}
    west = oracle.hour_inputs(0)[oracle.WEST_POOL]
    assert west[0] == oracle.Fraction(343, 60) and west[1] == 1
    assert west[2][("vision", "training")] == 15 * 30 * oracle.Fraction(3, 7)
    assert not {p for h in (2, 3) for p in oracle.hour_inputs(h)} & {oracle.WEST_POOL}
    assert oracle.EAST_POOL not in oracle.hour_inputs(5)
    assert Path(oracle.__file__).read_text().count("from app.") == 1  # the oracle uses the portal for nothing
    assert datetime.fromtimestamp(oracle.H0, UTC) == datetime(2026, 11, 2, tzinfo=UTC)
