"""GPUs on nodes no pool names (`unpooled`): rated unpriced, shown, and closing needs a recorded reason."""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from sqlalchemy import select

from app.billing import exports, periods
from app.billing.invoices import load_view, platform_statement, tenant_invoice
from app.billing.types import LineKind
from app.core.audit import AuditEntry
from app.core.db import unit_of_work
from app.core.errors import Conflict, Invalid
from app.metrics.ingest import ingest_hours
from app.metrics.simulator import Simulator
from app.policy.parsing import parse_document
from tests.support.billing import add_hour, fill_month, policy_doc, store_policy
from tests.support.routes import problem

OCT1 = datetime(2026, 10, 1, tzinfo=UTC)
H100 = "NVIDIA H100 80GB HBM3"  # not priced by the test policy: unpooled GPUs must not need a price
UNPOOLED_USE = [("vision", "training", False, 3600), ("vision", "training", True, 1800),
                ("unallocated", "unallocated", False, 900)]
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "policy.yaml"
HTML = {"accept": "text/html"}


def add_unpooled(session, version: int, hours: int = 2) -> None:
    for i in range(hours):
        add_hour(session, hour=OCT1 + timedelta(hours=i), version=version, pool="unpooled", gpus=4, model=H100,
                 usage=UNPOOLED_USE, breaches=())


def amounts(session, row) -> dict:
    return {(l.account, l.pool, l.kind): l.amount for l in load_view(session=session, period=row).lines}


def test_unpooled_gpus_never_block_rating_and_are_shown_unpriced(session):
    v = store_policy(session)
    fill_month(session, "2026-10", v.id)
    pooled_only = amounts(session, periods.rate(session=session, period="2026-10", actor="fin"))
    add_unpooled(session, v.id)
    row = periods.rate(session=session, period="2026-10", actor="fin")
    assert amounts(session, row) == pooled_only  # nothing priced, nothing moved
    assert row.unpooled_hours == 2 and row.unpooled_gpus == 4 and row.unpooled_gpu_hours == Decimal("8")
    view = load_view(session=session, period=row)
    assert all(l.pool != "unpooled" for l in view.lines)
    unpooled = platform_statement(view)["unpooled"]
    assert unpooled["capacity_gpu_hours"] == Decimal("8") and unpooled["used_gpu_hours"] == Decimal("3.5")
    assert [(u["tenant"], u["class"], u["gpu_hours"]) for u in unpooled["usage"]] == [
        ("unallocated", "unallocated", Decimal("0.5")), ("vision", "training", Decimal("3")),
    ]
    assert unpooled["accept_reason"] is None
    # the tenant's invoice only bills pooled use
    assert all(g["pool"] == "mixed-a100" for g in tenant_invoice(view, "vision")["gpu_hours"])


def test_close_refuses_unpooled_until_accepted_with_a_reason(session):
    v = store_policy(session)
    fill_month(session, "2026-10", v.id)
    add_unpooled(session, v.id)
    periods.rate(session=session, period="2026-10", actor="fin")
    with pytest.raises(Conflict) as err:
        periods.close(session=session, period="2026-10", actor="fin")
    assert "nodes no policy pool names" in err.value.detail and "--accept-unpooled" in err.value.detail
    assert "4 GPU(s) in 2 hour(s)" in err.value.detail and "8.000000 GPU-hours of capacity" in err.value.detail
    with pytest.raises(Invalid) as err:
        periods.close(session=session, period="2026-10", actor="fin", accept_unpooled=True, reason=" ")
    assert [e.path for e in err.value.errors] == ["reason"]
    with pytest.raises(Conflict):  # accepting gaps is not accepting unpooled GPUs
        periods.close(session=session, period="2026-10", actor="fin", accept_gaps=True, reason="x")
    assert periods.get_period(session=session, month="2026-10").status == "rated"

    row = periods.close(session=session, period="2026-10", actor="fin", accept_unpooled=True,
                        reason="new H100 nodes, pool from November")
    assert row.status == "finalized" and row.accept_unpooled_reason == "new H100 nodes, pool from November"
    assert row.accept_gaps_reason is None
    statement = platform_statement(load_view(session=session, period=row))
    assert statement["unpooled"]["accept_reason"] == "new H100 nodes, pool from November"
    audit = session.execute(select(AuditEntry).where(AuditEntry.action == "billing.close")).scalars().one()
    assert "new H100 nodes, pool from November" in audit.after and '"unpooled_gpu_hours": "8.000000"' in audit.after
    pdf = exports.render(session=session, period=row, fmt="pdf")
    text = subprocess.run(["pdftotext", "-layout", "-", "-"], input=pdf, capture_output=True, check=True).stdout.decode()
    assert "Unpooled GPUs" in text and "Unpooled accepted: new H100 nodes, pool from November" in text


def test_a_period_without_unpooled_gpus_closes_as_before(session):
    v = store_policy(session)
    fill_month(session, "2026-10", v.id)
    row = periods.close(session=session, period="2026-10", actor="fin")
    assert row.accept_unpooled_reason is None and row.unpooled_hours == 0
    assert platform_statement(load_view(session=session, period=row))["unpooled"]["usage"] == []


def test_api_and_page_close_with_accept_unpooled(api, fresh_engine):
    with unit_of_work(fresh_engine) as s:
        v = store_policy(s)
        fill_month(s, "2026-10", v.id)
        add_unpooled(s, v.id)
    assert api.post("/api/v1/periods/2026-10/rate").status_code == 200
    statement = api.get("/api/v1/periods/2026-10/statement").json()
    assert statement["unpooled"]["capacity_gpu_hours"] == "8.000000"
    page = api.get("/billing/2026-10", headers=HTML).text
    assert "Unpooled GPUs (unpriced)" in page and 'name="accept_unpooled"' in page
    body = problem(api.post("/api/v1/periods/2026-10/close"), 409)
    assert "accept_unpooled" in body["detail"]
    body = problem(api.post("/api/v1/periods/2026-10/close", json={"accept_unpooled": True}), 422)
    assert body["errors"][0]["path"] == "reason"
    refused = api.post("/billing/2026-10/close", headers=HTML, data={})
    assert refused.status_code == 409 and "on nodes no pool names" in refused.text and 'id="accept_unpooled-error"' in refused.text
    confirm = api.post("/billing/2026-10/close", headers=HTML, data={"accept_unpooled": "true", "reason": "lab nodes"})
    assert confirm.status_code == 200 and "the unpooled GPUs" in confirm.text
    closed = api.post("/billing/2026-10/close", headers=HTML,
                      data={"accept_unpooled": "true", "reason": "lab nodes", "confirmed": "true"})
    assert closed.status_code == 303
    page = api.get("/billing/2026-10", headers=HTML).text
    assert "Closed with unpooled GPUs accepted: lab nodes" in page
    listed = {p["period"]: p for p in api.get("/api/v1/periods").json()["items"]}
    assert listed["2026-10"]["accept_unpooled_reason"] == "lab nodes"


def test_examples_policy_rates_the_built_in_simulator(session):
    """examples/policy.yaml names only the A100 nodes: the simulator's H100 and RTX 4090 nodes go unpooled."""
    store_policy(session, parse_document(EXAMPLE.read_text()))
    sim = Simulator(gpus=32)
    start = OCT1
    report = ingest_hours(session=session, source=sim.source(), start=start, end=start + timedelta(hours=2),
                          scrape_interval_s=30, now=start + timedelta(days=1))
    assert len(report.ok) == 2, report
    row = periods.rate(session=session, period="2026-10", actor="fin")
    assert row.unpooled_hours == 2 and row.unpooled_gpus == 16  # one H100 node and the RTX 4090 box
    view = load_view(session=session, period=row)
    assert {l.pool for l in view.lines} == {"mixed-a100"}
    assert any(l.kind == LineKind.USAGE_BUSY or l.kind == LineKind.USAGE_DARK for l in view.lines)
    assert platform_statement(view)["unpooled"]["used_gpu_hours"] > 0


def test_cli_close_needs_accept_unpooled_and_a_reason(fresh_engine):
    from tests.support.billing import run_cli as run

    url = fresh_engine.url.render_as_string(hide_password=False)
    with unit_of_work(fresh_engine) as s:
        v = store_policy(s)
        fill_month(s, "2026-10", v.id)
        add_unpooled(s, v.id)
    rated = run(url, "rate", "--period", "2026-10")
    assert rated.returncode == 0, rated.stderr
    refused = run(url, "close", "--period", "2026-10")
    assert refused.returncode == 3 and "--accept-unpooled" in refused.stderr and "Traceback" not in refused.stderr
    no_reason = run(url, "close", "--period", "2026-10", "--accept-unpooled")
    assert no_reason.returncode == 2 and "reason" in no_reason.stderr
    closed = run(url, "close", "--period", "2026-10", "--accept-unpooled", "--reason", "lab nodes")
    assert closed.returncode == 0, closed.stderr
    with unit_of_work(fresh_engine) as s:
        assert periods.get_period(session=s, month="2026-10").accept_unpooled_reason == "lab nodes"


def test_unpooled_is_not_a_pool_name():
    from app.policy.validation import validate

    doc = policy_doc(pools=[{"name": "unpooled", "nodes": ["gpu-a100-01"], "reserved_fraction": "0.30",
                             "reservations": {"search": 1}}], sla=[])
    errors = [e for e in validate(doc) if e.path == "pools[unpooled].name" and e.severity == "error"]
    assert errors and "reserved" in errors[0].message
