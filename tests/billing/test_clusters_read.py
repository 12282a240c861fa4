"""Reading a period of two clusters: each cluster's `unpooled` counted as one fleet figure by rating, lines naming their
cluster in invoices, statement and exports, and the allocation explorer, overview and fleet filtered by cluster."""

from __future__ import annotations

import csv
import io
import json
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from zoneinfo import ZoneInfo

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import func, select

from app.billing import exports, periods
from app.billing.allocation import allocation, parse_window
from app.billing.invoices import load_view, platform_statement, tenant_invoice
from app.billing.models import PoolCostRecord
from app.billing.period import parse_period
from app.core import settings as settings_module
from app.core.errors import Invalid
from app.policy.document import UNPOOLED
from tests.support.billing import add_hour, policy_doc, store_policy
from tests.support.routes import problem

HOURS = [datetime(2026, 11, 3, h, tzinfo=UTC) for h in range(6)]
CLUSTERS = ("east", "west")


@pytest.fixture
def two_clusters(monkeypatch):
    monkeypatch.setenv("CHARGEBACK_CLUSTERS", json.dumps([{"name": c, "simulator": {"seed": i + 1}}
                                                          for i, c in enumerate(CLUSTERS)]))
    settings_module.get_settings.cache_clear()
    yield
    settings_module.get_settings.cache_clear()


def pools() -> list[dict]:
    """The worked example's pool once per cluster, on nodes of the same names."""
    return [{"name": f"{c}-a100", "cluster": c, "nodes": ["gpu-a100-01", "gpu-a100-02"], "reserved_fraction": "0.30",
             "reservations": {"search": 1}} for c in CLUSTERS]


@pytest.fixture
def november(session, two_clusters):
    sla = {"service": "search-chat", "tenant": "search", "pool": "east-a100",
           "requests": 'vllm:request_success_total{namespace="search-prod"}',
           "latency_histogram": 'vllm:e2e_request_latency_seconds_bucket{namespace="search-prod"}',
           "p99_ms": 300, "penalty_per_breach_minute": "0.50"}
    version = store_policy(session, policy_doc(pools=pools(), sla=[sla]))
    for hour in HOURS:
        add_hour(session, hour=hour, version=version.id, pool="east-a100", cluster="east")
        add_hour(session, hour=hour, version=version.id, pool="west-a100", cluster="west", breaches=(),
                 usage=[("vision", "training", False, 3600)])
        # GPUs on nodes no pool of their cluster names: each cluster's own `unpooled`, in the same hours.
        add_hour(session, hour=hour, version=version.id, pool=UNPOOLED, cluster="east", gpus=2, breaches=(),
                 usage=[("vision", "training", False, 600)])
        add_hour(session, hour=hour, version=version.id, pool=UNPOOLED, cluster="west", gpus=1, breaches=(),
                 usage=[("etl", "preprocessing", False, 300)])
    return periods.rate(session=session, period="2026-11", actor="fin")


def test_each_clusters_unpooled_is_one_fleet_figure_per_hour(session, november):
    assert (november.unpooled_hours, november.unpooled_gpus) == (len(HOURS), 3)  # 2 + 1 GPUs in each hour
    assert november.unpooled_gpu_hours == Decimal(3 * len(HOURS))
    status = periods.unpooled_status(session=session, period=parse_period("2026-11"))
    assert (status.hours, status.max_gpus, status.capacity_gpu_hours) == (len(HOURS), 3, Decimal(3 * len(HOURS)))
    assert status.used_gpu_hours == Decimal(900 * len(HOURS)) / 3600


def test_a_tenants_invoice_spans_clusters_and_names_each_lines_cluster(session, november):
    view = load_view(session=session, period=november)
    invoice = tenant_invoice(view, "vision")
    assert invoice["clusters"] == ["east", "west"] and invoice["several_clusters"]
    assert {(l["pool"], l["cluster"]) for l in invoice["lines"]} == {("east-a100", "east"), ("west-a100", "west")}
    assert {(g["pool"], g["cluster"]) for g in invoice["gpu_hours"]} == {("east-a100", "east"), ("west-a100", "west")}
    statement = platform_statement(view)
    assert statement["several_clusters"] and {(p["pool"], p["cluster"]) for p in statement["pools"]} == {
        ("east-a100", "east"), ("west-a100", "west")}
    # The same figures as each cluster's pool alone: west's vision use is its busy line, priced like east's.
    west = [l for l in invoice["lines"] if l["cluster"] == "west"]
    assert [(l["kind"], l["quantity"]) for l in west] == [("usage_busy", Decimal(len(HOURS)))]


def test_exports_name_the_cluster_when_there_are_several(session, november):
    rows = list(csv.DictReader(io.StringIO(exports.render(session=session, period=november, fmt="focus").decode())))
    tags = [json.loads(r["Tags"]) for r in rows]
    assert {(t["x_pool"], t["x_cluster"]) for t in tags} == {("east-a100", "east"), ("west-a100", "west")}
    assert "RegionId" not in rows[0] and "AvailabilityZone" not in rows[0]  # a cluster is neither (FOCUS 1.2)
    plain = list(csv.DictReader(io.StringIO(exports.render(session=session, period=november, fmt="csv").decode())))
    assert {(r["pool"], r["cluster"]) for r in plain} == {("east-a100", "east"), ("west-a100", "west")}
    assert list(plain[0])[-1] == "cluster"


def test_allocation_by_cluster_and_of_one_cluster(session, november):
    window = parse_window("2026-11", today=date(2026, 12, 15), tz=UTC)
    by_cluster = allocation(session=session, window=window, aggregate="cluster", viewer=None)
    allocated = {r.name: r for r in by_cluster.rows if r.kind == "allocated"}
    assert set(allocated) == set(CLUSTERS)
    costs = dict(session.execute(select(PoolCostRecord.pool, PoolCostRecord.cost)
                                 .where(PoolCostRecord.period_id == november.id)).all())
    for cluster in CLUSTERS:
        only = allocation(session=session, window=window, aggregate="pool", viewer=None, cluster=cluster)
        assert only.cluster == cluster
        names = {r.name for r in only.rows if r.kind in ("allocated", "idle")}
        assert names <= {f"{cluster}-a100", UNPOOLED}, names
        # Staff: the rows of one cluster add up to that cluster's C, as rated.
        assert only.total.cost == Decimal(costs[f"{cluster}-a100"])
        assert allocated[cluster].cost == sum((r.cost for r in only.rows if r.kind == "allocated"), Decimal(0))
    everything = allocation(session=session, window=window, aggregate="pool", viewer=None)
    assert everything.total.cost == sum((Decimal(c) for c in costs.values()), Decimal(0))
    with pytest.raises(Invalid) as refused:
        allocation(session=session, window=window, aggregate="pool", viewer=None, cluster="north")
    assert refused.value.errors[0].path == "query.cluster"


def test_pages_and_api_filter_by_cluster(session_api, session, november):
    html = {"accept": "text/html"}
    page = session_api.get("/billing/2026-11/vision", headers=html)
    assert page.status_code == 200 and 'data-testid="clusters"' in page.text and "cluster west" in page.text
    answer = session_api.get("/api/v1/allocation", params={"window": "2026-11", "aggregate": "pool", "cluster": "west"})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["cluster"] == "west" and {r["name"] for r in body["rows"] if r["kind"] == "allocated"} == {"west-a100",
                                                                                                         UNPOOLED}
    assert problem(session_api.get("/api/v1/allocation", params={"cluster": "north"}), 422)["errors"][0]["path"] == (
        "query.cluster")
    explorer = session_api.get("/allocation", params={"start": "2026-11-01", "end": "2026-11-30", "cluster": "east"},
                               headers=html)
    assert explorer.status_code == 200 and 'aria-label="Cluster"' in explorer.text and "cluster east" in explorer.text
    start, end = (HOURS[0] - timedelta(days=1)).date().isoformat(), HOURS[-1].date().isoformat()
    for path in ("/", "/fleet"):
        shown = session_api.get(path, params={"start": start, "end": end, "cluster": "west"}, headers=html)
        assert shown.status_code == 200, (path, shown.text[:500])
        assert 'aria-label="Cluster"' in shown.text and "<strong>west</strong>" in shown.text
    assert session_api.get("/", params={"cluster": "north"}, headers=html).status_code == 422
    statement = session_api.get("/api/v1/periods/2026-11/statement").json()
    assert statement["several_clusters"] and {p["cluster"] for p in statement["pools"]} == set(CLUSTERS)
    lines = session_api.get("/api/v1/periods/2026-11/invoices/vision").json()["lines"]
    assert {(l["pool"], l["cluster"]) for l in lines} == {("east-a100", "east"), ("west-a100", "west")}


def test_overview_figures_of_one_cluster(session, november, two_clusters):
    from app.metrics import usage_read
    from app.metrics.date_ranges import DateRange

    period = DateRange(start=date(2026, 11, 3), end=date(2026, 11, 3), tz=ZoneInfo("UTC"))
    fleet = usage_read.daily_usage(session=session, period=period, tenants=None)
    parts = [usage_read.daily_usage(session=session, period=period, tenants=None, cluster=c) for c in CLUSTERS]
    day = date(2026, 11, 3)
    for klass in ("inference", "training", "preprocessing"):
        assert fleet.by_class.get(klass, {}).get(day, 0) == sum(p.by_class.get(klass, {}).get(day, 0) for p in parts)
    assert fleet.idle[day] == sum(p.idle[day] for p in parts)
    assert session.execute(select(func.count()).select_from(PoolCostRecord)).scalar_one() == 2


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(visible=st.sets(st.sampled_from(("search", "vision", "etl"))))
def test_a_member_s_cluster_rows_are_the_sum_over_its_tenants_only(session, november, visible):
    """Issue 25 item 3: by cluster too, a member's rows are its own tenants' (each read alone), nobody else's."""
    from app.auth.principal import Principal

    window = parse_window("2026-11", today=date(2026, 12, 15), tz=UTC)
    viewer = Principal(name="m", roles=frozenset({"tenant"}), tenants=frozenset(visible), user_id=9)
    answer = allocation(session=session, window=window, aggregate="cluster", viewer=viewer)
    assert {r.kind for r in answer.rows} <= {"allocated"}
    expected: dict[str, tuple] = {}
    for tenant in visible:
        for r in allocation(session=session, window=window, aggregate="cluster", viewer=None, tenant=tenant).rows:
            cost, seconds = expected.get(r.name, (Decimal(0), Decimal(0)))
            expected[r.name] = (cost + r.cost, seconds + r.busy_seconds + r.dark_seconds)
    assert {r.name: (r.cost, r.busy_seconds + r.dark_seconds) for r in answer.rows} == expected
    staff = {r.name: r.cost for r in allocation(session=session, window=window, aggregate="tenant", viewer=None).rows
             if r.kind == "allocated"}
    assert answer.total.cost == sum((staff.get(t, Decimal(0)) for t in visible), Decimal(0))
