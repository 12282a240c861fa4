"""End to end on PostgreSQL: simulator history -> real Prometheus -> ingest -> rate -> close -> exports.

The same hours are also ingested straight from the simulator into a second database: both paths
must give byte-identical exports, and the invoices' GPU-hours must equal the simulator's truth.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import subprocess
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from sqlalchemy import func, select

from app.billing import exports, periods
from app.billing.invoices import load_view, platform_statement, tenant_invoice
from app.billing.period import parse_period
from app.billing.types import PLATFORM
from app.core.db import make_engine, unit_of_work
from app.metrics.ingest import ingest_hours
from app.metrics.models import IngestHour
from app.metrics.prometheus_source import PrometheusSource
from app.metrics.simulator import Simulator
from app.policy.service import import_version
from tests.support.billing import issue_documents
from tests.support.databases import drop_postgres_database, migrated, new_postgres_database
from tests.support.prometheus import PrometheusServer

pytestmark = [pytest.mark.postgres, pytest.mark.prometheus]

START = datetime(2026, 11, 20, tzinfo=UTC)  # the Asia/Shanghai peak (SLA breaches) starts at 01:00 UTC
HOURS = 6
MONTH = "2026-11"


@pytest.fixture(scope="module")
def sim() -> Simulator:
    return Simulator(seed=42, gpus=32, scrape_interval_s=30)


@pytest.fixture(scope="module")
def prometheus(sim, tmp_path_factory):
    with PrometheusServer.from_simulator(tmp_path_factory.mktemp("prom-e2e"), sim, START,
                                         START + timedelta(hours=HOURS)) as server:
        yield server


def _pg_engine():
    url = migrated(new_postgres_database("cbe2e"))
    return url, make_engine(url)


def _ingest_and_close(engine, sim, source) -> dict:
    with unit_of_work(engine) as s:
        import_version(session=s, document=sim.policy(), actor="e2e", effective_from=START - timedelta(days=1))
    with unit_of_work(engine) as s:
        report = ingest_hours(session=s, source=source, start=START, end=START + timedelta(hours=HOURS),
                              scrape_interval_s=30)
        assert len(report.ok) == HOURS and not report.gaps
    with unit_of_work(engine) as s:
        periods.rate(session=s, period=MONTH, actor="e2e")
    with pytest.raises(Exception) as refused, unit_of_work(engine) as s:
        periods.close(session=s, period=MONTH, actor="e2e", accept_gaps=True, reason="hours never tried")
    assert getattr(refused.value, "status", None) == 409 and "never ingested" in refused.value.detail
    # The month's other hours, tried against a Prometheus nobody listens at: gaps, which a close can accept.
    month_start, month_end = parse_period(MONTH).start, parse_period(MONTH).end
    unreachable = PrometheusSource("http://127.0.0.1:9", scrape_interval_s=30, timeout_s=5)
    for start, end in ((month_start, START), (START + timedelta(hours=HOURS), month_end)):
        with unit_of_work(engine) as s:
            tried = ingest_hours(session=s, source=unreachable, start=start, end=end, scrape_interval_s=30)
            assert not tried.ok and len(tried.gaps) == (end - start) // timedelta(hours=1)
    with unit_of_work(engine) as s:
        row = periods.close(session=s, period=MONTH, actor="e2e", accept_gaps=True,
                            reason=f"end-to-end test: only {HOURS} hours of history")
        assert row.status == "finalized" and row.hours_ok == HOURS
    issue_documents(engine, MONTH)  # the worker's issuing step
    with unit_of_work(engine) as s:
        row = periods.get_period(session=s, month=MONTH)
        out = {fmt: exports.render(session=s, period=row, fmt=fmt) for fmt in exports.FORMATS}
        out["hashes"] = {"csv": row.csv_sha256, "focus": row.focus_sha256, "pdf": row.pdf_sha256}
        view = load_view(session=s, period=row)
        out["statement"] = platform_statement(view)
        out["invoices"] = {t: tenant_invoice(view, t) for t in view.tenants}
        out["ingested"] = s.execute(select(func.count()).select_from(IngestHour)).scalar()
    return out


def test_simulator_prometheus_ingest_rate_close_export(sim, prometheus, tmp_path):
    via_prom_url, via_prom = _pg_engine()
    direct_url, direct = _pg_engine()
    try:
        got = _ingest_and_close(via_prom, sim, PrometheusSource(prometheus.url, scrape_interval_s=30, timeout_s=60))
        same = _ingest_and_close(direct, sim, sim.source())
    finally:
        via_prom.dispose()
        direct.dispose()
        drop_postgres_database(via_prom_url)
        drop_postgres_database(direct_url)

    # the stored hashes are those of the exports, and both ingestion paths bill identically
    for fmt in exports.FORMATS:
        assert hashlib.sha256(got[fmt]).hexdigest() == got["hashes"][fmt]
        assert got[fmt] == same[fmt], fmt

    # invoices' GPU-hours equal the simulator's ground truth, tenant by tenant
    truth = sim.truth(START, START + timedelta(hours=HOURS))
    expected: dict[str, Decimal] = defaultdict(Decimal)
    for (_hour, _pool, tenant, _klass, _dark), seconds in truth.usage.items():
        expected[tenant] += Decimal(seconds)
    billed_tenants = {t for t in expected if t != "unallocated"}
    assert "unallocated" in expected and "unallocated" not in got["invoices"]  # on the statement instead
    assert billed_tenants and billed_tenants <= set(got["invoices"])  # plus reservations held without use
    for tenant, invoice in got["invoices"].items():
        assert abs(invoice["gpu_hours_total"] * 3600 - expected.get(tenant, Decimal(0))) < Decimal("0.01"), tenant

    statement = got["statement"]
    assert statement["conserved"] and statement["cost_total"] > 0
    assert abs(statement["unallocated"]["gpu_hours"] * 3600 - expected["unallocated"]) < Decimal("0.01")
    assert statement["accept_gaps_reason"].startswith("end-to-end test")
    assert len(statement["gap_hours"]) == statement["hours_expected"] - HOURS and not statement["missing_hours"]
    penalties = sum((i["penalties_paid"] for i in got["invoices"].values()), Decimal(0))
    credits = sum((i["credits_received"] for i in got["invoices"].values()), Decimal(0))
    platform_penalties = sum((l["amount"] for l in statement["platform_lines"] if l["kind"] == "sla_penalty"), Decimal(0))
    assert truth.breaches and penalties + platform_penalties == credits > 0  # transfers net to zero

    # FOCUS, column by column on every row
    rows = list(csv.DictReader(io.StringIO(got["focus"].decode())))
    assert {r["SubAccountId"] for r in rows} == set(got["invoices"]) | {PLATFORM}
    for r in rows:
        assert r["BillingPeriodStart"] == "2026-11-01T00:00:00Z" and r["BillingPeriodEnd"] == "2026-12-01T00:00:00Z"
        assert START.strftime("%Y-%m-%dT%H:%M:%SZ") <= r["ChargePeriodStart"] < r["ChargePeriodEnd"]
        assert r["ChargePeriodEnd"] <= (START + timedelta(hours=HOURS)).strftime("%Y-%m-%dT%H:%M:%SZ")
        assert r["ChargeCategory"] in {"Usage", "Adjustment", "Credit"} and r["ChargeClass"] == ""
        assert r["BilledCost"] == r["EffectiveCost"] == r["ContractedCost"]
        assert Decimal(r["ListCost"]) >= Decimal(r["BilledCost"]) or r["ChargeCategory"] != "Usage"
        assert r["BillingCurrency"] == "USD" and r["ServiceCategory"] == "AI and Machine Learning"
        assert r["ResourceId"] == json.loads(r["Tags"])["x_pool"]
        assert r["ConsumedQuantity"] == (r["PricingQuantity"] if r["ChargeCategory"] == "Usage" else "")
    assert sum(Decimal(r["BilledCost"]) for r in rows) == statement["cost_total"]

    # the PDF reads back as text
    pdf = tmp_path / "e2e.pdf"
    pdf.write_bytes(got["pdf"])
    text = subprocess.run(["pdftotext", "-layout", str(pdf), "-"], check=True, capture_output=True, text=True).stdout
    assert f"GPU chargeback - period {MONTH}" in text and "Status: finalized" in text
    for tenant, invoice in got["invoices"].items():
        assert f"Invoice {MONTH} - tenant {tenant}" in text
        assert f"Total due: {invoice['total']:,.2f} USD" in text
    assert "Gaps accepted: end-to-end test" in text
