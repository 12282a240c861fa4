"""The monthly report: figures equal the period page, invoices and statement; HTML, PDF and JSON; who may read it."""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from app.billing import periods
from app.billing.invoices import load_view, platform_statement, tenant_invoice
from app.billing.report import assemble_report, read_inputs, read_report
from app.billing.totals import tenant_totals
from tests.support.billing import add_hour, policy_doc, store_policy
from tests.support.policies import SPEC_TENANTS
from tests.support.routes import VIEWER, VISION_MEMBER

HTML = {"accept": "text/html"}
# A fourth tenant, billed the most in October: the top of the ranking is not the alphabet's.
BIG = ("big-lab", "training", False, 5400)
OCTOBER_USAGE = [("search", "inference", False, 1800), ("vision", "training", False, 2520),
                 ("vision", "training", True, 1800), ("etl", "preprocessing", False, 360), BIG]


@pytest.fixture
def months(session):
    """August and September priced from rollups (not rated), October rated with SLA breaches."""
    tenants = [{**t, "namespaces": list(t["namespaces"])} for t in SPEC_TENANTS]
    tenants.append({"name": "big-lab", "department": "research", "namespaces": ["big-lab"], "class": "training"})
    v = store_policy(session, policy_doc(tenants=tenants))
    for month, n in ((8, 1), (9, 2)):
        for h in range(n):
            add_hour(session, hour=datetime(2026, month, 1, h, tzinfo=UTC), version=v.id, breaches=())
    oct1 = datetime(2026, 10, 1, tzinfo=UTC)
    add_hour(session, hour=oct1, version=v.id, usage=OCTOBER_USAGE, gpus=4)
    add_hour(session, hour=oct1 + timedelta(hours=1), version=v.id, usage=OCTOBER_USAGE, gpus=4, breaches=())
    return periods.rate(session=session, period="2026-10", actor="fin")


def test_figures_equal_the_invoices_statement_and_period_page(session, months):
    report = read_report(session=session, period=months)
    view = load_view(session=session, period=months)
    statement = platform_statement(view)
    totals = {t["tenant"]: t["total"] for t in tenant_totals(session=session, period=months, viewer=None)}
    assert report["invoiced_total"] == sum(totals.values())
    assert report["cost_total"] == statement["cost_total"] == report["trend"][-1]["cost"]
    assert [t["tenant"] for t in report["top_tenants"]][0] == "big-lab"
    assert [t["total"] for t in report["top_tenants"]] == sorted(totals.values(), reverse=True)
    for row in report["top_tenants"]:
        assert row["total"] == totals[row["tenant"]] == tenant_invoice(view, row["tenant"])["total"]
    invoices = [tenant_invoice(view, t) for t in view.tenants]
    assert report["sla"]["penalties_paid"] == sum(i["penalties_paid"] for i in invoices) == Decimal("1.00")
    assert report["sla"]["credits_received"] == sum(i["credits_received"] for i in invoices) == Decimal("1.00")
    assert report["sla"]["breach_minutes"] == 2
    assert report["sla"]["services"][0]["penalties"] == Decimal("1.00")
    assert report["statement"] == statement


def test_trend_months_and_dark_time(session, months):
    report = read_report(session=session, period=months)
    # Months before August hold nothing and are left out; October is the rated figure.
    assert [(m["month"], m["cost_source"]) for m in report["trend"]] == [
        ("2026-08", "computed"), ("2026-09", "computed"), ("2026-10", "rated")]
    # 2 GPUs at 1.30/h: one hour in August, two in September.
    assert [m["cost"] for m in report["trend"][:2]] == [Decimal("2.60"), Decimal("5.20")]
    # August: 1.8 of 2 GPU-hours used; October: 2 x 3.3 of 2 x 4.
    assert report["trend"][0]["utilisation"] == Decimal("0.9") and report["trend"][2]["utilisation"] == Decimal("0.825")
    dark = report["dark_time"]
    # Each October hour: 1800 of 6480 + 5400 GPU-seconds used ran in dark time.
    assert dark["used_gpu_hours"] == Decimal("6.6") and dark["dark_gpu_hours"] == Decimal("1")
    assert dark["gpu_hours_share"] == (Decimal(1) / Decimal("6.6")).quantize(Decimal("0.000001"))
    assert dark["dark_charges"] > 0 and dark["cost_share"] == (dark["dark_charges"] / dark["charges"]).quantize(
        Decimal("0.000001"))


def test_assembly_is_pure(session, months):
    inputs = read_inputs(session=session, period=months)
    assert assemble_report(inputs) == assemble_report(inputs) == read_report(session=session, period=months)
    assert len(assemble_report(inputs, top=2)["top_tenants"]) == 2


def test_json_route_is_typed_and_staff_only(session, months, session_api):
    body = session_api.get("/api/v1/periods/2026-10/report").json()
    assert body["invoiced_total"] == str(read_report(session=session, period=months)["invoiced_total"])
    assert body["top_tenants"][0]["tenant"] == "big-lab" and body["trend"][-1]["cost_source"] == "rated"
    assert session_api.as_(VIEWER).get("/api/v1/periods/2026-10/report").status_code == 200
    assert session_api.as_(VISION_MEMBER).get("/api/v1/periods/2026-10/report").status_code == 403
    assert session_api.as_(VISION_MEMBER).get("/billing/2026-10/report", headers=HTML).status_code == 403
    assert session_api.as_(VISION_MEMBER).get("/billing/2026-10/report.pdf").status_code == 403
    assert session_api.as_(VIEWER).get("/api/v1/periods/2026-09/report").status_code == 404  # never rated


def test_html_page_shows_the_figures_with_the_page_formats(session, months, session_api):
    report = read_report(session=session, period=months)
    page = session_api.get("/billing/2026-10/report", headers=HTML)
    assert page.status_code == 200, page.text
    text = page.text
    assert f'<strong id="invoiced-total">{report["invoiced_total"]:,.2f} USD</strong>' in text
    assert f'<strong id="cost-total">{report["cost_total"]:,.2f} USD</strong>' in text
    for name in ("big-lab", "vision", "search", "etl", "2026-08", "2026-09"):
        assert name in text
    assert "82.5%" in text and "90.0%" in text  # utilisation, rounded once by `pct`
    assert 'data-dash-chart="report-cost-data"' in text and 'data-dash-chart="report-utilisation-data"' in text
    # The period page links to it (staff see the statement, and the link beside it).
    assert 'href="/billing/2026-10/report"' in session_api.get("/billing/2026-10", headers=HTML).text


def test_pdf_holds_the_top_tenants_and_totals(session, months, session_api, tmp_path):
    report = read_report(session=session, period=months)
    response = session_api.get("/billing/2026-10/report.pdf")
    assert response.status_code == 200 and response.headers["content-type"] == "application/pdf"
    (tmp_path / "report.pdf").write_bytes(response.content)
    text = subprocess.run(["pdftotext", "-layout", str(tmp_path / "report.pdf"), "-"], check=True, capture_output=True,
                          text=True).stdout
    assert "Monthly report - period 2026-10" in text
    for row in report["top_tenants"]:
        assert row["tenant"] in text and f"{row['total']:,.2f} USD" in text
    assert f"Invoiced to tenants: {report['invoiced_total']:,.2f} USD" in text
    assert f"Fleet cost C: {report['cost_total']:,.2f} USD" in text
    assert "Penalties paid: 1.00 USD" in text and "Breach minutes: 2" in text
    assert "2026-08" in text and "Conservation" in text
    # Same inputs, same bytes.
    assert session_api.get("/billing/2026-10/report.pdf").content == response.content
