"""The pre-close checklist: each item's states from plain data (pure), and the state read from a real database."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from sqlmodel import select

from app.billing import periods
from app.billing.checklist import CloseState, ItemStatus, checklist, close_state
from app.billing.models import ChargeLineRecord
from app.billing.period import parse_period
from app.metrics.models import IngestHour
from app.metrics.usage_read import Coverage
from tests.support.billing import add_hour, fill_month, record_gaps, store_policy

OCT1 = datetime(2026, 10, 1, tzinfo=UTC)
NOW = datetime(2026, 11, 20, tzinfo=UTC)
WHOLE = Coverage(hours=744, ok=744, gaps=0, expected=744)
RATED = CloseState(month="2026-10", status="rated", coverage=WHOLE, rated_at=datetime(2026, 11, 2, tzinfo=UTC),
                   latest_ingest=datetime(2026, 11, 1, 1, tzinfo=UTC))


def item(state: CloseState, key: str):
    return next(i for i in checklist(state).items if i.key == key)


def test_a_whole_rated_month_is_ready_and_every_item_ok():
    result = checklist(RATED)
    assert [i.key for i in result.items] == ["coverage", "reconcile", "unpooled", "rating", "unattributed", "corrections"]
    assert all(i.status == ItemStatus.OK for i in result.items)
    assert result.ready and not result.blocked and result.needs == []
    assert result.refusal(accept_gaps=False, accept_unpooled=False, reason="") == {}


@pytest.mark.parametrize(("coverage", "status", "accept", "words"), [
    (WHOLE, ItemStatus.OK, None, "744 of 744 hours ingested."),
    (Coverage(hours=744, ok=2, gaps=0, expected=744), ItemStatus.BLOCKS, None, "742 hours"),
    (Coverage(hours=744, ok=743, gaps=1, expected=744), ItemStatus.BLOCKS, "accept_gaps",
     "1 hour the source could not answer"),
    (Coverage(hours=300, ok=300, gaps=0, expected=744), ItemStatus.BLOCKS, None, "444 hours still to come"),
])
def test_coverage_item(coverage, status, accept, words):
    got = item(replace(RATED, coverage=coverage), "coverage")
    assert (got.status, got.accept) == (status, accept) and words in got.detail
    assert "--" not in got.action  # plain words, no command-line flags


def test_gap_hours_block_until_accepted_with_a_reason():
    state = replace(RATED, coverage=Coverage(hours=744, ok=743, gaps=1, expected=744),
                    gap_hours=(OCT1 + timedelta(hours=5),))
    result = checklist(state)
    assert result.needs == ["accept_gaps"] and not result.ready and not result.blocked
    assert "2026-10-01T05:00" in item(state, "coverage").detail
    assert set(result.refusal(accept_gaps=False, accept_unpooled=False, reason="")) == {"accept_gaps"}
    assert set(result.refusal(accept_gaps=True, accept_unpooled=False, reason="  ")) == {"reason"}
    assert result.refusal(accept_gaps=True, accept_unpooled=False, reason="exporter outage") == {}


def test_hours_never_ingested_block_whatever_is_accepted():
    """SPEC 4: only gaps can be accepted; hours never attempted are named per cluster, to be ingested first."""
    missing = {"west": [OCT1 + timedelta(hours=h) for h in range(460, 744)]}
    result = checklist(replace(RATED, coverage=Coverage(hours=744, ok=460, gaps=0, expected=744),
                               missing_by_cluster=missing))
    assert result.blocked and result.needs == [] and not result.ready
    got = item(replace(RATED, coverage=Coverage(744, 460, 0, 744), missing_by_cluster=missing), "coverage")
    assert "west: 284 hours (2026-10-20T04:00..2026-10-31T23:00)" in got.detail
    assert got.action.startswith("Ingest 2026-10-20T04:00..2026-10-31T23:00 for west first")
    refused = result.refusal(accept_gaps=True, accept_unpooled=False, reason="ship it")
    assert set(refused) == {"period"} and "which no acceptance covers" in refused["period"]


def test_a_month_not_ended_cannot_be_closed():
    """As `periods.close`: the hours still to come are never attempted yet; no acceptance closes the month early."""
    result = checklist(replace(RATED, coverage=Coverage(hours=300, ok=300, gaps=0, expected=744)))
    assert result.blocked and result.needs == []
    assert set(result.refusal(accept_gaps=True, accept_unpooled=False, reason="closing the running month")) == {"period"}


def test_unpooled_item():
    assert item(RATED, "unpooled").status == ItemStatus.OK
    state = replace(RATED, unpooled_hours=2, unpooled_gpus=4, unpooled_gpu_hours=Decimal("8"))
    got = item(state, "unpooled")
    assert got.status == ItemStatus.BLOCKS and got.accept == "accept_unpooled"
    assert "Up to 4 GPUs on nodes no pool names, in 2 hours (8.0 GPU-hours" in got.detail
    assert "Accept unpooled GPUs" in got.action
    assert set(checklist(state).refusal(accept_gaps=True, accept_unpooled=False, reason="x")) == {"accept_unpooled"}
    closed = item(replace(state, status="finalized", accept_unpooled_reason="new nodes"), "unpooled")
    assert closed.status == ItemStatus.OK and "new nodes" in closed.action


def test_rating_item():
    assert item(RATED, "rating").status == ItemStatus.OK
    never = item(replace(RATED, status="open", rated_at=None), "rating")
    assert never.status == ItemStatus.ATTENTION and "Rate" in never.action
    stale = item(replace(RATED, latest_ingest=datetime(2026, 11, 3, tzinfo=UTC)), "rating")
    assert stale.status == ItemStatus.ATTENTION and "ingested after the last rating" in stale.detail
    assert item(replace(RATED, status="finalized"), "rating").status == ItemStatus.OK


def test_unattributed_and_corrections_items_need_attention_but_never_block():
    state = replace(RATED, unattributed_minutes=3, unattributed_penalty=Decimal("1.50"), corrections=2,
                    corrections_total=Decimal("-12.40"))
    result = checklist(state)
    unattributed, corrections = item(state, "unattributed"), item(state, "corrections")
    assert unattributed.status == ItemStatus.ATTENTION and "3 breach minutes" in unattributed.detail
    assert "1.50 USD" in unattributed.detail
    assert corrections.status == ItemStatus.ATTENTION and "2 correction lines (-12.40 USD) will be billed" in corrections.detail
    assert result.ready  # attention is not a block
    assert item(replace(state, status="finalized"), "corrections").status == ItemStatus.OK


# --- the state as read from the database -------------------------------------------------------------


def test_close_state_reads_gaps_stale_rating_corrections_and_unattributed_breaches(session):
    v = store_policy(session)
    fill_month(session, "2026-10", v.id, gap={5}, skip={6, 7})  # hour 0 carries 2 breach minutes with vision
    rated = periods.rate(session=session, period="2026-10", actor="fin")
    p = parse_period("2026-10")
    state = close_state(session=session, period=p, now=NOW)
    assert (state.coverage.ok, state.coverage.gaps, state.coverage.missing, state.coverage.total) == (741, 1, 2, 744)
    assert state.status == "rated" and state.unattributed_minutes == 0 and state.corrections == 0
    assert item(state, "rating").status == ItemStatus.OK

    # an hour ingested after the rating makes the draft stale
    add_hour(session, hour=OCT1 + timedelta(hours=6), version=v.id, breaches=())
    session.flush()
    # 1 µs after the rating: the re-rating below must come after it however fast the test runs
    session.get(IngestHour, ("default", OCT1 + timedelta(hours=6))).ingested_at = rated.rated_at + timedelta(microseconds=1)
    session.flush()
    stale = close_state(session=session, period=p, now=NOW)
    assert stale.coverage.ok == 742 and item(stale, "rating").status == ItemStatus.ATTENTION

    # a breach with nobody co-located, and a correction of a finalized September line
    fill_month(session, "2026-09", v.id)
    periods.close(session=session, period="2026-09", actor="fin")
    add_hour(session, hour=OCT1 + timedelta(hours=7), version=v.id, breaches=(("search-chat", "search", 3, ()),))
    periods.rate(session=session, period="2026-10", actor="fin")
    line = session.exec(select(ChargeLineRecord).where(ChargeLineRecord.line_id.like("2026-09/vision/%"))).first()
    periods.correct(session=session, period="2026-10", line_id=line.line_id, amount="-1.00", reason="overbilled",
                    actor="fin")
    state = close_state(session=session, period=p, now=NOW)
    assert state.unattributed_minutes == 3 and state.unattributed_penalty == Decimal("1.50")
    assert state.corrections == 1 and state.corrections_total == Decimal("-1.00")
    result = checklist(state)
    assert result.needs == ["accept_gaps"]
    assert {i.key: i.status for i in result.items} == {
        "coverage": ItemStatus.BLOCKS, "reconcile": ItemStatus.OK, "unpooled": ItemStatus.OK, "rating": ItemStatus.OK,
        "unattributed": ItemStatus.ATTENTION, "corrections": ItemStatus.ATTENTION,
    }


def test_a_finalized_month_keeps_the_coverage_it_closed_with(session):
    v = store_policy(session)
    add_hour(session, hour=OCT1, version=v.id)
    add_hour(session, hour=OCT1 + timedelta(hours=1), version=v.id, breaches=())
    record_gaps(session, "2026-10")  # the rest asked, and the source could not answer
    periods.close(session=session, period="2026-10", actor="fin", accept_gaps=True, reason="two hours only")
    add_hour(session, hour=OCT1 + timedelta(hours=2), version=v.id, breaches=())  # ingested after the close
    state = close_state(session=session, period=parse_period("2026-10"), now=NOW)
    assert (state.coverage.ok, state.coverage.total, state.coverage.partial) == (2, 744, True)
    got = item(state, "coverage")
    assert got.status == ItemStatus.OK and "two hours only" in got.action
    assert close_state(session=session, period=parse_period("2026-11"), now=NOW).status == "open"
