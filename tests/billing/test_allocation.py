"""The allocation explorer's figures: whole rated months agree with the invoices, the rest is rating's estimate.

November 2026 of the SPEC example (2 A100s, search/vision/etl) plus unallocated use every hour; one hour
also has namespace rows (the others were "ingested before namespaces were kept").
"""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest
from sqlalchemy import select

from app.billing import periods
from app.billing.allocation import allocation, parse_window, split_cents
from app.billing.loader import load_hours
from app.billing.models import ChargeLineRecord, PoolCostRecord
from app.billing.period import get_period
from app.billing.rating import rate_period
from app.billing.totals import tenant_totals
from app.billing.types import CHARGE_KINDS, PLATFORM, LineKind
from app.core.errors import Invalid
from app.core.timeutil import epoch
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


def window(value: str):
    return parse_window(value, today=date(2026, 12, 15), tz=UTC_TZ)


def costs(result) -> dict[tuple[str, str], Decimal]:
    return {(r.kind, r.name): r.cost for r in result.rows}


def test_whole_rated_month_costs_are_the_invoice_lines(session, november):
    periods.rate(session=session, period="2026-11", actor="fin")
    result = allocation(session=session, window=window("2026-11"), aggregate="tenant", viewer=None)
    assert [(m.month, m.source, m.status) for m in result.months] == [("2026-11", "invoice", "rated")]
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


def test_an_open_month_is_rating_s_estimate_and_rating_it_changes_no_figure(session, november):
    before = allocation(session=session, window=window("2026-11"), aggregate="class", viewer=None)
    assert [m.source for m in before.months] == ["estimate"] and before.estimated
    periods.rate(session=session, period="2026-11", actor="fin")
    after = allocation(session=session, window=window("2026-11"), aggregate="class", viewer=None)
    assert [m.source for m in after.months] == ["invoice"] and not after.estimated
    assert costs(before) == costs(after)
    assert [r.gpu_hours for r in before.rows] == [r.gpu_hours for r in after.rows]


def test_a_part_of_a_month_is_rated_over_exactly_its_hours(session, november):
    periods.rate(session=session, period="2026-11", actor="fin")  # a rated month does not price a part of it
    result = allocation(session=session, window=window("2026-11-03,2026-11-05"), aggregate="pool", viewer=None)
    assert [m.source for m in result.months] == ["estimate"]
    start, end = datetime(2026, 11, 3, tzinfo=UTC), datetime(2026, 11, 6, tzinfo=UTC)
    rated = rate_period(load_hours(session=session, start=start, end=end), period_start=epoch(start), period_end=epoch(end))
    assert result.total.cost == sum(rated.cost_by_pool.values())
    tenant_lines = sum(l.amount for l in rated.lines if l.kind in CHARGE_KINDS)
    assert costs(result)[("allocated", POOL)] + costs(result)[("unallocated", "unallocated")] == tenant_lines
    assert result.total.gpu_hours == Decimal("216.000000")  # 72 hours x 3 GPUs: used + idle = capacity


def test_a_window_over_two_months_prices_each_its_own_way(session, november):
    periods.rate(session=session, period="2026-11", actor="fin")
    result = allocation(session=session, window=window("2026-11-01,2026-12-10"), aggregate="tenant", viewer=None)
    assert [(m.month, m.source) for m in result.months] == [("2026-11", "invoice"), ("2026-12", "estimate")]


def test_by_namespace_unallocated_use_is_traced_and_lines_split_to_the_cent(session, november):
    periods.rate(session=session, period="2026-11", actor="fin")
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
    periods.rate(session=session, period="2026-11", actor="fin")
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
    periods.rate(session=session, period="2026-11", actor="fin")
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
