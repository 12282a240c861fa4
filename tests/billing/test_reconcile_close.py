"""A month that does not reconcile with its source is not finalized without a reason (issue 24): the checklist's
"Source reconciled" item, `periods.close`, the `chargeback reconcile` and `chargeback close` commands; a real
Prometheus holding the field history (tests/support/reconcile.py), both databases."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from sqlmodel import select

from app.billing import periods
from app.billing.checklist import ItemStatus, period_checklist
from app.billing.period import parse_period
from app.core import settings as settings_module
from app.core.audit import AuditEntry
from app.core.db import make_engine, unit_of_work
from app.core.errors import Conflict, Invalid
from app.core.timeutil import utcnow
from app.metrics.ingest import ingest_hours
from app.metrics.prometheus_source import PrometheusSource
from app.metrics.reconcile.service import reconcile_hours
from app.metrics.reconcile.source import ReconcileSource
from tests.support import reconcile as field
from tests.support.billing import record_gaps
from tests.support.ingest import add_policy
from tests.support.prometheus import PrometheusServer

pytestmark = pytest.mark.prometheus
MONTH = "2026-11"
CHARGEBACK = str(Path(sys.executable).parent / "chargeback")


@pytest.fixture(scope="module")
def prom(tmp_path_factory):
    with PrometheusServer.backfilled(tmp_path_factory.mktemp("reconcile-close"), field.text()) as server:
        yield server


@pytest.fixture
def configured(prom, monkeypatch):
    """The default cluster read from the field Prometheus (so there is a source to reconcile against)."""
    monkeypatch.setenv("CHARGEBACK_PROMETHEUS_URL", prom.url)
    settings_module.get_settings.cache_clear()
    yield settings_module.get_settings()
    settings_module.get_settings.cache_clear()


def ingested(session, prom) -> None:
    """Every hour the source has data for (its first and last minutes included) ingested."""
    add_policy(session, field.policy(), effective_epoch=field.F - 86400)
    ingest_hours(session=session, source=PrometheusSource(prom.url, timeout_s=30), start=field.at(-1),
                 end=field.at(field.HOURS + 1))
    field.as_spec_says(session)
    record_gaps(session, MONTH)  # the rest of the month asked too: the source holds nothing for it (acceptable gaps)


def reconcile_month(session, prom, start=None, end=None):
    p = parse_period(MONTH)
    return reconcile_hours(session=session, source=ReconcileSource(prom.url), cluster="default", start=start or p.start,
                           end=end or p.end, until=p.end)


def item(session):
    result = period_checklist(session=session, period=parse_period(MONTH), now=utcnow())
    return next(i for i in result.items if i.key == "reconcile"), result


def test_a_month_never_checked_blocks_the_close_until_reconciled(session, prom, configured):
    ingested(session, prom)
    got, result = item(session)
    assert got.status == ItemStatus.BLOCKS and got.accept == "accept_unreconciled"
    assert "720 not checked yet" in got.detail and "--" not in got.action
    assert result.needs == ["accept_gaps", "accept_unreconciled"]
    with pytest.raises(Conflict, match="does not reconcile with the source: of 720 cluster-hours, 720 not checked yet"):
        periods.close(session=session, period=MONTH, actor="fin", accept_gaps=True, reason="outage")

    report = reconcile_month(session, prom)
    assert len(report.checks) == 720 and report.problems == []
    got, _ = item(session)
    assert got.status == ItemStatus.OK and "All 720 hours" in got.detail
    row = periods.close(session=session, period=MONTH, actor="fin", accept_gaps=True, reason="outage")
    assert row.status == "finalized" and row.accept_unreconciled_reason is None


def test_a_month_with_a_defect_put_back_closes_only_with_the_reason_recorded(session, prom, configured):
    ingested(session, prom)
    reconcile_month(session, prom)
    field.max_of_means(session)  # re-stored without a new ingest row: the old verdict would still be current
    reconcile_month(session, prom, start=field.at(1), end=field.at(2))
    got, _ = item(session)
    assert got.status == ItemStatus.BLOCKS
    assert "1 with figures that differ from the source's" in got.detail
    assert "kWh stored 0.600000000, source 0.400000000" in got.detail
    with pytest.raises(Conflict, match="kWh stored 0.600000000, source 0.400000000"):
        periods.close(session=session, period=MONTH, actor="fin", accept_gaps=True, reason="outage")
    with pytest.raises(Invalid):
        periods.close(session=session, period=MONTH, actor="fin", accept_gaps=True, accept_unreconciled=True)
    row = periods.close(session=session, period=MONTH, actor="fin", accept_gaps=True, accept_unreconciled=True,
                        reason="power meter replaced")
    assert row.accept_unreconciled_reason == "power meter replaced"
    audit = session.exec(select(AuditEntry).where(AuditEntry.action == "billing.close")).one()
    after = json.loads(audit.after)
    assert (after["accept_unreconciled_reason"], after["unreconciled_hours"]) == ("power meter replaced", 1)
    got, _ = item(session)
    assert got.status == ItemStatus.OK and "power meter replaced" in got.action


def test_clusters_read_from_the_simulator_have_nothing_to_reconcile(session):
    got, _ = item(session)
    assert got.status == ItemStatus.OK and "built-in simulator" in got.detail


def run(args, db_url, prometheus_url):
    env = os.environ | {"CHARGEBACK_DATABASE_URL": db_url, "CHARGEBACK_PROMETHEUS_URL": prometheus_url,
                        "CHARGEBACK_PROMETHEUS_TIMEOUT_S": "5"}
    return subprocess.run([CHARGEBACK, *args], env=env, capture_output=True, text=True, timeout=300)


def test_the_commands_exit_3_on_differences_and_0_once_reconciled(fresh_db_url, prom):
    engine = make_engine(fresh_db_url)
    with unit_of_work(engine) as session:
        ingested(session, prom)
        field.off_by_a_sample(session, hour=3)
    window = ["--start", field.at(-1).isoformat(), "--end", field.at(field.HOURS + 1).isoformat()]
    done = run(["reconcile", *window], fresh_db_url, prom.url)
    assert done.returncode == 3, done.stderr
    assert "8 hours checked" in done.stdout and "agree 5" in done.stdout and "differ 1" in done.stdout
    assert "GPU-seconds stored 7230.000000, source 7200.000000" in done.stdout and "8/8" in done.stderr
    refused = run(["close", "--period", MONTH, "--accept-gaps", "--reason", "x"], fresh_db_url, prom.url)
    assert refused.returncode == 3 and "does not reconcile" in refused.stderr

    with unit_of_work(engine) as session:
        ingest_hours(session=session, source=PrometheusSource(prom.url), start=field.at(3), end=field.at(4))
    done = run(["reconcile", "--period", MONTH], fresh_db_url, prom.url)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "720 hours checked" in done.stdout and "reconciled" in done.stdout
    closed = run(["close", "--period", MONTH, "--accept-gaps", "--reason", "outage", "--no-issue"], fresh_db_url, prom.url)
    assert closed.returncode == 0, closed.stderr

    bad = run(["reconcile", "--period", "2026-13"], fresh_db_url, prom.url)
    assert bad.returncode == 2 and "--period" in bad.stderr
    engine.dispose()
