"""The allocation explorer's figures: whole finalized months agree with the invoices, the rest is rating's estimate
of the rollups as they are now (a month rated only as a draft too), equal to the budgets' month-to-date.

November 2026 of the SPEC example (2 A100s, search/vision/etl) plus unallocated use every hour; one hour
also has namespace rows (the others were "ingested before namespaces were kept").
"""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest
from sqlalchemy import select, update

from app.billing import budgets, periods
from app.billing.allocation import allocation, parse_window, split_cents
from app.billing.loader import load_hours
from app.billing.models import ChargeLineRecord, PoolCostRecord
from app.billing.period import get_period
from app.billing.rating import rate_period
from app.billing.totals import tenant_totals
from app.billing.types import CHARGE_KINDS, PLATFORM, LineKind
from app.core.errors import Invalid
from app.core.timeutil import epoch
from app.metrics.models import UsageRollup
from app.metrics.namespace_read import NOT_RECORDED
from tests.support.billing import EXAMPLE_USAGE, POOL, add_hour, add_namespaces, fill_month, month_hours, store_policy
from tests.support.routes import VISION_MEMBER

UTC_TZ = UTC
USAGE = [*EXAMPLE_USAGE, ("unallocated", "unallocated", False, 720)]
TRACED = month_hours("2026-11")[5]  # the one hour with namespace rows
NAMESPACES = [("search", "inference", False, "search-prod", 1800),
              ("vision", "training", False, "vision-train", 2000), ("vision", "training", False, "vision-eval", 520),
              ("vision", "training", True, "vision-train", 1800), ("etl", "preprocessing", False, "data-prep", 360),
              ("unallocated", "unallocated", False, "scratch", 500), ("unallocated", "unallocated", False, "ml-sandbox", 220)]
TENANT_KINDS = (LineKind.RESERVED_FEE, LineKind.INFERENCE_OVERAGE, LineKind.USAGE_BUSY, LineKind.USAGE_DARK)


@pytest.fixture
def november(session):
    version = store_policy(session)
    fill_month(session, "2026-11", version.id, usage=USAGE, gpus=3)  # a third GPU: idle capacity
    add_namespaces(session, hour=TRACED, parts=NAMESPACES)
    return version


def finalize(session, month: str) -> None:
    """Close a month whose every hour is ingested (nothing to accept), as finance does."""
    assert periods.close(session=session, period=month, actor="fin").status == "finalized"


def window(value: str):
    return parse_window(value, today=date(2026, 12, 15), tz=UTC_TZ)


def costs(result) -> dict[tuple[str, str], Decimal]:
    return {(r.kind, r.name): r.cost for r in result.rows}


def test_whole_finalized_month_costs_are_the_invoice_lines(session, november):
    finalize(session, "2026-11")
    result = allocation(session=session, window=window("2026-11"), aggregate="tenant", viewer=None)
    assert [(m.month, m.source, m.status) for m in result.months] == [("2026-11", "invoice", "finalized")]
    period = get_period(session=session, month="2026-11")
    lines = session.execute(select(ChargeLineRecord).where(ChargeLineRecord.period_id == period.id)).scalars().all()
    per_tenant: dict[str, Decimal] = defaultdict(Decimal)
    for line in lines:
        if line.kind in TENANT_KINDS:
            per_tenant[line.account] += line.amount
    got = costs(result)
    assert {name: cost for (kind, name), cost in got.items() if kind == "allocated"} == dict(per_tenant)
    assert got[("unallocated", "unallocated")] == sum(l.amount for l in lines if l.kind == LineKind.UNALLOCATED)
    assert got[("idle", POOL)] == sum(l.amount for l in lines if l.kind == LineKind.IDLE)
    # the staff view's total is the fleet cost C the statement conserves
    fleet = sum(session.execute(select(PoolCostRecord.cost).where(PoolCostRecord.period_id == period.id)).scalars())
    assert result.total.cost == fleet
    # invoices also carry the SLA transfers; allocations do not (vision paid the first hour's penalties)
    invoice = {t["tenant"]: t["total"] for t in tenant_totals(session=session, period=period, viewer=None)}
    penalties = sum(l.amount for l in lines if l.account == "vision" and l.kind == LineKind.SLA_PENALTY)
    assert penalties > 0 and invoice["vision"] == per_tenant["vision"] + penalties
    # GPU-hours are the rollups': 720 hours of the example
    vision = next(r for r in result.rows if r.name == "vision")
    assert (vision.busy_gpu_hours, vision.dark_gpu_hours) == (Decimal("504.000000"), Decimal("360.000000"))
    assert vision.efficiency == 0.5


def test_an_open_month_is_rating_s_estimate_and_rating_or_finalizing_it_changes_no_figure(session, november):
    before = allocation(session=session, window=window("2026-11"), aggregate="class", viewer=None)
    assert [(m.source, m.status) for m in before.months] == [("estimate", "open")] and before.estimated
    periods.rate(session=session, period="2026-11", actor="fin")
    draft = allocation(session=session, window=window("2026-11"), aggregate="class", viewer=None)
    assert [(m.source, m.status) for m in draft.months] == [("estimate", "rated")] and draft.estimated
    finalize(session, "2026-11")
    after = allocation(session=session, window=window("2026-11"), aggregate="class", viewer=None)
    assert [(m.source, m.status) for m in after.months] == [("invoice", "finalized")] and not after.estimated
    assert costs(before) == costs(draft) == costs(after)
    assert [r.gpu_hours for r in before.rows] == [r.gpu_hours for r in draft.rows] == [r.gpu_hours for r in after.rows]


def test_a_part_of_a_month_is_rated_over_exactly_its_hours(session, november):
    finalize(session, "2026-11")  # a finalized month does not price a part of it
    result = allocation(session=session, window=window("2026-11-03,2026-11-05"), aggregate="pool", viewer=None)
    assert [m.source for m in result.months] == ["estimate"]
    start, end = datetime(2026, 11, 3, tzinfo=UTC), datetime(2026, 11, 6, tzinfo=UTC)
    rated = rate_period(load_hours(session=session, start=start, end=end), period_start=epoch(start), period_end=epoch(end))
    assert result.total.cost == sum(rated.cost_by_pool.values())
    tenant_lines = sum(l.amount for l in rated.lines if l.kind in CHARGE_KINDS)
    assert costs(result)[("allocated", POOL)] + costs(result)[("unallocated", "unallocated")] == tenant_lines
    assert result.total.gpu_hours == Decimal("216.000000")  # 72 hours x 3 GPUs: used + idle = capacity


def test_a_window_over_two_months_prices_each_its_own_way(session, november):
    finalize(session, "2026-11")
    result = allocation(session=session, window=window("2026-11-01,2026-12-10"), aggregate="tenant", viewer=None)
    assert [(m.month, m.source) for m in result.months] == [("2026-11", "invoice"), ("2026-12", "estimate")]


def test_by_namespace_unallocated_use_is_traced_and_lines_split_to_the_cent(session, november):
    finalize(session, "2026-11")
    by_tenant = costs(allocation(session=session, window=window("2026-11"), aggregate="tenant", viewer=None))
    result = allocation(session=session, window=window("2026-11"), aggregate="namespace", viewer=None)
    rows = {(r.kind, r.name, r.tenant): r for r in result.rows}
    unallocated = {name for kind, name, _ in rows if kind == "unallocated"}
    assert unallocated == {"scratch", "ml-sandbox", NOT_RECORDED}
    assert rows[("unallocated", "scratch", "unallocated")].gpu_hours == (Decimal(500) / 3600).quantize(Decimal("0.000001"))
    per_tenant: dict[str, Decimal] = defaultdict(Decimal)
    for r in result.rows:
        if r.kind in ("allocated", "unallocated"):
            per_tenant[r.tenant] += r.cost
    assert per_tenant["vision"] == by_tenant[("allocated", "vision")]
    assert per_tenant["unallocated"] == by_tenant[("unallocated", "unallocated")]
    assert {n for k, n, t in rows if t == "vision"} == {"vision-train", "vision-eval", NOT_RECORDED}
    assert result.total.cost == sum(by_tenant.values())


def test_a_tenant_member_sees_only_its_own_rows(session, november):
    finalize(session, "2026-11")
    for aggregate in ("tenant", "department", "pool", "class", "namespace"):
        result = allocation(session=session, window=window("2026-11"), aggregate=aggregate, viewer=VISION_MEMBER)
        assert result.rows and {r.kind for r in result.rows} == {"allocated"}, aggregate
        assert result.total.gpu_hours == Decimal("864.000000"), aggregate  # vision's 504 busy + 360 dark
    by_ns = allocation(session=session, window=window("2026-11"), aggregate="namespace", viewer=VISION_MEMBER)
    assert {r.tenant for r in by_ns.rows} == {"vision"}
    other = allocation(session=session, window=window("2026-11"), aggregate="tenant", viewer=VISION_MEMBER, tenant="search")
    assert other.rows == []  # the filter never widens what a member may read


def test_staff_filter_to_one_tenant(session, november):
    result = allocation(session=session, window=window("2026-11"), aggregate="namespace", viewer=None, tenant="etl")
    assert {(r.kind, r.tenant) for r in result.rows} == {("allocated", "etl")}


@pytest.mark.parametrize("value", ["2026-13", "2026-11-31,2026-12-01", "yesterday", "2026-11-05,2026-11-01",
                                   "2024-01-01,2026-11-01"])
def test_a_bad_window_names_the_parameter(value):
    with pytest.raises(Invalid) as err:
        window(value)
    assert [e.path for e in err.value.errors] == ["query.window"]


def test_the_default_window_is_this_month_to_date():
    w = parse_window("", today=date(2026, 12, 15), tz=UTC_TZ)
    assert (w.start, w.end) == (date(2026, 12, 1), date(2026, 12, 15))


def test_split_cents_adds_up_and_favours_the_largest_remainders():
    parts = split_cents(Decimal("1.00"), {("a",): Decimal(1), ("b",): Decimal(1), ("c",): Decimal(1)}, Decimal("0.01"))
    assert parts == {("a",): Decimal("0.34"), ("b",): Decimal("0.33"), ("c",): Decimal("0.33")}
    assert split_cents(Decimal("5"), {}, Decimal("0.01")) == {}


def test_platform_lines_never_reach_a_tenant_row(session, november):
    finalize(session, "2026-11")
    result = allocation(session=session, window=window("2026-11"), aggregate="tenant", viewer=None)
    assert PLATFORM not in {r.name for r in result.rows}
    assert timedelta(days=30) == result.window.end_utc - result.window.start_utc


def test_a_newly_ingested_hour_shows_in_the_next_estimate(session, november):
    """Estimates are cached per data version: an hour ingested since is priced on the next read."""
    before = allocation(session=session, window=window("2026-12-01,2026-12-02"), aggregate="tenant", viewer=None)
    assert before.rows == [] and before.total.cost == 0
    add_hour(session, hour=datetime(2026, 12, 1, 5, tzinfo=UTC), version=november.id, usage=USAGE, gpus=3, breaches=())
    after = allocation(session=session, window=window("2026-12-01,2026-12-02"), aggregate="tenant", viewer=None)
    assert after.total.cost == Decimal("3.90")  # one hour of 3 A100s at 1.30


def month_to_date(session, *, now: datetime, scope: str) -> dict[str, Decimal]:
    """The budget page's month-to-date cost of every tenant or department as of `now`."""
    return {s.name: s.forecast.actual for s in budgets.statuses(session=session, viewer=None, now=now, month="2026-11",
                                                                with_unbudgeted=True) if s.scope == scope}


def allocated(result) -> dict[str, Decimal]:
    return {r.name: r.cost for r in result.rows if r.kind == "allocated"}


DAY = 24


def test_a_month_rated_as_a_draft_stays_live_and_is_the_budgets_month_to_date_until_finalized(session):
    """Rated as a draft on the 16th, November keeps pricing every hour ingested since: at each moment its figures
    are the budgets' month-to-date. Finalized, it is the invoice lines, whatever the rollups do afterwards."""
    version = store_policy(session)
    fill_month(session, "2026-11", version.id, usage=USAGE, gpus=3, skip=range(15 * DAY, 30 * DAY))
    periods.rate(session=session, period="2026-11", actor="fin")  # days 1-15
    fill_month(session, "2026-11", version.id, usage=USAGE, gpus=3, breach_hours=0,
               skip={*range(15 * DAY), *range(19 * DAY, 30 * DAY)})  # days 16-19 ingested since
    nov20 = datetime(2026, 11, 20, tzinfo=UTC)
    for aggregate in ("tenant", "department"):
        mtd = month_to_date(session, now=nov20, scope=aggregate)
        for value in ("2026-11", "2026-11-01,2026-11-19"):  # the month, and the month to date on the 19th
            result = allocation(session=session, window=window(value), aggregate=aggregate, viewer=None)
            assert allocated(result) == mtd, (aggregate, value)
            assert [(m.source, m.status) for m in result.months] == [("estimate", "rated")], value
    assert mtd["research"] == Decimal("1.30") * 19 * DAY  # vision (research's one tenant): every hour of days 1-19

    fill_month(session, "2026-11", version.id, usage=USAGE, gpus=3, breach_hours=0, skip=range(19 * DAY))
    dec1 = datetime(2026, 12, 1, tzinfo=UTC)  # the month is over and every hour in: still the draft, still live
    month = allocation(session=session, window=window("2026-11"), aggregate="tenant", viewer=None)
    assert [(m.source, m.status) for m in month.months] == [("estimate", "rated")]
    assert allocated(month) == month_to_date(session, now=dec1, scope="tenant")
    assert allocated(month)["vision"] == Decimal("1.30") * 30 * DAY

    finalize(session, "2026-11")
    final = allocation(session=session, window=window("2026-11"), aggregate="tenant", viewer=None)
    assert [(m.source, m.status) for m in final.months] == [("invoice", "finalized")]
    assert costs(final) == costs(month)
    # An hour re-ingested after the close: the rollups move, the finalized month does not.
    part = window("2026-11-01,2026-11-29")
    before = allocated(allocation(session=session, window=part, aggregate="tenant", viewer=None))
    session.execute(update(UsageRollup).where(UsageRollup.hour == month_hours("2026-11")[100],
                                              UsageRollup.tenant == "vision", UsageRollup.dark.is_(False))
                    .values(gpu_seconds=Decimal(5400)))  # 2,880 GPU-seconds more at 1.30 per GPU-hour
    after = allocated(allocation(session=session, window=part, aggregate="tenant", viewer=None))
    assert after["vision"] - before["vision"] == Decimal("1.04")
    again = allocation(session=session, window=window("2026-11"), aggregate="tenant", viewer=None)
    assert [(m.source, m.status) for m in again.months] == [("invoice", "finalized")]
    assert costs(again) == costs(final)
    assert allocated(again) == month_to_date(session, now=dec1, scope="tenant")
