"""Finalizing is one transaction: a crash mid-close changes nothing; two closes at once, one wins; a crash while
issuing leaves the finalized lines and the documents pending.

These commit through `unit_of_work`, so they use `fresh_engine` (a database of their own per test).
"""

from __future__ import annotations

import threading
import time

import pytest
from sqlalchemy import func, select

from app.billing import exports, issuing, periods
from app.billing.models import BillingPeriod, ChargeLineRecord
from app.core.audit import AuditEntry
from app.core.db import unit_of_work
from app.core.errors import AppError, Conflict
from tests.support.billing import add_hour, fill_month, store_policy


def _snapshot(engine, month="2026-10"):
    with unit_of_work(engine) as s:
        row = s.execute(select(BillingPeriod).where(BillingPeriod.month == month)).scalars().first()
        if row is None:
            return None
        lines = s.execute(
            select(ChargeLineRecord.line_id, ChargeLineRecord.amount, ChargeLineRecord.revision)
            .where(ChargeLineRecord.period_id == row.id)
            .order_by(ChargeLineRecord.line_id)
        ).all()
        closes = s.execute(select(func.count()).select_from(AuditEntry).where(AuditEntry.action == "billing.close")).scalar()
        return {
            "status": row.status, "revision": row.revision, "finalized_at": row.finalized_at,
            "hashes": (row.csv_sha256, row.focus_sha256, row.pdf_sha256), "lines": [tuple(l) for l in lines],
            "closes": closes,
        }


@pytest.fixture
def rated_month(fresh_engine):
    with unit_of_work(fresh_engine) as s:
        v = store_policy(s)
        fill_month(s, "2026-10", v.id)
    with unit_of_work(fresh_engine) as s:
        periods.rate(session=s, period="2026-10", actor="fin")
    return fresh_engine


def test_crash_during_close_leaves_the_period_as_it_was(rated_month, monkeypatch):
    before = _snapshot(rated_month)
    assert before["status"] == "rated" and before["lines"]

    def boom(*args, **kwargs):
        raise RuntimeError("disk full while auditing")

    monkeypatch.setattr(periods, "record", boom)  # the last write of the finalize step
    with pytest.raises(RuntimeError, match="disk full"):
        with unit_of_work(rated_month) as s:
            periods.close(session=s, period="2026-10", actor="fin")
    assert _snapshot(rated_month) == before

    monkeypatch.undo()
    with unit_of_work(rated_month) as s:
        periods.close(session=s, period="2026-10", actor="fin")
    after = _snapshot(rated_month)
    assert after["status"] == "finalized" and after["closes"] == 1 and after["hashes"] == (None, None, None)


@pytest.mark.parametrize("failing", ["render_pdf", "render_focus"])
def test_crash_while_issuing_keeps_the_finalized_lines_and_the_documents_pending(rated_month, monkeypatch, failing):
    with unit_of_work(rated_month) as s:
        periods.close(session=s, period="2026-10", actor="fin")
    finalized = _snapshot(rated_month)

    def boom(view):
        raise RuntimeError("disk full while rendering")

    monkeypatch.setattr(exports, failing, boom)
    with pytest.raises(RuntimeError, match="disk full"):
        issuing.issue_period(engine=rated_month, month="2026-10")
    assert _snapshot(rated_month) == finalized and finalized["hashes"] == (None, None, None)

    monkeypatch.undo()
    assert issuing.issue_period(engine=rated_month, month="2026-10").documents == 4 + 3
    after = _snapshot(rated_month)
    assert after["status"] == "finalized" and after["closes"] == 1 and all(after["hashes"])
    assert after["lines"] == finalized["lines"]  # issued from the stored lines, which did not move


def test_missing_price_writes_nothing(fresh_engine):
    from datetime import UTC, datetime

    with unit_of_work(fresh_engine) as s:
        v = store_policy(s)
        add_hour(s, hour=datetime(2026, 10, 3, tzinfo=UTC), version=v.id, model="NVIDIA L40S")
    with pytest.raises(AppError) as err:
        with unit_of_work(fresh_engine) as s:
            periods.rate(session=s, period="2026-10", actor="fin")
    assert err.value.status == 422 and "NVIDIA L40S" in str(err.value) and "2026-10-03T00:00Z" in str(err.value)
    assert _snapshot(fresh_engine) is None


def test_two_concurrent_closes_exactly_one_wins(rated_month, monkeypatch):
    """Real connections in two threads; the winner is slowed inside its transaction so they overlap."""
    original = exports.render_pdf
    entered = threading.Event()

    def slow_pdf(view):
        entered.set()
        time.sleep(1.5)  # hold the period row lock while the other close arrives
        return original(view)

    monkeypatch.setattr(exports, "render_pdf", slow_pdf)
    barrier = threading.Barrier(2)
    outcomes: dict[str, object] = {}

    def run(name):
        barrier.wait()
        if name == "second":
            entered.wait(timeout=30)  # start once the first close is inside its transaction
        try:
            with unit_of_work(rated_month) as s:
                periods.close(session=s, period="2026-10", actor=name)
            outcomes[name] = "won"
        except Conflict as exc:
            outcomes[name] = exc
        except Exception as exc:  # anything else is a failure of the test
            outcomes[name] = exc

    threads = [threading.Thread(target=run, args=(n,)) for n in ("first", "second")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert outcomes["first"] == "won", outcomes
    assert isinstance(outcomes["second"], Conflict), outcomes
    assert outcomes["second"].status == 409
    after = _snapshot(rated_month)
    assert after["status"] == "finalized" and after["closes"] == 1
    with unit_of_work(rated_month) as s:
        row = s.execute(select(BillingPeriod)).scalars().one()
        assert row.finalized_by == "first"
