"""The reconciliation against a real Prometheus and a real VictoriaMetrics holding the same field history
(tests/support/reconcile.py): the stored rollups as SPEC says reconcile; each of issue 24's source defects,
put back by writing the rollups the old code's way, is found, with both figures."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from sqlmodel import Session, select

from app.core.timeutil import from_epoch
from app.metrics.ingest import ingest_hours
from app.metrics.prometheus_source import PrometheusSource
from app.metrics.reconcile.models import ReconcileHour, ReconcilePoolHour
from app.metrics.reconcile.service import reconcile_hours
from app.metrics.reconcile.source import ReconcileSource
from app.metrics.reconcile.store import period_state
from tests.support import reconcile as field
from tests.support import scenario
from tests.support.ingest import SCENARIO_HOURS, add_policy
from tests.support.prometheus import PrometheusServer
from tests.support.victoria import VictoriaMetricsServer

pytestmark = pytest.mark.prometheus
START, END = field.at(0), field.at(field.HOURS)
UNTIL = END + timedelta(hours=2)


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    """{engine: URL}: a Prometheus backfilled with the field history, and a VictoriaMetrics holding its every sample."""
    root = tmp_path_factory.mktemp("reconcile-field")
    prom = PrometheusServer.backfilled(root / "prom", field.text())
    with VictoriaMetricsServer(root / "vm") as vm:
        vm.load_prometheus_blocks(prom.data)  # before Prometheus opens the blocks
        with prom:
            yield {"prometheus": prom.url, "victoria": vm.url}


@pytest.fixture(params=["prometheus", "victoria"])
def engine_url(request, servers) -> str:
    return servers[request.param]


@pytest.fixture
def stored(session: Session, servers) -> Session:
    """The field hours ingested from Prometheus, hour 1's energy as SPEC section 4 gives it."""
    add_policy(session, field.policy(), effective_epoch=field.F - 86400)
    report = ingest_hours(session=session, source=PrometheusSource(servers["prometheus"], timeout_s=30),
                          start=START, end=END)
    # The outage and the empty hour are gaps whichever ingestion wrote them (a silent node is one today).
    assert sorted(report.gaps) == [field.at(field.OUTAGE_HOUR), field.at(field.EMPTY_HOUR)]
    field.as_spec_says(session)
    return session


def reconcile(session: Session, url: str, start=START, end=END):
    return reconcile_hours(session=session, source=ReconcileSource(url, timeout_s=30), cluster="default", start=start,
                           end=end, until=UNTIL)


def test_the_rollups_as_spec_says_reconcile_hour_by_hour(stored, engine_url):
    report = reconcile(stored, engine_url)
    assert field.verdicts(report.checks) == {0: "agrees", 1: "agrees", 2: "gap", 3: "agrees", 4: "gap", 5: "agrees"}
    assert report.problems == [] and not report.error
    hour1 = next(c for c in report.checks if c.hour == field.F + field.HOUR)
    (pool,) = hour1.pools
    # GPU-a0 by its mean power over both pods' series (100 W), GPU-a1 and GPU-b0 by their counters: 0.4 kWh.
    assert (pool.source_gpus, pool.source_gpu_seconds, pool.source_kwh) == (3, Decimal("7200.000000"),
                                                                            Decimal("0.400000000"))
    assert pool.stored_kwh == Decimal("0.400000000") and pool.tenants == {} and pool.note == ""
    # hour 3: GPU-a1's counter restarted (raw samples), GPU-b0's came back after the outage (no value before)
    hour3 = next(c for c in report.checks if c.hour == field.F + 3 * field.HOUR)
    assert hour3.pools[0].source_kwh == Decimal("0.598333333") == hour3.pools[0].stored_kwh
    gaps = {c.hour: c.detail for c in report.checks if str(c.verdict) == "gap"}
    assert "node(s) node-b have no data in the source either" in gaps[field.F + 2 * field.HOUR]


def test_mean_power_as_the_max_of_the_series_means_is_found(stored, engine_url):
    field.max_of_means(stored)
    report = reconcile(stored, engine_url)
    assert {h: v for h, v in field.verdicts(report.checks).items() if v not in ("agrees", "gap")} == {1: "differs"}
    (check,) = report.problems
    assert check.detail == "pool l40s: kWh stored 0.600000000, source 0.400000000"


def test_an_ingestion_that_stopped_at_the_outage_is_found(stored, engine_url):
    field.stopped_at_the_outage(stored)
    report = reconcile(stored, engine_url)
    assert field.verdicts(report.checks) == {0: "agrees", 1: "agrees", 2: "gap", 3: "unstored", 4: "missing",
                                             5: "unstored"}
    details = {(c.hour - field.F) // field.HOUR: c.detail for c in report.checks}
    assert details[3].startswith("stored as a gap, but the source now holds data for every pooled node")
    assert details[5] == "never ingested, but the source holds data for 2 pooled node(s) in this hour: ingest it"
    hour5 = next(c for c in report.checks if c.hour == field.F + 5 * field.HOUR)
    assert [(p.pool, p.stored_gpus, p.source_gpus, p.source_gpu_seconds) for p in hour5.pools] == [
        ("l40s", None, 3, Decimal("7200.000000"))]


def test_an_empty_answer_stored_as_ok_is_found(stored, engine_url):
    field.empty_answer_as_ok(stored, field.EMPTY_HOUR)
    report = reconcile(stored, engine_url)
    assert field.verdicts(report.checks)[field.EMPTY_HOUR] == "source_empty"
    (check,) = report.problems
    assert check.detail == ("stored ok, but the source holds no occupancy series for any of the 2 pooled node(s) in "
                            "this hour though they report in the hours around it: an empty answer billed as zero use")


def test_hours_stored_ok_where_no_pooled_node_has_ever_reported_are_found(stored, servers):
    """A fresh install (or a wrong URL path): ok hours of zero use long before the source has any series."""
    for hour in (-5, -4, -3):
        field.empty_answer_as_ok(stored, hour)
    report = reconcile(stored, servers["prometheus"], start=field.at(-5), end=field.at(-2))
    assert [str(c.verdict) for c in report.checks] == ["source_empty"] * 3
    assert "any of the 2 pooled node(s) in this hour: an empty answer" in report.checks[0].detail


def test_a_rollup_one_sample_off_is_found_with_both_figures(stored, engine_url):
    field.off_by_a_sample(stored, hour=3, tenant="vision")
    report = reconcile(stored, engine_url)
    (check,) = report.problems
    assert (check.hour, str(check.verdict)) == (field.F + 3 * field.HOUR, "differs")
    assert check.detail == ("pool l40s: GPU-seconds stored 7230.000000, source 7200.000000; "
                            "tenant vision GPU-seconds stored 3630.000000, source 3600.000000")


def test_verdicts_are_stored_and_an_hour_ingested_again_is_no_longer_checked(stored, servers):
    field.max_of_means(stored)
    reconcile(stored, servers["prometheus"])
    rows = {r.hour: r for r in stored.exec(select(ReconcileHour)).all()}
    assert len(rows) == field.HOURS and rows[field.at(1)].verdict == "differs"
    pool = stored.exec(select(ReconcilePoolHour).where(ReconcilePoolHour.hour == field.at(1))).one()
    assert (pool.agrees, pool.stored_kwh, pool.source_kwh) == (False, Decimal("0.6"), Decimal("0.4"))
    state = period_state(stored, clusters=["default"], start=START, end=END)
    assert (state.hours, state.unchecked, state.problems, state.reconciled) == (6, 0, 1, False)
    assert state.examples == (f"{field.at(1):%Y-%m-%d %H:%M} UTC differs: pool l40s: kWh stored 0.600000000, "
                              "source 0.400000000",)

    ingest_hours(session=stored, source=PrometheusSource(servers["prometheus"], timeout_s=30), start=field.at(1),
                 end=field.at(2))  # hour 1 ingested again: its verdict no longer describes it
    field.as_spec_says(stored)
    state = period_state(stored, clusters=["default"], start=START, end=END)
    assert (state.unchecked, state.problems, state.reconciled) == (1, 0, False)
    reconcile(stored, servers["prometheus"], start=field.at(1), end=field.at(2))
    assert period_state(stored, clusters=["default"], start=START, end=END).reconciled


def test_an_unreachable_source_checks_nothing_and_says_so(stored):
    from tests.support.prometheus import free_port

    report = reconcile(stored, f"http://127.0.0.1:{free_port()}")
    assert report.checks == [] and len(report.unread) == field.HOURS and "did not answer" in report.error
    assert stored.exec(select(ReconcileHour)).all() == []
    assert from_epoch(field.F) == report.unread[0]


def test_every_hour_of_the_scenario_agrees_and_nothing_is_listed(session, scenario_prometheus):
    """MIG slices, a time-sliced GPU, a unit reporting both occupancy metrics, an unclaimed namespace, a class
    override, a node in no pool, an energy counter and mean power: ingested today, every hour agrees."""
    add_policy(session)
    start = from_epoch(scenario.H)
    end = start + timedelta(hours=SCENARIO_HOURS)
    assert ingest_hours(session=session, source=PrometheusSource(scenario_prometheus.url), start=start, end=end).ok
    report = reconcile_hours(session=session, source=ReconcileSource(scenario_prometheus.url), cluster="default",
                             start=start, end=end, until=end)
    assert [str(c.verdict) for c in report.checks] == ["agrees"] * SCENARIO_HOURS and report.problems == []
    first = {p.pool: (p.source_gpus, p.source_gpu_seconds, p.source_kwh) for p in report.checks[0].pools}
    assert first == {"mixed-a100": (4, sum(scenario.EXPECTED_USAGE[k] for k in scenario.EXPECTED_USAGE
                                         if k[0] == "mixed-a100"), Decimal("1.083333333")),
                     "rtx": (1, Decimal("2400.000000"), Decimal("0.450000000")),
                     "unpooled": (1, Decimal("600.000000"), Decimal("0.400000000"))}
    assert period_state(session, clusters=["default"], start=start, end=end).reconciled
