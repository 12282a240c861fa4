"""Budgets API: set, read and remove budgets; typed answers with this month's cost and forecast; field paths in
422s; 404 for unknown (and, for members, foreign) tenants; the allocation API's forecast per tenant row.

The portal's clock is the real one, so the seeded hours are last month's and this month's up to the hour now.
"""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal as D

from app.core.timeutil import floor_hour, utcnow
from tests.support.billing import store_policy
from tests.support.budgets import PER_HOUR, seed_to_now
from tests.support.routes import VIEWER, VISION_MEMBER, problem


def test_finance_sets_a_budget_and_reads_where_it_stands(session, session_api):
    month, known, total = seed_to_now(session)
    saved = session_api.request("PUT", "/api/v1/budgets/tenants/vision", json={"amount": "1000.00"})
    assert saved.status_code == 200, saved.text
    body = saved.json()
    assert (body["scope"], body["name"], body["department"], body["month"], body["currency"]) == (
        "tenant", "vision", "research", month, "USD")
    assert body["budget"]["amount"] == "1000.00" and body["budget"]["thresholds"] == [50, 80, 100]
    assert body["budget"]["updated_by"] == "fiona"
    assert D(body["actual"]) == D("1.30") * known  # the example hour, every hour so far
    forecast = body["forecast"]
    assert D(forecast["month_end"]) == D("1.30") * total  # steady hours: the forecast is the whole month of them
    assert (forecast["hours_known"], forecast["hours_remaining"]) == (known, total - known)
    assert forecast["method"] == "weekday-hour" and forecast["short_history"] is False
    assert body["state"] == ("on-track" if D("1.30") * total < 1000 else "at-risk")
    assert session_api.get("/api/v1/budgets/tenants/vision").json() == body
    listed = session_api.get("/api/v1/budgets").json()
    assert listed["month"] == month and [i["name"] for i in listed["items"]] == ["vision"]
    everyone = session_api.get("/api/v1/budgets", params={"include_unbudgeted": "true"}).json()["items"]
    assert [(i["scope"], i["name"], i["budget"] is not None) for i in everyone] == [
        ("department", "consumer", False), ("department", "data", False), ("department", "research", False),
        ("tenant", "etl", False), ("tenant", "search", False), ("tenant", "vision", True)]
    research = next(i for i in everyone if i["name"] == "research")
    assert research["forecast"]["month_end"] == forecast["month_end"]  # vision is research's only tenant
    assert session_api.request("DELETE", "/api/v1/budgets/tenants/vision").status_code == 204
    assert session_api.get("/api/v1/budgets/tenants/vision").json()["budget"] is None
    problem(session_api.request("DELETE", "/api/v1/budgets/tenants/vision"), 404)


def test_bad_input_is_422_with_the_field_path_and_changes_nothing(session, session_api):
    store_policy(session)
    session_api.request("PUT", "/api/v1/budgets/tenants/vision", json={"amount": "500", "thresholds": [90]})
    cases = [
        ({"amount": "12.345"}, ["body.amount"]),
        ({"amount": "0"}, ["body.amount"]),
        ({"amount": "ten"}, ["body.amount"]),
        ({"amount": "100", "thresholds": [80, 50, 120]}, ["body.thresholds.1"]),
        ({"amount": "-1", "thresholds": [0]}, ["body.amount", "body.thresholds.0"]),
        ({"amount": "100", "thresholds": ["eighty"]}, ["body.thresholds.0"]),
        ({"amount": "100", "threshold": [80]}, ["body.threshold"]),
        ({"thresholds": [80]}, ["body.amount"]),
    ]
    for body, paths in cases:
        found = problem(session_api.request("PUT", "/api/v1/budgets/tenants/vision", json=body), 422)
        assert [e["path"] for e in found["errors"]] == paths, (body, found)
    budget = session_api.get("/api/v1/budgets/tenants/vision").json()["budget"]
    assert (budget["amount"], budget["thresholds"]) == ("500.00", [90])


def test_unknown_names_are_404(session, session_api):
    store_policy(session)
    for path in ("/api/v1/budgets/tenants/nobody", "/api/v1/budgets/departments/nowhere"):
        problem(session_api.get(path), 404)
        problem(session_api.request("PUT", path, json={"amount": "10"}), 404)
        problem(session_api.request("DELETE", path), 404)


def test_a_member_reads_its_own_tenant_and_nothing_else(session, session_api):
    store_policy(session)
    for tenant in ("vision", "search"):
        session_api.request("PUT", f"/api/v1/budgets/tenants/{tenant}", json={"amount": "100"})
    session_api.request("PUT", "/api/v1/budgets/departments/research", json={"amount": "100"})
    member = session_api.as_(VISION_MEMBER)
    own = member.get("/api/v1/budgets/tenants/vision").json()
    assert own["budget"]["amount"] == "100.00" and own["budget"]["updated_by"] is None  # staff names stay staff's
    problem(member.get("/api/v1/budgets/tenants/search"), 404)
    problem(member.get("/api/v1/budgets/tenants/nobody"), 404)
    problem(member.get("/api/v1/budgets/departments/research"), 403)
    problem(member.request("PUT", "/api/v1/budgets/tenants/vision", json={"amount": "1"}), 403)
    assert [i["name"] for i in member.get("/api/v1/budgets", params={"include_unbudgeted": "true"}).json()["items"]] \
        == ["vision"]
    problem(session_api.as_(VIEWER).request("PUT", "/api/v1/budgets/tenants/vision", json={"amount": "1"}), 403)


def test_allocation_rows_carry_this_months_forecast(session, session_api):
    month, known, total = seed_to_now(session)
    this_month = session_api.get("/api/v1/allocation").json()
    rows = {r["name"]: r for r in this_month["rows"] if r["kind"] == "allocated"}
    for tenant, per_hour in PER_HOUR.items():
        assert D(rows[tenant]["cost"]) == per_hour * known
        assert D(rows[tenant]["forecast_cost"]) == per_hour * total
        status = session_api.get(f"/api/v1/budgets/tenants/{tenant}").json()
        assert status["forecast"]["month_end"] == rows[tenant]["forecast_cost"]  # one figure, two routes
    assert this_month["total"]["forecast_cost"] is None
    assert all(r["forecast_cost"] is None for r in this_month["rows"] if r["kind"] != "allocated")
    departments = session_api.get("/api/v1/allocation", params={"aggregate": "department"}).json()["rows"]
    assert {r["name"]: D(r["forecast_cost"]) for r in departments if r["kind"] == "allocated"} == {
        "consumer": D("0.78") * total, "research": D("1.30") * total, "data": D("0.13") * total}
    last = (floor_hour(utcnow()).replace(day=1) - timedelta(days=1)).strftime("%Y-%m")
    past = session_api.get("/api/v1/allocation", params={"window": last}).json()["rows"]
    assert past and all(r["forecast_cost"] is None for r in past)  # a window that does not reach today
    by_namespace = session_api.get("/api/v1/allocation", params={"aggregate": "namespace"}).json()["rows"]
    assert all(r["forecast_cost"] is None for r in by_namespace)
