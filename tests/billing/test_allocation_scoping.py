"""Every aggregate a member is served is computed over the member's tenants only, forecasts included (issue 25 item 3).

The seeded month runs up to now (the portal's clock is the real one) under the SPEC example with etl moved into
vision's department, so `research` spans two tenants: vision (1.30 an hour) and etl (0.13 an hour). A member of
vision asking by department used to get research's cost over vision alone, but its forecast over both tenants.
"""

from __future__ import annotations

from decimal import Decimal as D

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.auth.principal import Principal
from app.billing.allocation import ALLOCATED, allocation, as_json, billing_today, parse_window
from app.billing.month_forecast import window_remaining
from app.core.timeutil import utcnow
from tests.support.billing import policy_doc
from tests.support.budgets import seed_to_now
from tests.support.policies import SPEC_TENANTS
from tests.support.routes import FINANCE, VISION_MEMBER

TENANTS = ("search", "vision", "etl")
DEPARTMENT = {"search": "consumer", "vision": "research", "etl": "research"}
AGGREGATES = ("tenant", "department", "pool", "class", "namespace")


def shared_department_doc():
    return policy_doc(tenants=[{**t, "namespaces": list(t["namespaces"]), "department": DEPARTMENT[t["name"]]}
                               for t in SPEC_TENANTS])


@pytest.fixture
def month(session):
    return seed_to_now(session, shared_department_doc())


def member(tenants) -> Principal:
    return Principal(name="m", roles=frozenset({"tenant"}), tenants=frozenset(tenants), user_id=99)


def this_month():
    today, tz = billing_today()
    return parse_window("", today=today, tz=tz)


def test_a_member_s_department_forecast_is_its_own_tenants_only(session, session_api, month):
    _, known, total = month
    rows = session_api.as_(VISION_MEMBER).get("/api/v1/allocation", params={"aggregate": "department"}).json()["rows"]
    [research] = rows
    assert research["name"] == "research" and D(research["cost"]) == D("1.30") * known
    # vision's month alone; before, research's forecast rest also held etl's 0.13 an hour
    assert D(research["forecast_cost"]) == D("1.30") * total
    staff = session_api.as_(FINANCE).get("/api/v1/allocation", params={"aggregate": "department"}).json()["rows"]
    assert {r["name"]: D(r["forecast_cost"]) for r in staff if r["kind"] == ALLOCATED}["research"] == D("1.43") * total


def _figures(rows) -> dict[tuple[str, str], tuple]:
    return {(r.name, r.tenant): (r.cost, r.busy_seconds, r.dark_seconds) for r in rows}


def _add(a: tuple, b: tuple) -> tuple:
    return tuple(x + y for x, y in zip(a, b, strict=True))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(visible=st.sets(st.sampled_from(TENANTS)), aggregate=st.sampled_from(AGGREGATES))
def test_every_aggregate_is_the_sum_over_the_member_s_tenants_only(session, month, visible, aggregate):
    window, now = this_month(), utcnow()
    staff_tenants = {r.name: r for r in allocation(session=session, window=window, aggregate="tenant", viewer=None).rows
                     if r.kind == ALLOCATED}
    assert set(staff_tenants) == set(TENANTS)
    answer = allocation(session=session, window=window, aggregate=aggregate, viewer=member(visible))
    # No row of the platform, idle capacity or unallocated use, and none of a tenant the member cannot see.
    assert {r.kind for r in answer.rows} <= {ALLOCATED}
    if aggregate == "namespace":
        assert {r.tenant for r in answer.rows} <= visible
    if aggregate == "tenant":
        assert {r.name for r in answer.rows} == visible
        assert _figures(answer.rows) == {(t, ""): _figures([staff_tenants[t]])[(t, "")] for t in visible}
    # The sum over the visible tenants, each read alone: rows, totals and forecasts alike.
    expected: dict[tuple[str, str], tuple] = {}
    for tenant in sorted(visible):
        alone = allocation(session=session, window=window, aggregate=aggregate, viewer=None, tenant=tenant)
        assert alone.total.cost == staff_tenants[tenant].cost
        for key, figures in _figures(alone.rows).items():
            expected[key] = _add(expected.get(key, (D(0), D(0), D(0))), figures)
    assert _figures(answer.rows) == expected
    assert answer.total.cost == sum((staff_tenants[t].cost for t in visible), D(0))
    assert answer.total.busy_seconds + answer.total.dark_seconds == sum(
        (staff_tenants[t].busy_seconds + staff_tenants[t].dark_seconds for t in visible), D(0))

    remaining = window_remaining(session=session, window=window, aggregate=aggregate, now=now, visible=answer.visible)
    per_tenant = window_remaining(session=session, window=window, aggregate="tenant", now=now)
    assert per_tenant.keys() >= set(TENANTS) and all(per_tenant[t] > 0 for t in TENANTS)
    if aggregate in ("tenant", "department"):
        group = (lambda t: t) if aggregate == "tenant" else DEPARTMENT.get
        want: dict[str, D] = {}
        for tenant in visible:
            want[group(tenant)] = want.get(group(tenant), D(0)) + per_tenant[tenant]
        assert remaining == want
        shown = {r["name"]: r["forecast_cost"] for r in as_json(answer, remaining)["rows"]}
        costs = {r.name: r.cost for r in answer.rows}
        assert shown == {name: (costs[name] + want[name]).quantize(D("0.01")) for name in want}
    else:
        assert remaining == {}
