"""Periods: rate (draft), close (finalize), gaps, corrections, policy changes mid-month — both backends."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from sqlalchemy import select

from app.billing import exports, periods
from app.billing.invoices import load_view, platform_statement, tenant_invoice
from app.billing.models import ChargeLineRecord
from app.billing.pricing import MissingPrice
from app.billing.types import PLATFORM, LineKind
from app.core.audit import AuditEntry
from app.core.errors import Conflict, Invalid, NotFound
from app.core.events import events_after
from tests.support.billing import A100, add_hour, fill_month, issue_documents, policy_doc, record_gaps, store_policy

OCT1 = datetime(2026, 10, 1, tzinfo=UTC)
D = Decimal


def amounts(session, period) -> dict[tuple[str, str], Decimal]:
    view = load_view(session=session, period=period)
    return {(l.account, l.kind): l.amount for l in view.lines}


def test_worked_example_to_the_cent(session):
    v = store_policy(session)
    add_hour(session, hour=OCT1, version=v.id)
    row = periods.rate(session=session, period="2026-10", actor="fin")
    assert row.status == "rated" and row.revision == 1
    got = amounts(session, row)
    assert got[("search", LineKind.RESERVED_FEE)] == D("0.78")
    assert got[("search", LineKind.INFERENCE_OVERAGE)] == D("0.00")
    assert got[("vision", LineKind.USAGE_BUSY)] == D("0.91")
    assert got[("vision", LineKind.USAGE_DARK)] == D("0.39")
    assert got[("etl", LineKind.USAGE_BUSY)] == D("0.13")
    assert got[("vision", LineKind.SLA_PENALTY)] == D("1.00")
    assert got[("search", LineKind.SLA_CREDIT)] == D("-1.00")
    assert got[(PLATFORM, LineKind.IDLE)] == D("0.26")
    assert got[(PLATFORM, LineKind.DARK_DISCOUNT)] == D("0.26")
    assert got[(PLATFORM, LineKind.RESERVED_UNUSED)] == D("-0.13")

    view = load_view(session=session, period=row)
    statement = platform_statement(view)
    assert statement["conserved"] and statement["cost_total"] == D("2.60")
    assert statement["pools"][0]["charges"] + statement["pools"][0]["balance"] == D("2.60")
    assert statement["balance_total"] == D("0.39")
    vision = tenant_invoice(view, "vision")
    assert vision["department"] == "research"
    assert vision["penalties_paid"] == D("1.00") and vision["credits_received"] == D("0")
    assert vision["total"] == D("2.30")
    assert [(g["pool"], g["class"], g["busy"], g["dark"]) for g in vision["gpu_hours"]] == [
        ("mixed-a100", "training", D("0.7"), D("0.5"))
    ]
    assert vision["efficiency"] == pytest.approx(0.5)
    search = tenant_invoice(view, "search")
    assert search["credits_received"] == D("1.00") and search["total"] == D("-0.22")
    with pytest.raises(NotFound):
        tenant_invoice(view, "nobody")


def test_line_ids_are_stable_and_named(session):
    v = store_policy(session)
    add_hour(session, hour=OCT1, version=v.id)
    row = periods.rate(session=session, period="2026-10", actor="fin")
    ids = [l.line_id for l in load_view(session=session, period=row).lines]
    assert f"2026-10/search/mixed-a100/reserved_fee/inference/v{v.id}/1" in ids
    assert f"2026-10/vision/mixed-a100/sla_penalty/training/v{v.id}/search-chat/1" in ids
    periods.rate(session=session, period="2026-10", actor="fin")
    assert [l.line_id for l in load_view(session=session, period=row).lines] == ids


def test_lines_stored_a_batch_at_a_time_are_the_lines_and_the_hash_of_one_insert(session, monkeypatch):
    v = store_policy(session)
    add_hour(session, hour=OCT1, version=v.id)
    add_hour(session, hour=OCT1 + timedelta(hours=5), version=v.id)

    def rated() -> tuple[dict, list[tuple[str, Decimal]]]:
        row = periods.rate(session=session, period="2026-10", actor="fin")
        event = events_after(session=session, after=None, types=("period.rated",))[-1]
        stored = session.execute(select(ChargeLineRecord.line_id, ChargeLineRecord.amount)
                                 .where(ChargeLineRecord.period_id == row.id).order_by(ChargeLineRecord.id)).all()
        return {k: event.data[k] for k in ("lines", "lines_sha256", "total", "tenants")}, [tuple(r) for r in stored]

    one_insert, rows = rated()
    monkeypatch.setattr(periods, "LINE_BATCH", 3)
    batched, batched_rows = rated()
    assert len(rows) > 3 * 3 and batched_rows == rows  # several batches, the same rows in the same order
    assert batched == one_insert
    # The hash is over every stored line, in the order they were stored, and the totals are the rows' sums.
    assert one_insert["lines"] == len(rows)
    assert one_insert["lines_sha256"] == hashlib.sha256("".join(f"{i}\t{a}\n" for i, a in rows).encode()).hexdigest()
    by_tenant: dict[str, Decimal] = {}
    for line_id, amount in rows:
        account = line_id.split("/")[1]
        if account != PLATFORM:
            by_tenant[account] = by_tenant.get(account, D(0)) + amount
    assert one_insert["tenants"] == {t: str(a) for t, a in sorted(by_tenant.items())}
    assert D(one_insert["total"]) == sum(by_tenant.values())


def test_rerate_replaces_the_draft(session):
    v = store_policy(session)
    add_hour(session, hour=OCT1, version=v.id)
    row = periods.rate(session=session, period="2026-10", actor="fin")
    first = amounts(session, row)
    add_hour(session, hour=OCT1 + timedelta(hours=1), version=v.id, breaches=())
    row = periods.rate(session=session, period="2026-10", actor="fin")
    second = amounts(session, row)
    assert row.revision == 2
    assert second[("vision", LineKind.USAGE_BUSY)] == 2 * first[("vision", LineKind.USAGE_BUSY)]
    count = session.execute(select(ChargeLineRecord).where(ChargeLineRecord.period_id == row.id)).scalars().all()
    assert len(count) == len(first)  # replaced, not appended
    actions = session.execute(select(AuditEntry.action).where(AuditEntry.entity_id == "2026-10")).scalars().all()
    assert actions.count("billing.rate") == 2


def test_close_refuses_hours_not_ingested(session):
    v = store_policy(session)
    add_hour(session, hour=OCT1, version=v.id)
    periods.rate(session=session, period="2026-10", actor="fin")
    for accept in ({}, {"accept_gaps": True, "reason": "only one hour"}):  # no acceptance covers them (SPEC 4)
        with pytest.raises(Conflict) as err:
            periods.close(session=session, period="2026-10", actor="fin", **accept)
        assert err.value.status == 409 and "never ingested, which no acceptance covers" in err.value.detail
        assert ("ingest 2026-10-01T01:00..2026-10-31T23:00 for default first (chargeback ingest --cluster default "
                "--start 2026-10-01T01:00Z --end 2026-11-01T00:00Z)") in err.value.detail
    assert periods.get_period(session=session, month="2026-10").status == "rated"
    record_gaps(session, "2026-10")  # ingested: the source could not answer those hours, now acceptable gaps
    row = periods.close(session=session, period="2026-10", actor="fin", accept_gaps=True, reason="only one hour")
    assert row.status == "finalized" and row.hours_ok == 1


def test_close_with_gaps_needs_a_reason_and_records_it(session):
    v = store_policy(session)
    fill_month(session, "2026-10", v.id, gap={5, 6})
    with pytest.raises(Conflict) as err:
        periods.close(session=session, period="2026-10", actor="fin")
    assert "2 gap hour(s)" in err.value.detail and "2026-10-01T05:00..2026-10-01T06:00" in err.value.detail
    with pytest.raises(Invalid) as err:
        periods.close(session=session, period="2026-10", actor="fin", accept_gaps=True, reason="  ")
    assert [e.path for e in err.value.errors] == ["reason"]
    row = periods.close(session=session, period="2026-10", actor="fin", accept_gaps=True, reason="exporter down")
    assert row.status == "finalized" and row.accept_gaps_reason == "exporter down" and row.finalized_by == "fin"
    statement = platform_statement(load_view(session=session, period=row))
    assert statement["gap_hours"] == ["2026-10-01T05:00:00+00:00", "2026-10-01T06:00:00+00:00"]
    assert statement["hours_ok"] == 744 - 2 and statement["accept_gaps_reason"] == "exporter down"
    audit = session.execute(select(AuditEntry).where(AuditEntry.action == "billing.close")).scalars().one()
    assert "exporter down" in audit.after and audit.actor == "fin"


def test_close_finalizes_with_export_hashes_and_then_refuses(session):
    v = store_policy(session)
    fill_month(session, "2026-10", v.id)
    row = periods.close(session=session, period="2026-10", actor="fin")
    assert row.status == "finalized" and row.finalized_at is not None and row.accept_gaps_reason is None
    assert row.hours_ok == row.hours_expected == 744
    assert row.pdf_sha256 is None  # documents pending until the issuing step
    issue_documents(session, "2026-10")
    session.refresh(row)
    for fmt, stored in (("csv", row.csv_sha256), ("focus", row.focus_sha256), ("pdf", row.pdf_sha256)):
        assert hashlib.sha256(exports.render(session=session, period=row, fmt=fmt)).hexdigest() == stored
    finalized = [e for e in events_after(session=session, after=None, types=("period.finalized",))
                 if e.data["period"] == "2026-10"]
    assert len(finalized) == 1 and finalized[0].data["sha256"]["pdf"] == row.pdf_sha256
    with pytest.raises(Conflict) as err:
        periods.close(session=session, period="2026-10", actor="fin")
    assert err.value.status == 409
    with pytest.raises(Conflict):
        periods.rate(session=session, period="2026-10", actor="fin")


def test_missing_price_names_model_and_hours(session):
    v = store_policy(session)
    add_hour(session, hour=OCT1, version=v.id, model="NVIDIA H100 80GB HBM3")
    add_hour(session, hour=OCT1 + timedelta(hours=1), version=v.id, model="NVIDIA H100 80GB HBM3", breaches=())
    with pytest.raises(MissingPrice) as err:
        periods.rate(session=session, period="2026-10", actor="fin")
    assert err.value.status == 422
    assert "NVIDIA H100 80GB HBM3" in err.value.detail
    [e] = err.value.errors
    assert "NVIDIA H100 80GB HBM3" in e.path and "2026-10-01T00:00Z..2026-10-01T01:00Z" in e.message


def test_bad_periods(session):
    with pytest.raises(Invalid) as err:
        periods.rate(session=session, period="2026-13", actor="fin")
    assert err.value.errors[0].path == "period"
    with pytest.raises(Invalid):
        periods.rate(session=session, period="Oct 2026", actor="fin")
    with pytest.raises(NotFound):
        periods.rate(session=session, period="2099-01", actor="fin")


def test_correction_lands_in_a_later_open_period(session):
    v = store_policy(session)
    fill_month(session, "2026-09", v.id)
    sept = periods.close(session=session, period="2026-09", actor="fin")
    target = next(l for l in load_view(session=session, period=sept).lines if l.kind == LineKind.USAGE_BUSY and l.account == "vision")

    with pytest.raises(Invalid) as err:  # not in the same period
        periods.correct(session=session, period="2026-09", line_id=target.line_id, amount="-5", reason="x", actor="fin")
    assert err.value.errors[0].path == "period"
    with pytest.raises(Invalid) as err:
        periods.correct(session=session, period="2026-10", line_id=target.line_id, amount="abc", reason="", actor="fin")
    assert {e.path for e in err.value.errors} == {"amount", "reason"}
    with pytest.raises(NotFound):
        periods.correct(session=session, period="2026-10", line_id="2026-09/nope", amount="1", reason="x", actor="fin")

    fix = periods.correct(session=session, period="2026-10", line_id=target.line_id, amount="-12.345",
                          reason="double-counted node", actor="fin")
    assert fix.amount == D("-12.34")  # half-even
    assert fix.corrects == target.line_id and fix.line_id == "2026-10/vision/mixed-a100/correction/1"
    # the finalized line is untouched
    assert session.get(ChargeLineRecord, target.id).amount == target.amount

    add_hour(session, hour=OCT1, version=v.id)
    october = periods.rate(session=session, period="2026-10", actor="fin")
    invoice = tenant_invoice(load_view(session=session, period=october), "vision")
    [corr] = [l for l in invoice["lines"] if l["correction"]]
    assert corr["corrects"] == target.line_id and corr["amount"] == D("-12.34")
    assert invoice["corrections"] == D("-12.34")
    assert invoice["total"] == D("2.30") - D("12.34")
    # conservation is about October's own cost; the correction is reported apart
    assert platform_statement(load_view(session=session, period=october))["conserved"]

    with pytest.raises(Invalid):  # a draft line is re-rated, not corrected
        draft = load_view(session=session, period=october).lines[0]
        periods.correct(session=session, period="2026-11", line_id=draft.line_id, amount="1", reason="x", actor="fin")


def test_policy_change_mid_month_splits_lines(session):
    v1 = store_policy(session)
    doc = policy_doc()
    pricing = doc.pricing.model_copy(update={"gpu_models": {A100: doc.pricing.gpu_models[A100].model_copy(
        update={"hosting_per_hour": D("0.50")})}})
    change = OCT1 + timedelta(days=15)
    v2 = store_policy(session, doc.model_copy(update={"pricing": pricing}), effective_from=change)
    add_hour(session, hour=change - timedelta(hours=1), version=v1.id, breaches=())
    add_hour(session, hour=change, version=v2.id, breaches=())
    row = periods.rate(session=session, period="2026-10", actor="fin")
    busy = [l for l in load_view(session=session, period=row).lines
            if l.account == "vision" and l.kind == LineKind.USAGE_BUSY]
    assert [(l.policy_version, l.charge_start, l.charge_end) for l in busy] == [
        (v1.id, change - timedelta(hours=1), change),
        (v2.id, change, change + timedelta(hours=1)),
    ]
    # 1.30/h before, 1.60/h after: 0.7 GPU-h each
    assert [l.amount for l in busy] == [D("0.91"), D("1.12")]
    assert platform_statement(load_view(session=session, period=row))["conserved"]


def test_months_follow_the_billing_timezone(monkeypatch):
    from app.core.settings import get_settings

    monkeypatch.setenv("CHARGEBACK_BILLING_TIMEZONE", "Asia/Shanghai")
    get_settings.cache_clear()
    try:
        p = periods.parse_period("2026-10")
        assert p.start == datetime(2026, 9, 30, 16, tzinfo=UTC) and p.end == datetime(2026, 10, 31, 16, tzinfo=UTC)
        dec = periods.parse_period("2026-12")
        assert dec.end == datetime(2026, 12, 31, 16, tzinfo=UTC)
    finally:
        monkeypatch.delenv("CHARGEBACK_BILLING_TIMEZONE")
        get_settings.cache_clear()
    assert periods.parse_period("2026-10").start == OCT1
