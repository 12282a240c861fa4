"""Unmeasured capacity (SPEC 5.8): the statement shows, per pool, its gap hours and what their capacity would have cost.

The SPEC example pool: 2 A100s at 26,280 over 3 years + 0.20 hosting + 400 W x 1.25 PUE x 0.20 per kWh, so one GPU
at default power costs 1.00 + 0.20 + 0.10 = 1.30 an hour; the estimates below are that arithmetic, by hand.
"""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime
from decimal import Decimal

from sqlalchemy import delete
from sqlmodel import Session

from app.billing import periods
from app.billing.invoices import load_view, platform_statement
from app.billing.pdf import render_pdf
from app.billing.period import get_period
from app.billing.unmeasured import gap_runs
from app.core.timeutil import HOUR
from app.metrics.models import IngestHour
from tests.support.billing import add_hour, fill_month, month_hours, store_policy

GPU_HOUR = Decimal("1.30")  # one A100 of the SPEC example at default power


def statement(session: Session, month: str) -> dict:
    return platform_statement(load_view(session=session, period=get_period(session=session, month=month)))


def test_each_pool_s_gap_hours_are_priced_at_the_gpus_last_seen(session):
    version = store_policy(session).id
    fill_month(session, "2026-11", version, gap={*range(100, 105), 300})  # two runs: 5 hours and 1 hour
    periods.rate(session=session, period="2026-11", actor="fin")
    shown = statement(session, "2026-11")
    assert len(shown["gap_hours"]) == 6
    assert shown["unmeasured"] == [{"cluster": "default", "pool": "mixed-a100", "gap_hours": 6, "gpus": 2,
                                    "gpu_hours": Decimal("12.000000"), "amount": 2 * 6 * GPU_HOUR}]
    assert shown["unmeasured_total"] == Decimal("15.60")
    # Never billed: the pool's cost C and every line leave the gap hours out; conservation still holds.
    assert shown["conserved"] and shown["cost_total"] == 2 * (720 - 6 - 1) * GPU_HOUR + 2 * GPU_HOUR  # + the breach hour


def test_a_gap_at_the_month_s_start_uses_the_previous_month_s_last_hour(session):
    version = store_policy(session).id
    add_hour(session, hour=datetime(2026, 10, 31, 23, tzinfo=UTC), version=version, gpus=3)  # 3 GPUs seen last
    fill_month(session, "2026-11", version, gap=range(24), breach_hours=0)
    periods.rate(session=session, period="2026-11", actor="fin")
    [row] = statement(session, "2026-11")["unmeasured"]
    assert (row["gap_hours"], row["gpus"], row["amount"]) == (24, 3, 3 * 24 * GPU_HOUR)


def test_a_pool_never_seen_before_its_gap_is_listed_at_zero(session):
    version = store_policy(session).id
    fill_month(session, "2026-11", version, gap=range(720), breach_hours=0)  # a fresh install: nothing answered
    periods.rate(session=session, period="2026-11", actor="fin")
    assert statement(session, "2026-11")["unmeasured"] == [
        {"cluster": "default", "pool": "mixed-a100", "gap_hours": 720, "gpus": 0, "gpu_hours": Decimal("0.000000"),
         "amount": Decimal("0.00")}]


def test_the_estimate_is_stored_with_the_rating_and_filled_gaps_leave_it_on_the_issued_statement(session, tmp_path):
    version = store_policy(session).id
    fill_month(session, "2026-11", version, gap={500, 501})
    periods.close(session=session, period="2026-11", actor="fin", accept_gaps=True, reason="exporter upgrade")
    before = statement(session, "2026-11")
    hours = month_hours("2026-11")
    session.execute(delete(IngestHour).where(IngestHour.hour.in_([hours[500], hours[501]])))
    for i in (500, 501):  # the gap hours ingested after the close
        add_hour(session, hour=hours[i], version=version, breaches=())
    after = statement(session, "2026-11")
    assert after["unmeasured"] == before["unmeasured"] and after["unmeasured_total"] == 2 * 2 * GPU_HOUR
    pdf = tmp_path / "period.pdf"
    pdf.write_bytes(render_pdf(load_view(session=session, period=get_period(session=session, month="2026-11"))))
    text = " ".join(subprocess.run(["pdftotext", str(pdf), "-"], check=True, capture_output=True, text=True).stdout.split())
    assert "unmeasured capacity of mixed-a100: 2 gap hours x 2 GPUs last seen = 4.00 GPU-hours, 5.20 USD" in text


def test_a_re_rated_draft_drops_the_estimate_of_gaps_since_filled(session):
    version = store_policy(session).id
    fill_month(session, "2026-11", version, gap={500})
    periods.rate(session=session, period="2026-11", actor="fin")
    assert statement(session, "2026-11")["unmeasured_total"] == 2 * GPU_HOUR
    hour = month_hours("2026-11")[500]
    session.execute(delete(IngestHour).where(IngestHour.hour == hour))
    add_hour(session, hour=hour, version=version, breaches=())
    periods.rate(session=session, period="2026-11", actor="fin")
    assert statement(session, "2026-11")["unmeasured"] == []


def test_gap_runs_are_consecutive_hours():
    h = datetime(2026, 11, 1, tzinfo=UTC)
    assert gap_runs([h + 3 * HOUR, h, h + HOUR, h + 7 * HOUR]) == [(h, 2), (h + 3 * HOUR, 1), (h + 7 * HOUR, 1)]
    assert gap_runs([]) == []
