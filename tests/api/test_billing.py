"""Billing and usage API through httpx ASGITransport: shapes, tenant isolation, problem+json 403/404/409/422."""

from __future__ import annotations

import csv
import hashlib
import io
from datetime import UTC, datetime, timedelta

import pytest

from app.core.db import unit_of_work
from tests.support.billing import add_hour, fill_month, issue_documents, record_gaps, store_policy
from tests.support.routes import VIEWER, VISION_MEMBER, problem

OCT1 = datetime(2026, 10, 1, tzinfo=UTC)


@pytest.fixture
def rated(fresh_engine, api):
    with unit_of_work(fresh_engine) as s:
        v = store_policy(s)
        add_hour(s, hour=OCT1, version=v.id)
    response = api.post("/api/v1/periods/2026-10/rate")
    assert response.status_code == 200, response.text
    return response.json()


def test_rate_then_list_and_read_invoices(api, rated):
    assert rated["period"] == "2026-10" and rated["status"] == "rated" and rated["revision"] == 1
    periods = api.get("/api/v1/periods").json()["items"]
    assert periods[0]["period"] == "2026-10" and periods[0]["status"] == "rated"

    body = api.get("/api/v1/periods/2026-10/invoices").json()
    assert [(i["tenant"], i["department"], i["total"]) for i in body["invoices"]] == [
        ("etl", "data", "0.13"), ("search", "consumer", "-0.22"), ("vision", "research", "2.30"),
    ]
    assert {d["department"]: d["total"] for d in body["departments"]} == {"consumer": "-0.22", "data": "0.13", "research": "2.30"}

    invoice = api.get("/api/v1/periods/2026-10/invoices/vision").json()
    assert invoice["total"] == "2.30" and invoice["penalties_paid"] == "1.00"
    assert {(l["kind"], l["amount"]) for l in invoice["lines"]} == {
        ("usage_busy", "0.91"), ("usage_dark", "0.39"), ("sla_penalty", "1.00"),
    }
    assert invoice["gpu_hours"][0]["busy"] == "0.700000"
    assert invoice["lines"][0]["charge_start"] == "2026-10-01T00:00:00Z"

    statement = api.get("/api/v1/periods/2026-10/statement").json()
    assert statement["conserved"] is True and statement["cost_total"] == "2.60"
    assert statement["balance"]["platform_idle"] == "0.26"


def test_tenant_member_sees_only_its_tenant(api, rated):
    api.as_(VISION_MEMBER)
    body = api.get("/api/v1/periods/2026-10/invoices").json()
    assert [i["tenant"] for i in body["invoices"]] == ["vision"]
    assert [d["department"] for d in body["departments"]] == ["research"]
    assert api.get("/api/v1/periods/2026-10/invoices/vision").status_code == 200
    other = problem(api.get("/api/v1/periods/2026-10/invoices/search"), 404)
    unknown = problem(api.get("/api/v1/periods/2026-10/invoices/nobody"), 404)
    assert other["title"] == unknown["title"]  # no hint that `search` exists
    problem(api.get("/api/v1/periods/2026-10/statement"), 403)
    problem(api.get("/api/v1/periods/2026-10/export?format=csv"), 403)
    problem(api.post("/api/v1/periods/2026-10/rate"), 403)
    usage = api.get("/api/v1/usage", params={"start": "2026-10-01T00:00:00Z", "end": "2026-11-01T00:00:00Z"}).json()
    assert [r["key"] for r in usage["rows"]] == ["vision"]


def test_bad_periods_are_problems(api, rated):
    body = problem(api.get("/api/v1/periods/2026-13/invoices"), 422)
    assert body["errors"][0]["path"] == "period"
    problem(api.get("/api/v1/periods/october/invoices/vision"), 422)
    problem(api.get("/api/v1/periods/2099-01/invoices"), 404)
    assert "not been rated" in problem(api.get("/api/v1/periods/2026-08/invoices"), 404)["detail"]
    problem(api.post("/api/v1/periods/2099-01/rate"), 404)
    body = problem(api.get("/api/v1/periods/2026-10/export?format=xlsx"), 422)
    assert body["errors"][0]["path"] == "query.format"


def test_missing_price_is_422_and_writes_nothing(api, fresh_engine):
    with unit_of_work(fresh_engine) as s:
        v = store_policy(s)
        add_hour(s, hour=OCT1 + timedelta(hours=5), version=v.id, model="NVIDIA H200")
    body = problem(api.post("/api/v1/periods/2026-10/rate"), 422)
    assert "NVIDIA H200" in body["detail"]
    assert "NVIDIA H200" in body["errors"][0]["path"] and "2026-10-01T05:00Z" in body["errors"][0]["message"]
    assert [p["status"] for p in api.get("/api/v1/periods").json()["items"]] == ["open"]  # nothing stored
    problem(api.get("/api/v1/periods/2026-10/invoices"), 404)


def test_close_conflicts_and_accepting_gaps(api, rated, fresh_engine):
    body = problem(api.post("/api/v1/periods/2026-10/close", json={"accept_gaps": True, "reason": "test month"}), 409)
    assert "never ingested, which no acceptance covers" in body["detail"]  # missing hours: ingest them first
    with unit_of_work(fresh_engine) as s:
        record_gaps(s, "2026-10")  # ingested: the source could not answer them
    body = problem(api.post("/api/v1/periods/2026-10/close"), 409)
    assert "743 gap hour(s) the source could not answer" in body["detail"]
    body = problem(api.post("/api/v1/periods/2026-10/close", json={"accept_gaps": True}), 422)
    assert body["errors"][0]["path"] == "reason"
    closed = api.post("/api/v1/periods/2026-10/close", json={"accept_gaps": True, "reason": "test month"})
    assert closed.status_code == 200, closed.text
    assert closed.json()["status"] == "finalized" and closed.json()["accept_gaps_reason"] == "test month"
    assert closed.json()["finalized_by"] == "fiona"
    problem(api.post("/api/v1/periods/2026-10/close", json={"accept_gaps": True, "reason": "again"}), 409)
    problem(api.post("/api/v1/periods/2026-10/rate"), 409)
    problem(api.post("/api/v1/periods/2026-10/close", json={"accept_gaps": "maybe"}), 422)


def test_checklist_says_what_blocks_the_close_and_what_to_do(api, fresh_engine):
    with unit_of_work(fresh_engine) as s:
        v = store_policy(s)
        fill_month(s, "2026-10", v.id, skip={10, 11}, gap={12})
    before = api.get("/api/v1/periods/2026-10/checklist")
    assert before.status_code == 200, before.text
    body = before.json()
    assert (body["period"], body["status"], body["hours_expected"], body["hours_ok"]) == ("2026-10", "open", 744, 741)
    assert body["ready"] is False and body["needs"] == []  # hours never ingested: no acceptance closes the month
    coverage = body["items"][0]
    assert coverage["status"] == "blocks close" and coverage["accept"] is None
    assert "default: 2 hours (2026-10-01T10:00..2026-10-01T11:00)" in coverage["detail"]
    assert coverage["action"].startswith("Ingest 2026-10-01T10:00..2026-10-01T11:00 for default first")
    with unit_of_work(fresh_engine) as s:
        record_gaps(s, "2026-10")  # hours 10-11 ingested: the source could not answer them either

    body = api.get("/api/v1/periods/2026-10/checklist").json()
    assert body["ready"] is False and body["needs"] == ["accept_gaps"]
    items = {i["key"]: i for i in body["items"]}
    assert list(items) == ["coverage", "reconcile", "unpooled", "rating", "unattributed", "corrections"]
    assert items["coverage"]["status"] == "blocks close" and items["coverage"]["accept"] == "accept_gaps"
    assert "3 hours the source could not answer" in items["coverage"]["detail"]
    assert "2026-10-01T10:00..2026-10-01T12:00" in items["coverage"]["detail"]
    assert "Accept the gap hours" in items["coverage"]["action"] and "--" not in items["coverage"]["action"]
    assert items["rating"]["status"] == "needs attention" and items["unpooled"]["status"] == "ok"

    api.post("/api/v1/periods/2026-10/close", json={"accept_gaps": True, "reason": "outage"})
    closed = api.get("/api/v1/periods/2026-10/checklist").json()
    assert closed["status"] == "finalized" and closed["ready"] is True and closed["needs"] == []
    assert "outage" in closed["items"][0]["action"]

    api.as_(VIEWER)
    assert api.get("/api/v1/periods/2026-10/checklist").status_code == 200
    api.as_(VISION_MEMBER)  # fleet-wide facts (unpooled GPUs, breaches nobody pays): staff only, like the statement
    problem(api.get("/api/v1/periods/2026-10/checklist"), 403)


def test_checklist_of_bad_or_future_periods_are_problems(api):
    assert problem(api.get("/api/v1/periods/2026-13/checklist"), 422)["errors"][0]["path"] == "period"
    problem(api.get("/api/v1/periods/2999-01/checklist"), 404)


def test_exports_download_and_match_stored_hashes(api, fresh_engine):
    with unit_of_work(fresh_engine) as s:
        v = store_policy(s)
        fill_month(s, "2026-10", v.id)
    assert api.post("/api/v1/periods/2026-10/close").json()["documents"] == "pending"
    issue_documents(fresh_engine, "2026-10")  # the worker's issuing step
    closed = next(p for p in api.get("/api/v1/periods").json()["items"] if p["period"] == "2026-10")
    assert closed["documents"] == "issued"
    for fmt, kind in (("csv", "text/csv"), ("focus", "text/csv"), ("pdf", "application/pdf")):
        response = api.get("/api/v1/periods/2026-10/export", params={"format": fmt})
        assert response.status_code == 200 and response.headers["content-type"].startswith(kind)
        assert "attachment" in response.headers["content-disposition"]
        assert hashlib.sha256(response.content).hexdigest() == closed["hashes"][fmt] == response.headers["x-content-sha256"]
    rows = list(csv.DictReader(io.StringIO(api.get("/api/v1/periods/2026-10/export?format=focus").text)))
    assert rows and all(r["BillingPeriodStart"] == "2026-10-01T00:00:00Z" for r in rows)


def test_corrections_endpoint(api, fresh_engine):
    with unit_of_work(fresh_engine) as s:
        v = store_policy(s)
        fill_month(s, "2026-09", v.id)
    api.post("/api/v1/periods/2026-09/close").raise_for_status()
    line = api.get("/api/v1/periods/2026-09/invoices/etl").json()["lines"][0]
    response = api.post("/api/v1/periods/2026-10/corrections",
                        json={"line_id": line["line_id"], "amount": "-1.005", "reason": "meter fault"})
    assert response.status_code == 201, response.text
    assert response.json()["amount"] == "-1.00" and response.json()["corrects"] == line["line_id"]
    problem(api.post("/api/v1/periods/2026-10/corrections", json={"line_id": "x", "amount": "1"}), 422)
    problem(api.post("/api/v1/periods/2026-10/corrections", json={"line_id": "nope", "amount": "1", "reason": "r"}), 404)
    # A reason is one line of text: a bare CR (a formula after it in a spreadsheet), NEL or U+2028 is refused by path.
    for reason in ("late fix\r=SUM(1+2)", "late\x85fix", "late\u2028fix", "late\tfix", "late\x1b[31mfix"):
        body = problem(api.post("/api/v1/periods/2026-10/corrections",
                                json={"line_id": line["line_id"], "amount": "1", "reason": reason}), 422)
        assert [e["path"] for e in body["errors"]] == ["reason"] and "U+" in body["errors"][0]["message"], reason


def test_usage_grouping_and_validation(api, fresh_engine):
    with unit_of_work(fresh_engine) as s:
        v = store_policy(s)
        add_hour(s, hour=OCT1, version=v.id)
        add_hour(s, hour=OCT1 + timedelta(hours=1), version=v.id, breaches=())
    params = {"start": "2026-10-01T00:00:00Z", "end": "2026-10-02T00:00:00Z"}
    by_tenant = api.get("/api/v1/usage", params=params).json()
    assert {r["key"]: r["gpu_hours"] for r in by_tenant["rows"]} == {
        "etl": "0.200000", "search": "1.000000", "vision": "2.400000"}
    assert by_tenant["hours_expected"] == 24 and by_tenant["hours_ok"] == 2
    vision = next(r for r in by_tenant["rows"] if r["key"] == "vision")
    assert vision["busy_gpu_hours"] == "1.400000" and vision["dark_gpu_hours"] == "1.000000"
    by_class = api.get("/api/v1/usage", params={**params, "group_by": "class"}).json()
    assert [r["key"] for r in by_class["rows"]] == ["inference", "preprocessing", "training"]
    by_dept = api.get("/api/v1/usage", params={**params, "group_by": "department"}).json()
    assert [r["key"] for r in by_dept["rows"]] == ["consumer", "data", "research"]
    by_pool = api.get("/api/v1/usage", params={**params, "group_by": "pool"}).json()
    assert by_pool["rows"] == [{"key": "mixed-a100", "busy_gpu_hours": "2.600000", "dark_gpu_hours": "1.000000",
                                "gpu_hours": "3.600000", "efficiency": 0.5}]

    body = problem(api.get("/api/v1/usage", params={**params, "group_by": "colour"}), 422)
    assert body["errors"][0]["path"] == "query.group_by"
    body = problem(api.get("/api/v1/usage", params={"start": "2026-10-02T00:00:00Z", "end": "2026-10-01T00:00:00Z"}), 422)
    assert body["errors"][0]["path"] == "query.end"
    body = problem(api.get("/api/v1/usage", params={"start": "yesterday", "end": "2026-10-01T00:00:00Z"}), 422)
    assert body["errors"][0]["path"] == "query.start"
    problem(api.get("/api/v1/usage", params={"start": "2026-10-01T00:00:00Z"}), 422)


def test_viewer_reads_but_cannot_rate_or_export(api, rated):
    api.as_(VIEWER)
    assert api.get("/api/v1/periods/2026-10/statement").status_code == 200
    assert len(api.get("/api/v1/periods/2026-10/invoices").json()["invoices"]) == 3
    problem(api.post("/api/v1/periods/2026-10/rate"), 403)
    problem(api.post("/api/v1/periods/2026-10/close"), 403)
    problem(api.get("/api/v1/periods/2026-10/export?format=pdf"), 403)


def test_statement_shows_use_cut_at_capacity_and_bills_none_of_it(api, rated, fresh_engine):
    """A data-quality finding of the period's hours is on the platform statement; the invoices do not change."""
    from decimal import Decimal

    from app.metrics.models import DataQualityFinding

    before = api.get("/api/v1/periods/2026-10/invoices").json()
    assert api.get("/api/v1/periods/2026-10/statement").json()["data_quality"]["findings"] == 0
    with unit_of_work(fresh_engine) as s:
        s.add(DataQualityFinding(hour=OCT1, pool="mixed-a100", kind="over_capacity", unit="gpu-a100-01/GPU-A",
                                 gpu_seconds_cut=Decimal("5400"), detail="2 series reported 9000 GPU-s"))
        s.add(DataQualityFinding(hour=OCT1 - timedelta(hours=1), pool="mixed-a100", kind="over_capacity",
                                 unit="gpu-a100-01/GPU-A", gpu_seconds_cut=Decimal("3600"), detail="September"))
    quality = api.get("/api/v1/periods/2026-10/statement").json()["data_quality"]
    assert quality["findings"] == 1 and Decimal(quality["gpu_hours_cut"]) == Decimal("1.5")
    assert Decimal(quality["by_pool"]["mixed-a100"]["gpu_hours_cut"]) == Decimal("1.5")
    assert api.get("/api/v1/periods/2026-10/invoices").json() == before
