"""Budgets and this month's standing, on both databases, against the SPEC's worked example priced by hand.

Every hour of September and October is the SPEC section 5 example hour (2 A100s at 1.30 per GPU-hour):
search pays 0.78 reserved fee an hour, vision 0.91 busy + 0.39 dark = 1.30, etl 0.13. As of 2026-10-20
00:00 the month-to-date cost is 19 days x 24 hours of those, and since every hour is alike the month-end
forecast is the whole month's 744 hours of them: vision 592.80 so far, 967.20 at month end.
"""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal as D

import pytest
from sqlmodel import Session, select

from app.billing import budgets
from app.billing.allocation import allocation, window_of
from app.billing.budget_models import Budget
from app.billing.forecast import Forecast
from app.billing.month_forecast import hourly_costs, month_forecasts
from app.core.audit import AuditEntry
from app.core.errors import Invalid, NotFound
from app.core.settings import get_settings
from app.policy.document import PolicyDocument
from tests.support.billing import fill_month, policy_doc, store_policy
from tests.support.budgets import PER_HOUR, steady
from tests.support.routes import VIEWER, VISION_MEMBER

NOW = datetime(2026, 10, 20, tzinfo=UTC)


def test_month_to_date_is_the_allocation_figure_and_a_steady_month_is_forecast_exactly(session):
    steady(session)
    answer = month_forecasts(session=session, as_of=NOW)
    window = window_of(datetime(2026, 10, 1).date(), datetime(2026, 10, 19).date(), tz=get_settings().tz)
    rows = {r.name: r.cost for r in allocation(session=session, window=window, aggregate="tenant", viewer=None).rows
            if r.kind == "allocated"}
    for tenant, per_hour in PER_HOUR.items():
        f = answer.tenants[tenant]
        assert f.actual == rows[tenant] == per_hour * 19 * 24  # the one definition, and the hand figure
        assert f.month_end == per_hour * 744
        assert (f.hours_known, f.hours_remaining, f.history_hours) == (456, 288, 672)
    assert answer.tenants["vision"].actual == D("592.80") and answer.tenants["vision"].month_end == D("967.20")
    assert answer.departments["research"].month_end == D("967.20")  # vision alone
    assert answer.departments["consumer"].month_end == D("0.78") * 744


def test_the_hours_rated_one_by_one_add_up_to_the_month_to_date_lines(session):
    """The forecast's hourly history is rating's own: an hour's tenant lines, which add up to the span's."""
    steady(session, months=("2026-10",))
    start, end = datetime(2026, 10, 1, tzinfo=UTC), datetime(2026, 10, 3, tzinfo=UTC)
    costs = hourly_costs(session=session, start=start, end=end)
    assert len(costs.observed) == 48
    window = window_of(start.date(), datetime(2026, 10, 2).date(), tz=get_settings().tz)
    rows = {r.name: r.cost for r in allocation(session=session, window=window, aggregate="tenant", viewer=None).rows
            if r.kind == "allocated"}
    for tenant, hourly in costs.by_tenant.items():
        assert abs(sum(hourly.values()) - rows[tenant]) <= D("0.01")  # the lines' one rounding, at most
        assert set(hourly) == costs.observed
    assert set(costs.by_tenant) == set(PER_HOUR)  # not the platform, not unallocated


def test_hours_not_ingested_are_forecast_not_counted_as_zero(session):
    version = store_policy(session, effective_from=datetime(2026, 8, 1, tzinfo=UTC))
    fill_month(session, "2026-09", version.id)
    fill_month(session, "2026-10", version.id, skip=set(range(24, 48)))  # 2 October never ingested
    f = month_forecasts(session=session, as_of=NOW).tenants["vision"]
    assert f.actual == D("1.30") * 18 * 24 and f.hours_known == 18 * 24
    assert f.month_end == D("967.20")  # the missing day is expected like any other


def test_the_hours_to_come_are_priced_under_the_policy_in_effect(session):
    """A100 hosting 0.20 -> 0.25 an hour from the forecast's hour on: C = 1.00 + 0.25 + 0.10 = 1.35 per GPU-hour (SPEC
    5), and every tenant's hour is linear in C, so the rest of the month costs 1.35/1.30 of the history's hours while
    the month to date stays billed at 1.30. (Priced at the history's own prices, vision's month end was 967.20.)"""
    v1 = store_policy(session, effective_from=datetime(2026, 8, 1, tzinfo=UTC))
    fill_month(session, "2026-09", v1.id)
    fill_month(session, "2026-10", v1.id, skip=set(range(19 * 24, 31 * 24)))  # hours from NOW on: not yet
    pricing = policy_doc().pricing.model_dump(mode="json")
    pricing["gpu_models"]["NVIDIA A100-SXM4-80GB"]["hosting_per_hour"] = "0.25"
    raised = policy_doc(pricing=pricing)
    store_policy(session, raised, effective_from=NOW)
    answer = month_forecasts(session=session, as_of=NOW)
    for tenant, per_hour in PER_HOUR.items():
        f = answer.tenants[tenant]
        assert f.actual == per_hour * 19 * 24  # as billed
        assert f.expected_remaining == per_hour * D("1.35") / D("1.30") * 12 * 24
    assert answer.tenants["vision"].month_end == D("592.80") + D("388.80")
    assert answer.departments["research"].month_end == D("981.60")
    # the chart's actual line is what was billed, not the history priced again
    assert set(answer.tenant_costs("vision").values()) == {D("1.30")}
    assert set(answer.priced.by_tenant["vision"].values()) == {D("1.35")}


def test_an_unpriced_gpu_model_gives_no_forecast_but_a_reason(session):
    doc = policy_doc()
    version = store_policy(session, doc, effective_from=datetime(2026, 8, 1, tzinfo=UTC))
    fill_month(session, "2026-10", version.id, model="NVIDIA H100 80GB HBM3")
    answer = month_forecasts(session=session, as_of=NOW)
    assert answer.error and "NVIDIA H100 80GB HBM3" in answer.error and not answer.tenants
    status = budgets.status_of(session=session, scope="tenant", name="vision", now=NOW)
    assert status.forecast is None and status.error == answer.error and status.state == "none"


def test_set_read_and_remove_a_budget_with_its_audit_trail(session):
    steady(session)
    budget = budgets.set_budget(session=session, scope="tenant", name="vision", amount="1000", thresholds=None,
                                actor="fiona")
    assert (budget.amount, budget.currency, budget.threshold_list) == (D("1000.00"), "USD", [50, 80, 100])
    budgets.set_budget(session=session, scope="tenant", name="vision", amount=D("1200.50"), thresholds=[75, 90],
                       actor="fiona")
    again = budgets.get_budget(session=session, scope="tenant", name="vision")
    assert (again.amount, again.threshold_list) == (D("1200.50"), [75, 90])
    budgets.delete_budget(session=session, scope="tenant", name="vision", actor="fiona")
    assert budgets.get_budget(session=session, scope="tenant", name="vision") is None
    entries = session.exec(select(AuditEntry).where(AuditEntry.entity == "budget").order_by(AuditEntry.id)).all()
    assert [(e.action, e.entity_id, e.tenant) for e in entries] == [("budget.set", "tenant:vision", "vision")] * 2 + [
        ("budget.delete", "tenant:vision", "vision")]
    with pytest.raises(NotFound):
        budgets.delete_budget(session=session, scope="tenant", name="vision", actor="fiona")


@pytest.mark.parametrize(("amount", "thresholds", "errors"), [
    ("0", None, {"amount": "more than 0"}),
    ("-5", None, {"amount": "more than 0"}),
    ("12.345", None, {"amount": "2 decimal places"}),
    ("lots", None, {"amount": "a number"}),
    ("Infinity", None, {"amount": "more than 0"}),
    ("2000000000000", None, {"amount": "at most"}),
    ("100", [], {"thresholds": "at least one"}),
    ("100", [50, 50], {"thresholds[1]": "go up"}),
    ("100", [80, 50, 0], {"thresholds[1]": "go up", "thresholds[2]": "from 1 to 1000"}),
    ("0", [2000], {"amount": "more than 0", "thresholds[0]": "from 1 to 1000"}),
    ("100", list(range(1, 12)), {"thresholds": "at most 10"}),
])
def test_a_bad_budget_names_each_field_and_saves_nothing(session, amount, thresholds, errors):
    steady(session, months=())
    with pytest.raises(Invalid) as caught:
        budgets.set_budget(session=session, scope="tenant", name="vision", amount=amount, thresholds=thresholds,
                           actor="fiona")
    found = {e.path: e.message for e in caught.value.errors}
    assert set(found) == set(errors)
    for path, fragment in errors.items():
        assert fragment in found[path], (path, found[path])
    assert session.exec(select(Budget)).all() == []


def test_unknown_tenants_and_departments_are_not_found(session):
    steady(session, months=())
    for scope, name in (("tenant", "nobody"), ("department", "nowhere"), ("department", "vision"), ("tenant", "research")):
        with pytest.raises(NotFound):
            budgets.set_budget(session=session, scope=scope, name=name, amount="10", thresholds=None, actor="fiona")
    budgets.set_budget(session=session, scope="department", name="research", amount="10", thresholds=None, actor="f")


def test_a_zero_decimal_currency_takes_whole_amounts(session):
    doc = policy_doc()
    data = doc.model_dump(by_alias=True)
    data["pricing"]["currency"] = "JPY"
    store_policy(session, PolicyDocument.model_validate(data))
    assert budgets.set_budget(session=session, scope="tenant", name="etl", amount="150000", thresholds=None,
                              actor="f").currency == "JPY"
    with pytest.raises(Invalid, match="not saved") as caught:
        budgets.set_budget(session=session, scope="tenant", name="etl", amount="150000.50", thresholds=None, actor="f")
    assert "whole units" in caught.value.errors[0].message


def test_a_member_reads_only_its_own_tenants_budgets(session):
    steady(session)
    for scope, name in (("tenant", "vision"), ("tenant", "search"), ("department", "research")):
        budgets.set_budget(session=session, scope=scope, name=name, amount="1000", thresholds=None, actor="f")
    assert [(b.scope, b.name) for b in budgets.list_budgets(session=session, viewer=VISION_MEMBER)] == [("tenant", "vision")]
    assert len(budgets.list_budgets(session=session, viewer=VIEWER)) == 3
    member = budgets.statuses(session=session, viewer=VISION_MEMBER, now=NOW, with_unbudgeted=True)
    assert [(s.scope, s.name) for s in member] == [("tenant", "vision")]
    staff = budgets.statuses(session=session, viewer=VIEWER, now=NOW, with_unbudgeted=True)
    assert {(s.scope, s.name) for s in staff} == {("tenant", t) for t in PER_HOUR} | {
        ("department", d) for d in ("consumer", "research", "data")}


def test_where_a_budget_stands(session):
    steady(session)
    budgets.set_budget(session=session, scope="tenant", name="vision", amount="1000", thresholds=None, actor="f")
    status = budgets.status_of(session=session, scope="tenant", name="vision", now=NOW)
    assert status.state == "on-track" and status.department == "research"
    assert [(c.threshold, c.basis, c.value) for c in status.crossed] == [
        (50, "actual", D("592.80")), (50, "forecast", D("967.20")), (80, "forecast", D("967.20"))]
    assert status.share(status.forecast.month_end) == D("0.9672")
    budgets.set_budget(session=session, scope="tenant", name="vision", amount="900", thresholds=None, actor="f")
    assert budgets.status_of(session=session, scope="tenant", name="vision", now=NOW).state == "at-risk"
    budgets.set_budget(session=session, scope="tenant", name="vision", amount="592.80", thresholds=[100], actor="f")
    over = budgets.status_of(session=session, scope="tenant", name="vision", now=NOW)
    assert over.state == "over" and [(c.threshold, c.basis) for c in over.crossed] == [(100, "actual"), (100, "forecast")]


def test_a_forecast_from_less_than_a_week_of_hours_raises_no_crossing():
    short = Forecast(actual=D(10), expected_remaining=D(990), month_end=D(1000), hours_known=100, hours_remaining=600,
                     history_hours=100, method="weekday-hour")
    assert budgets.crossings(amount=D(100), thresholds=[5, 50], forecast=short) == [
        budgets.Crossing(5, "actual", D(10))]
    week = Forecast(actual=D(10), expected_remaining=D(990), month_end=D(1000), hours_known=168, hours_remaining=576,
                    history_hours=168, method="weekday-hour")
    assert [(c.threshold, c.basis) for c in budgets.crossings(amount=D(100), thresholds=[5, 50], forecast=week)] == [
        (5, "actual"), (5, "forecast"), (50, "forecast")]


def test_an_hour_is_rated_again_only_when_it_is_ingested_again(fresh_engine):
    """The per-hour cache is keyed by the hour's ingest stamp (ingested_at, attempts), which ingestion moves."""
    from sqlalchemy import update

    from app.core.db import unit_of_work
    from app.metrics.models import IngestHour, UsageRollup

    with unit_of_work(fresh_engine) as session:
        steady(session, months=("2026-10",))
    hour = datetime(2026, 10, 5, 3, tzinfo=UTC)
    span = dict(start=datetime(2026, 10, 5, tzinfo=UTC), end=datetime(2026, 10, 6, tzinfo=UTC))
    with Session(fresh_engine) as session:
        assert hourly_costs(session=session, **span).by_tenant["vision"][int(hour.timestamp())] == D("1.30")
    with unit_of_work(fresh_engine) as session:  # rollups changed behind ingestion's back: the stamp did not move
        session.execute(update(UsageRollup).where(UsageRollup.hour == hour, UsageRollup.tenant == "vision")
                        .values(gpu_seconds=UsageRollup.gpu_seconds / 2))
    with Session(fresh_engine) as session:
        assert hourly_costs(session=session, **span).by_tenant["vision"][int(hour.timestamp())] == D("1.30")
    with unit_of_work(fresh_engine) as session:  # what ingestion does when it replaces an hour
        session.execute(update(IngestHour).where(IngestHour.hour == hour)
                        .values(attempts=IngestHour.attempts + 1, ingested_at=datetime(2026, 10, 6, tzinfo=UTC)))
    with Session(fresh_engine) as session:
        costs = hourly_costs(session=session, **span).by_tenant["vision"]
    assert costs[int(hour.timestamp())] == D("0.65") and costs[int(hour.timestamp()) + 3600] == D("1.30")


def test_an_hour_is_rated_again_when_any_cluster_ingests_it_again(fresh_engine):
    """With several clusters an hour has one ingest row each: another cluster's new ingest moves its stamp too."""
    from sqlalchemy import update

    from app.core.db import unit_of_work
    from app.metrics.models import IngestHour, IngestStatus, UsageRollup

    with unit_of_work(fresh_engine) as session:
        steady(session, months=("2026-10",))
    hour = datetime(2026, 10, 5, 3, tzinfo=UTC)
    span = dict(start=datetime(2026, 10, 5, tzinfo=UTC), end=datetime(2026, 10, 6, tzinfo=UTC))
    with unit_of_work(fresh_engine) as session:  # a second cluster's row for the hour, older than default's
        session.add(IngestHour(cluster="west", hour=hour, status=IngestStatus.OK, attempts=1,
                               ingested_at=datetime(2026, 10, 5, 4, tzinfo=UTC)))
    with Session(fresh_engine) as session:
        assert hourly_costs(session=session, **span).by_tenant["vision"][int(hour.timestamp())] == D("1.30")
    with unit_of_work(fresh_engine) as session:  # west ingests the hour again (its rows changed with it)
        session.execute(update(UsageRollup).where(UsageRollup.hour == hour, UsageRollup.tenant == "vision")
                        .values(gpu_seconds=UsageRollup.gpu_seconds / 2))
        session.execute(update(IngestHour).where(IngestHour.hour == hour, IngestHour.cluster == "west")
                        .values(attempts=2, ingested_at=datetime(2026, 10, 6, tzinfo=UTC)))
    with Session(fresh_engine) as session:
        assert hourly_costs(session=session, **span).by_tenant["vision"][int(hour.timestamp())] == D("0.65")
    with unit_of_work(fresh_engine) as session:  # and then the default cluster does (whichever row is read last)
        session.execute(update(UsageRollup).where(UsageRollup.hour == hour, UsageRollup.tenant == "vision")
                        .values(gpu_seconds=UsageRollup.gpu_seconds * 2))
        session.execute(update(IngestHour).where(IngestHour.hour == hour, IngestHour.cluster == "default")
                        .values(attempts=IngestHour.attempts + 1, ingested_at=datetime(2026, 10, 7, tzinfo=UTC)))
    with Session(fresh_engine) as session:
        assert hourly_costs(session=session, **span).by_tenant["vision"][int(hour.timestamp())] == D("1.30")
