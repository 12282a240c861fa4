"""GET /api/v1/allocation, the /allocation page and its CSV, through the real app on SQLite and PostgreSQL."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime
from decimal import Decimal

import pytest
from sqlalchemy import update
from sqlmodel import Session

from app.billing import budgets
from app.core.db import unit_of_work
from app.metrics.models import UsageRollup
from tests.support.billing import add_hour, add_namespaces, fill_month, month_hours, store_policy
from tests.support.routes import VIEWER, VISION_MEMBER, problem

OCT1 = datetime(2026, 10, 1, tzinfo=UTC)
DAY = 24
SCRATCH = [("search", "inference", False, "search-prod", 1800), ("vision", "training", False, "vision-train", 2520),
           ("vision", "training", True, "vision-train", 1800), ("etl", "preprocessing", False, "data-prep", 360),
           ("unallocated", "unallocated", False, "scratch", 720)]
USAGE = [(t, k, d, s) for t, k, d, _, s in SCRATCH]


@pytest.fixture
def october(fresh_engine, api):
    """One hour of October on 3 GPUs (idle capacity), with unallocated use in namespace `scratch`, rated (a draft)."""
    with unit_of_work(fresh_engine) as s:
        v = store_policy(s)
        add_hour(s, hour=OCT1, version=v.id, usage=USAGE, gpus=3)
        add_namespaces(s, hour=OCT1, parts=SCRATCH)
    assert api.post("/api/v1/periods/2026-10/rate").status_code == 200


def test_api_rows_and_totals(api, october):
    body = api.get("/api/v1/allocation", params={"window": "2026-10", "aggregate": "tenant"}).json()
    assert body["window"] == "2026-10-01,2026-10-31" and body["currency"] == "USD" and body["estimated"] is True
    assert body["months"] == [{"month": "2026-10", "source": "estimate", "status": "rated"}]  # a draft: live
    rows = [(r["kind"], r["name"], r["cost"]) for r in body["rows"]]
    # allocated by cost, then unallocated, idle per pool, the platform balance
    assert [k for k, _, _ in rows] == ["allocated", "allocated", "allocated", "unallocated", "idle", "adjustment"]
    assert rows[:3] == [("allocated", "vision", "1.30"), ("allocated", "search", "1.17"), ("allocated", "etl", "0.13")]
    assert body["total"]["cost"] == "3.90"  # C of 3 A100s for one hour at 1.30
    assert body["total"]["gpu_hours"] == "3.000000"  # capacity: used + idle
    vision = body["rows"][0]
    assert (vision["busy_gpu_hours"], vision["dark_gpu_hours"], vision["gpu_hours"]) == ("0.700000", "0.500000", "1.200000")
    assert vision["efficiency"] == 0.5 and vision["tenant"] is None


def test_api_by_namespace_names_the_unallocated_namespace(api, october):
    body = api.get("/api/v1/allocation", params={"window": "2026-10", "aggregate": "namespace"}).json()
    unallocated = [(r["name"], r["tenant"], r["gpu_hours"]) for r in body["rows"] if r["kind"] == "unallocated"]
    assert unallocated == [("scratch", "unallocated", "0.200000")]


def test_api_tenant_member_sees_only_its_rows(api, october):
    api.as_(VISION_MEMBER)
    for aggregate in ("tenant", "department", "pool", "class", "namespace"):
        body = api.get("/api/v1/allocation", params={"window": "2026-10", "aggregate": aggregate}).json()
        assert {r["kind"] for r in body["rows"]} == {"allocated"}, aggregate
        assert body["total"]["cost"] == "1.30" and body["total"]["gpu_hours"] == "1.200000", aggregate
    body = api.get("/api/v1/allocation", params={"window": "2026-10", "tenant": "search"}).json()
    assert body["rows"] == [] and body["total"]["cost"] == "0"


@pytest.mark.parametrize(("params", "path"), [
    ({"window": "2026-13"}, "query.window"),
    ({"window": "2026-10-09,2026-10-01"}, "query.window"),
    ({"aggregate": "cluster"}, "query.aggregate"),
])
def test_api_bad_parameters_are_problems_naming_the_parameter(api, params, path):
    body = problem(api.get("/api/v1/allocation", params=params), 422)
    assert [e["path"] for e in body["errors"]] == [path]


def test_page_and_csv_agree(api, october):
    api.as_(VIEWER)
    query = {"start": "2026-10-01", "end": "2026-10-31", "aggregate": "pool"}
    page = api.get("/allocation", params=query)
    assert page.status_code == 200 and "Download CSV" in page.text and "idle · mixed-a100" in page.text
    response = api.get("/allocation.csv", params=query)
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/csv")
    assert 'filename="allocation-pool-2026-10-01-2026-10-31.csv"' in response.headers["content-disposition"]
    rows = list(csv.DictReader(io.StringIO(response.text)))
    body = api.get("/api/v1/allocation", params={"window": "2026-10-01,2026-10-31", "aggregate": "pool"}).json()
    assert [(r["kind"], r["name"], r["gpu_hours"], r["cost"]) for r in rows] == \
        [(r["kind"], r["name"], r["gpu_hours"], r["cost"]) for r in [*body["rows"], body["total"]]]


def test_page_bad_dates_are_a_readable_error(api):
    api.as_(VIEWER)
    response = api.get("/allocation", params={"start": "2026-10-09", "end": "2026-10-01"})
    assert response.status_code == 422 and "start" in response.text


def allocated(body: dict) -> dict[str, Decimal]:
    return {r["name"]: Decimal(r["cost"]) for r in body["rows"] if r["kind"] == "allocated"}


def month_to_date(engine, *, now: datetime) -> dict[str, Decimal]:
    """The budget page's month-to-date cost of every tenant in November as of `now`."""
    with Session(engine) as s:
        return {st.name: st.forecast.actual for st in budgets.statuses(session=s, viewer=None, now=now, month="2026-11",
                                                                       with_unbudgeted=True) if st.scope == "tenant"}


def test_a_draft_month_is_live_in_api_and_page_and_frozen_once_finalized(fresh_engine, api):
    """November rated as a draft on the 16th: the explorer (API and page) prices the hours ingested since, equal to
    the budgets' month-to-date; closed, it shows the invoice lines, unmoved by a later re-ingestion."""
    with unit_of_work(fresh_engine) as s:
        version = store_policy(s).id

    def fill(skip) -> None:
        with unit_of_work(fresh_engine) as s:
            fill_month(s, "2026-11", version, usage=USAGE, gpus=3, skip=skip, breach_hours=0)

    fill(range(15 * DAY, 30 * DAY))
    assert api.post("/api/v1/periods/2026-11/rate").status_code == 200
    month = {"window": "2026-11", "aggregate": "tenant"}
    page = {"start": "2026-11-01", "end": "2026-11-30", "aggregate": "tenant"}
    assert allocated(api.get("/api/v1/allocation", params=month).json())["vision"] == Decimal("468.00")  # 15 days

    fill({*range(15 * DAY), *range(19 * DAY, 30 * DAY)})  # days 16-19, ingested after the draft
    body = api.get("/api/v1/allocation", params=month).json()
    assert allocated(body) == month_to_date(fresh_engine, now=datetime(2026, 11, 20, tzinfo=UTC))
    assert allocated(body)["vision"] == Decimal("592.80")  # 19 days at 1.30 an hour
    assert body["months"] == [{"month": "2026-11", "source": "estimate", "status": "rated"}] and body["estimated"]
    shown = api.get("/allocation", params=page).text
    assert "592.80 USD" in shown and '<strong class="estimate">estimate</strong>' in shown

    fill(range(19 * DAY))  # the rest of the month, then the close
    closed = api.post("/api/v1/periods/2026-11/close", json={})
    assert closed.status_code == 200, closed.text
    final = api.get("/api/v1/allocation", params=month).json()
    assert final["months"] == [{"month": "2026-11", "source": "invoice", "status": "finalized"}]
    assert not final["estimated"] and allocated(final)["vision"] == Decimal("936.00")
    assert allocated(final) == month_to_date(fresh_engine, now=datetime(2026, 12, 1, tzinfo=UTC))

    part = {"window": "2026-11-01,2026-11-29", "aggregate": "tenant"}
    before = allocated(api.get("/api/v1/allocation", params=part).json())
    with unit_of_work(fresh_engine) as s:  # an hour re-ingested after the close: 2,880 vision GPU-seconds more
        s.execute(update(UsageRollup).where(UsageRollup.hour == month_hours("2026-11")[100],
                                            UsageRollup.tenant == "vision", UsageRollup.dark.is_(False))
                  .values(gpu_seconds=Decimal(5400)))
    assert allocated(api.get("/api/v1/allocation", params=part).json())["vision"] == before["vision"] + Decimal("1.04")
    assert api.get("/api/v1/allocation", params=month).json() == final
    shown = api.get("/allocation", params=page).text
    assert "936.00 USD" in shown and "2026-11: invoice lines (finalized)" in shown


def test_a_namespace_label_with_a_carriage_return_is_stored_verbatim_and_exported_inert(fresh_engine, api):
    """Label values come from the cluster, not from a form: kept as read, but the CSV a member downloads holds one
    inert cell per value (csv.writer left `scratch\\r=cmd` unquoted: a reader splitting on CR saw a live formula)."""
    evil = "scratch\r=HYPERLINK(\"http://evil.example\")"
    parts = [*SCRATCH[:-1], ("unallocated", "unallocated", False, evil, 720)]
    with unit_of_work(fresh_engine) as s:
        v = store_policy(s)
        add_hour(s, hour=OCT1, version=v.id, usage=USAGE, gpus=3)
        add_namespaces(s, hour=OCT1, parts=parts)
    body = api.get("/api/v1/allocation", params={"window": "2026-10", "aggregate": "namespace"}).json()
    assert evil in [r["name"] for r in body["rows"]]  # verbatim in the JSON
    api.as_(VIEWER)
    response = api.get("/allocation.csv", params={"start": "2026-10-01", "end": "2026-10-31", "aggregate": "namespace"})
    assert response.status_code == 200
    rows = list(csv.reader(io.StringIO(response.content.decode(), newline="")))
    assert all(len(row) == len(rows[0]) for row in rows)
    names = [row[1] for row in rows[1:]]
    assert "scratch\r'=HYPERLINK(\"http://evil.example\")" in names
    assert not [n for n in names if n.startswith("=") or "\r=" in n]
