"""Invoices that explain themselves (issue 12): group order, unit rates that reproduce amounts, the dark-time
discount, coverage and dates, the per-day drill-down, SLA evidence and the statement's minute reconciliation.

The oracle is SPEC section 5's worked example (each A100 1.30 per GPU-hour, dark-time multiplier 0.6,
0.50 per breach minute), two hours of it in `october`.
"""

from __future__ import annotations

import subprocess
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sqlmodel import select

from app.billing import exports, periods
from app.billing.invoice_lines import GROUPS, reproduces, unit_rate
from app.billing.invoices import invoice_line, load_view, platform_statement, tenant_invoice
from app.billing.line_days import billing_days, line_days, split_cumulative
from app.billing.sla_penalties import breach_evidence
from app.core.errors import NotFound
from app.metrics.models import PoolHourModel
from tests.support.billing import add_hour, record_gaps

OCT1 = datetime(2026, 10, 1, tzinfo=UTC)
D = Decimal


def _lines(invoice: dict) -> dict[str, dict]:
    return {l["kind"]: l for l in invoice["lines"]}


def test_lines_come_in_group_order_with_rates_from_the_worked_example(session, october):
    view = load_view(session=session, period=october)
    vision = tenant_invoice(view, "vision")
    assert [g["group"] for g in vision["groups"]] == ["usage_busy", "usage_dark", "sla"]
    assert [l["group"] for l in vision["lines"]] == ["usage_busy", "usage_dark", "sla"]
    lines = _lines(vision)
    busy, dark, penalty = lines["usage_busy"], lines["usage_dark"], lines["sla_penalty"]
    assert (busy["quantity"], busy["unit_rate"], busy["amount"]) == (D("1.4"), D("1.30"), D("1.82"))
    # dark: 1.0 GPU-hour at 1.30 x 0.6 = 0.78; undiscounted 1.30, discount 0.52
    assert (dark["quantity"], dark["unit_rate"], dark["amount"]) == (D("1"), D("0.78"), D("0.78"))
    assert (dark["dark_multiplier"], dark["undiscounted_amount"], dark["discount"]) == (D("0.6"), D("1.30"), D("0.52"))
    assert dark["undiscounted_rate"] == D("1.30")
    assert (penalty["quantity"], penalty["unit_rate"], penalty["policy_rate"], penalty["amount"]) == (
        D("2"), D("0.50"), D("0.50"), D("1.00"))
    assert penalty["evidence"] and busy["drilldown"] and dark["drilldown"] and not penalty["drilldown"]
    assert sum(l["amount"] for l in vision["lines"]) == vision["total"] == D("3.60")
    assert [g["subtotal"] for g in vision["groups"]] == [D("1.82"), D("0.78"), D("1.00")]

    search = tenant_invoice(view, "search")
    assert [g["group"] for g in search["groups"]] == ["reserved_fee", "inference_overage", "sla"]
    fee, overage, credit = (l for l in search["lines"])
    # reserved 0.3 x 2 GPUs x 2 hours = 1.2 covered GPU-hours, 0.3 x C = 0.78 an hour
    assert (fee["kind"], fee["quantity"], fee["unit_rate"], fee["amount"]) == ("reserved_fee", D("1.2"), D("1.30"), D("1.56"))
    assert overage["quantity"] == 0 and overage["unit_rate"] is None
    assert (credit["kind"], credit["quantity"], credit["unit_rate"], credit["amount"]) == (
        "sla_credit", D("2"), D("-0.50"), D("-1.00"))
    for invoice in (vision, search):
        for l in invoice["lines"]:
            assert l["unit_rate"] is None or reproduces(l["quantity"], l["unit_rate"], l["amount"], "USD"), l


def test_group_order_is_the_invoice_order():
    assert GROUPS == ("reserved_fee", "inference_overage", "usage_busy", "usage_dark", "sla", "correction")


def test_corrections_come_last(session, october):
    line = next(l for l in load_view(session=session, period=october).lines if l.account == "vision")
    record_gaps(session, "2026-10")  # the month's other hours: gaps the source could not answer
    periods.close(session=session, period="2026-10", actor="fin", accept_gaps=True, reason="two hours only")
    periods.correct(session=session, period="2026-11", line_id=line.line_id, amount="-0.10", reason="goodwill",
                    actor="fin")
    nov = periods.rate(session=session, period="2026-11", actor="fin")
    invoice = tenant_invoice(load_view(session=session, period=nov), "vision")
    assert invoice["groups"][-1]["group"] == "correction"
    assert invoice["lines"][-1]["correction"] and invoice["lines"][-1]["amount"] == D("-0.10")


@given(quantity=st.decimals(min_value=D("0.000001"), max_value=D("200000"), places=6),
       amount=st.decimals(min_value=D("-100000"), max_value=D("1000000"), places=2))
def test_unit_rate_always_reproduces_the_amount(quantity, amount):
    rate = unit_rate(quantity, amount, "USD")
    assert reproduces(quantity, rate, amount, "USD")
    assert -rate.as_tuple().exponent >= 4


def test_coverage_dates_and_status(session, october):
    invoice = tenant_invoice(load_view(session=session, period=october), "vision")
    assert invoice["coverage"] == {"hours_measured": 2, "hours_in_month": 744, "fraction": D("0.0027"), "complete": False}
    dates = invoice["billing_dates"]
    assert (dates["first_day"], dates["last_day"], dates["timezone"]) == ("2026-10-01", "2026-10-31", "UTC")
    assert (dates["start_local"], dates["end_local"]) == ("2026-10-01T00:00+00:00", "2026-11-01T00:00+00:00")
    assert (invoice["final"], invoice["status_label"], invoice["total_label"]) == (False, "draft", "Draft total, not yet due")
    record_gaps(session, "2026-10")  # the month's other hours: gaps the source could not answer
    closed = periods.close(session=session, period="2026-10", actor="fin", accept_gaps=True, reason="two hours only")
    final = tenant_invoice(load_view(session=session, period=closed), "vision")
    assert (final["final"], final["status_label"], final["total_label"]) == (True, "finalized", "Total due")


def _pdf_text(data: bytes, tmp_path) -> str:
    path = tmp_path / "invoice.pdf"
    path.write_bytes(data)
    return subprocess.run(["pdftotext", "-layout", str(path), "-"], check=True, capture_output=True, text=True).stdout


def test_pdf_says_total_due_only_once_finalized_and_shows_the_multiplier(session, october, tmp_path):
    draft = _pdf_text(exports.render_invoice(session=session, period=october, tenant="vision"), tmp_path)
    assert "Total due" not in draft and "Draft total, not yet due: 3.60 USD" in draft
    assert "DRAFT" in draft and "Status: draft" in draft
    assert "dark-time multiplier 0.6" in draft and "discount 0.52 USD" in draft and "at full rate 1.30 USD" in draft
    assert "penalty 0.50 USD per breach minute" in draft
    assert "Billing period: 2026-10-01 to 2026-10-31" in draft
    assert "Coverage: 2 of 744 hours of the month measured - PARTIAL" in draft
    # group order on paper: busy before dark before SLA
    assert draft.index("GPU use while inference is busy") < draft.index("GPU use in dark time") < draft.index("SLA penalties")
    record_gaps(session, "2026-10")  # the month's other hours: gaps the source could not answer
    closed = periods.close(session=session, period="2026-10", actor="fin", accept_gaps=True, reason="two hours only")
    final = _pdf_text(exports.render_invoice(session=session, period=closed, tenant="vision"), tmp_path)
    assert "Total due: 3.60 USD" in final and "Draft total" not in final and "DRAFT" not in final


def test_billing_days_follow_the_billing_timezone(monkeypatch, session, october):
    from app.core.settings import get_settings

    monkeypatch.setenv("CHARGEBACK_BILLING_TIMEZONE", "Asia/Shanghai")
    get_settings.cache_clear()
    try:
        days = billing_days(october)  # the stored UTC bounds of the UTC month, cut at Shanghai midnights
    finally:
        monkeypatch.delenv("CHARGEBACK_BILLING_TIMEZONE")
        get_settings.cache_clear()
    assert days[0] == (date(2026, 10, 1), OCT1, datetime(2026, 10, 1, 16, tzinfo=UTC))
    assert days[-1][0] == date(2026, 11, 1) and days[-1][2] == datetime(2026, 11, 1, tzinfo=UTC)
    assert all(a[2] == b[1] for a, b in zip(days, days[1:]))


def test_cumulative_rounding_adds_up_to_the_rounded_total():
    exact = [(date(2026, 10, d), D("0.3333333333"), D("0.4333333333")) for d in range(1, 4)]
    rows = split_cumulative(exact, "USD")
    assert [r["amount"] for r in rows] == [D("0.43"), D("0.44"), D("0.43")]
    assert sum(r["amount"] for r in rows) == D("1.30") and sum(r["quantity"] for r in rows) == D("1.000000")
    assert all(reproduces(r["quantity"], r["unit_rate"], r["amount"], "USD") for r in rows)


def test_mixed_rate_line_drills_down_to_days_that_add_up(session, october):
    # a third hour on 2 October with a measured energy reading: that day's rate is not 1.30
    from app.policy.models import PolicyVersion

    version = session.exec(select(PolicyVersion.id)).first()
    hour = OCT1 + timedelta(days=1, hours=5)
    add_hour(session, hour=hour, version=version, breaches=())
    model = session.exec(select(PoolHourModel).where(PoolHourModel.hour == hour)).one()
    model.measured_gpus, model.measured_kwh = 2, D("1.234567")
    session.add(model)
    session.flush()
    rated = periods.rate(session=session, period="2026-10", actor="fin")
    view = load_view(session=session, period=rated)
    invoice = tenant_invoice(view, "vision")
    for kind in ("usage_busy", "usage_dark"):
        shown = _lines(invoice)[kind]
        days = line_days(session=session, period=rated, line=invoice_line(view, "vision", shown["line_id"]))
        assert days["adds_up"] and [r["day"] for r in days["days"]] == [date(2026, 10, 1), date(2026, 10, 2)]
        assert sum(r["amount"] for r in days["days"]) == shown["amount"]
        assert sum(r["quantity"] for r in days["days"]) == shown["quantity"]
        assert days["days"][0]["unit_rate"] != days["days"][1]["unit_rate"]  # mixed rates
        for r in days["days"]:
            assert reproduces(r["quantity"], r["unit_rate"], r["amount"], "USD")
    busy = line_days(session=session, period=rated, line=invoice_line(view, "vision", _lines(invoice)["usage_busy"]["line_id"]))
    # 2 Oct: 0.7 GPU-h x (2 x 1.20 + 1.234567 kWh x 1.25 x 0.20) / 2 GPUs = 0.948024... -> 0.95
    assert busy["days"][0]["amount"] == D("1.82") and busy["days"][1]["amount"] == D("0.95")
    penalty = _lines(invoice)["sla_penalty"]
    with pytest.raises(NotFound):
        line_days(session=session, period=rated, line=invoice_line(view, "vision", penalty["line_id"]))
    with pytest.raises(NotFound):
        invoice_line(view, "vision", _lines(tenant_invoice(view, "search"))["reserved_fee"]["line_id"])


def test_drilldown_says_when_the_hours_changed_after_rating(session, october):
    view = load_view(session=session, period=october)
    line = invoice_line(view, "vision", _lines(tenant_invoice(view, "vision"))["usage_busy"]["line_id"])
    from app.policy.models import PolicyVersion

    add_hour(session, hour=OCT1 + timedelta(hours=2), version=session.exec(select(PolicyVersion.id)).first(), breaches=())
    days = line_days(session=session, period=october, line=line)
    assert not days["adds_up"] and days["amount"] == D("2.73")


def test_evidence_lists_only_the_tenants_own_seconds(session):
    from tests.support.billing import store_policy

    v = store_policy(session)
    add_hour(session, hour=OCT1, version=v.id,
             breaches=(("search-chat", "search", 2, (("vision", 60), ("etl", 30))),))
    add_hour(session, hour=OCT1 + timedelta(hours=1), version=v.id,
             breaches=(("search-chat", "search", 1, (("vision", 45),)),))
    rated = periods.rate(session=session, period="2026-10", actor="fin")
    e = breach_evidence(session=session, period=rated, tenant="vision", service="search-chat")
    assert e["minute_count"] == 3 and e["gpu_seconds"] == D("165") and e["alone_minutes"] == 1
    assert [(m.gpu_seconds, m.shared) for m in e["minutes"]] == [(D(60), True), (D(60), True), (D(45), False)]
    assert e["share_minutes"] == D("2.333333")  # 2 x 60/90 + 1, as rated (6 decimals per line)
    assert e["amount"] == D("1.17")
    assert [t["p99_ms"] for t in e["terms"]] == [300]
    assert e["days"] == [{"day": "2026-10-01", "minutes": 3, "alone": 1, "gpu_seconds": D("165")}]
    with pytest.raises(NotFound):
        breach_evidence(session=session, period=rated, tenant="search", service="search-chat")


def test_statement_reconciles_breach_minutes_with_credits(session):
    from tests.support.billing import store_policy

    v = store_policy(session)
    add_hour(session, hour=OCT1, version=v.id,
             breaches=(("search-chat", "search", 2, (("vision", 60),)),))
    # a third breach minute with nobody co-located: unattributed
    add_hour(session, hour=OCT1 + timedelta(hours=1), version=v.id, breaches=(("search-chat", "search", 1, ()),))
    rated = periods.rate(session=session, period="2026-10", actor="fin")
    [row] = platform_statement(load_view(session=session, period=rated))["sla_minutes"]
    assert row == {"service": "search-chat", "pool": "mixed-a100", "breach_minutes": 3, "credited_minutes": 2,
                   "unattributed_minutes": 1, "not_rated_minutes": 0}
    # an hour ingested after rating: its minutes are not in the rated figures until the period is rated again
    add_hour(session, hour=OCT1 + timedelta(hours=2), version=v.id)
    [row] = platform_statement(load_view(session=session, period=rated))["sla_minutes"]
    assert (row["breach_minutes"], row["not_rated_minutes"]) == (5, 2)
