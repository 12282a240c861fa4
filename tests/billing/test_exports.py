"""Exports: CSV, FOCUS 1.2 (column by column) and PDF (read back with pdftotext); reproducible bytes."""

from __future__ import annotations

import csv
import io
import json
import subprocess
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from app.billing import exports, periods
from app.billing.invoices import load_view
from app.billing.types import LineKind
from app.core.errors import Invalid
from tests.support.billing import add_hour, fill_month, store_policy

OCT1 = datetime(2026, 10, 1, tzinfo=UTC)
D = Decimal


def _rows(data: bytes) -> list[dict]:
    return list(csv.DictReader(io.StringIO(data.decode("utf-8"))))


def test_rerating_unchanged_inputs_gives_identical_bytes(session, october):
    first = {fmt: exports.render(session=session, period=october, fmt=fmt) for fmt in exports.FORMATS}
    rerated = periods.rate(session=session, period="2026-10", actor="someone-else")
    assert rerated.revision == 2
    second = {fmt: exports.render(session=session, period=rerated, fmt=fmt) for fmt in exports.FORMATS}
    assert first == second
    assert first["pdf"].startswith(b"%PDF")
    # and the bytes do follow the inputs
    add_hour(session, hour=OCT1 + timedelta(hours=2), version=_version(session), breaches=())
    periods.rate(session=session, period="2026-10", actor="fin")
    assert exports.render(session=session, period=rerated, fmt="csv") != first["csv"]


def _version(session) -> int:
    from app.policy.service import latest_version

    return latest_version(session=session).id


def test_csv_has_one_row_per_line(session, october):
    view = load_view(session=session, period=october)
    rows = _rows(exports.render(session=session, period=october, fmt="csv"))
    assert len(rows) == len(view.lines)
    assert [r["line_id"] for r in rows] == [l.line_id for l in view.lines]
    vision_busy = next(r for r in rows if r["account"] == "vision" and r["kind"] == LineKind.USAGE_BUSY)
    assert vision_busy["amount"] == "1.82" and vision_busy["quantity"] == "1.400000" and vision_busy["unit"] == "GPU-hour"
    assert vision_busy["charge_start"] == "2026-10-01T00:00:00Z" and vision_busy["charge_end"] == "2026-10-01T02:00:00Z"
    assert vision_busy["department"] == "research" and vision_busy["currency"] == "USD"
    # two hours: search 2 x 0.78 - 1.00, vision 2 x 1.30 + 1.00, etl 2 x 0.13
    assert sum(D(r["amount"]) for r in rows if r["account"] != "platform") == D("4.42")


def test_focus_columns_one_by_one(session, october):
    rows = _rows(exports.render(session=session, period=october, fmt="focus"))
    header = list(rows[0].keys())
    mandatory = [
        "BilledCost", "BillingAccountId", "BillingAccountName", "BillingCurrency", "BillingPeriodEnd",
        "BillingPeriodStart", "ChargeCategory", "ChargeClass", "ChargeDescription", "ChargePeriodEnd",
        "ChargePeriodStart", "ContractedCost", "EffectiveCost", "InvoiceIssuerName", "ListCost", "PricingQuantity",
        "PricingUnit", "ProviderName", "PublisherName", "ServiceCategory", "ServiceName",
    ]
    for column in mandatory + ["ConsumedQuantity", "ConsumedUnit", "SubAccountId", "SubAccountName", "ResourceId", "Tags"]:
        assert column in header, column
    assert all(c.startswith("x_") for c in header if c not in exports.FOCUS_MANDATORY + exports.FOCUS_OPTIONAL)

    def row(account, kind):
        return next(r for r in rows if r["SubAccountId"] == account and json.loads(r["Tags"])["x_kind"] == kind)

    busy = row("vision", LineKind.USAGE_BUSY)
    assert busy["BilledCost"] == "1.82"
    assert busy["EffectiveCost"] == "1.82"
    assert busy["ContractedCost"] == "1.82"
    assert busy["ListCost"] == "1.82"
    assert busy["BillingAccountId"] == "research" and busy["BillingAccountName"] == "research"
    assert busy["BillingCurrency"] == "USD"
    assert busy["BillingPeriodStart"] == "2026-10-01T00:00:00Z"
    assert busy["BillingPeriodEnd"] == "2026-11-01T00:00:00Z"  # exclusive
    assert busy["ChargePeriodStart"] == "2026-10-01T00:00:00Z"
    assert busy["ChargePeriodEnd"] == "2026-10-01T02:00:00Z"  # exclusive: the hour after the last one
    assert busy["ChargeCategory"] == "Usage"
    assert busy["ChargeClass"] == ""
    assert "busy" in busy["ChargeDescription"] and "mixed-a100" in busy["ChargeDescription"]
    assert busy["InvoiceIssuerName"] == busy["ProviderName"] == busy["PublisherName"] == "GPU Platform"
    assert busy["PricingQuantity"] == "1.400000" and busy["PricingUnit"] == "GPU-Hours"
    assert busy["ConsumedQuantity"] == "1.400000" and busy["ConsumedUnit"] == "GPU-Hours"
    assert busy["ServiceCategory"] == "AI and Machine Learning"
    assert busy["ServiceName"] == "GPU Co-location"
    assert busy["SubAccountId"] == busy["SubAccountName"] == "vision"
    assert busy["ResourceId"] == "mixed-a100"
    assert json.loads(busy["Tags"]) == {
        "x_class": "training", "x_department": "research", "x_kind": "usage_busy",
        "x_policy_version": str(_version(session)), "x_pool": "mixed-a100",
    }
    assert busy["InvoiceId"] == "2026-10/vision"

    dark = row("vision", LineKind.USAGE_DARK)
    assert dark["BilledCost"] == "0.78" and dark["ListCost"] == "1.30"  # list = before the 0.6 dark multiplier

    penalty = row("vision", LineKind.SLA_PENALTY)
    assert penalty["ChargeCategory"] == "Adjustment" and penalty["BilledCost"] == "1.00"
    assert penalty["PricingUnit"] == "Breach-Minutes" and penalty["ConsumedQuantity"] == ""
    credit = row("search", LineKind.SLA_CREDIT)
    assert credit["ChargeCategory"] == "Credit" and credit["BilledCost"] == "-1.00"
    assert json.loads(credit["Tags"])["x_service"] == "search-chat"
    idle = row("platform", LineKind.IDLE)
    assert idle["ChargeCategory"] == "Adjustment" and idle["SubAccountType"] == "Platform"
    assert idle["InvoiceId"] == ""  # no invoice carries the platform balance (InvoiceId-C-004-C)

    # every mandatory non-nullable column is filled on every row
    for r in rows:
        for column in mandatory:
            if column != "ChargeClass":
                assert r[column] != "", (column, r["x_LineId"])
    assert sum(D(r["BilledCost"]) for r in rows) == sum(load_view(session=session, period=october).costs.values())


def test_focus_marks_corrections(session):
    v = store_policy(session)
    fill_month(session, "2026-09", v.id)
    sept = periods.close(session=session, period="2026-09", actor="fin")
    target = next(l for l in load_view(session=session, period=sept).lines if l.kind == LineKind.RESERVED_FEE)
    periods.correct(session=session, period="2026-10", line_id=target.line_id, amount="-3.50", reason="reservation started late", actor="fin")
    october = periods.rate(session=session, period="2026-10", actor="fin")
    rows = _rows(exports.render(session=session, period=october, fmt="focus"))
    [fix] = [r for r in rows if r["ChargeClass"]]
    assert fix["ChargeClass"] == "Correction"
    assert fix["ChargeCategory"] == "Usage" and fix["BilledCost"] == "-3.50"
    assert fix["x_Corrects"] == target.line_id
    assert fix["BillingPeriodStart"] == "2026-10-01T00:00:00Z"
    assert fix["ChargePeriodStart"] == "2026-09-01T00:00:00Z"  # the charge it corrects
    assert "reservation started late" in fix["ChargeDescription"]
    assert fix["PricingCategory"] == ""


def test_pdf_reads_back_with_pdftotext(session, october, tmp_path):
    pdf = tmp_path / "october.pdf"
    pdf.write_bytes(exports.render(session=session, period=october, fmt="pdf"))
    text = subprocess.run(["pdftotext", "-layout", str(pdf), "-"], check=True, capture_output=True, text=True).stdout
    assert "GPU chargeback - period 2026-10" in text
    assert "Platform statement - 2026-10" in text
    assert "Invoice 2026-10 - tenant vision" in text
    assert "Invoice 2026-10 - tenant search" in text
    assert "Draft total, not yet due: 3.60 USD" in text  # vision: 1.82 + 0.78 + 1.00 penalty
    assert "Total due" not in text  # a draft is not due
    assert "Penalties paid: 1.00 USD" in text
    assert "Credits received: 1.00 USD" in text
    assert "conserved" in text
    info = subprocess.run(["pdfinfo", str(pdf)], check=True, capture_output=True, text=True).stdout
    assert "2026" in info and "Title:" in info


def test_unknown_format(session, october):
    with pytest.raises(Invalid) as err:
        exports.render(session=session, period=october, fmt="xlsx")
    assert err.value.errors[0].path == "format"


def test_free_text_cannot_start_a_formula(session):
    v = store_policy(session)
    fill_month(session, "2026-09", v.id)
    sept = periods.close(session=session, period="2026-09", actor="fin")
    target = load_view(session=session, period=sept).lines[0]
    periods.correct(session=session, period="2026-10", line_id=target.line_id, amount="1", reason="=HYPERLINK(\"x\")", actor="fin")
    october = periods.rate(session=session, period="2026-10", actor="fin")
    [row] = [r for r in _rows(exports.render(session=session, period=october, fmt="csv")) if r["correction"] == "true"]
    assert row["reason"] == "'=HYPERLINK(\"x\")"
