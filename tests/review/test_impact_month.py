"""The impact preview's month: the newest fully covered complete month by default (else the most covered, said so),
`?month=` validated; each tenant's invoice and the platform's share re-rated; quotas against the month's use."""

from __future__ import annotations

from decimal import Decimal

import pytest

from app.core.errors import Invalid
from app.core.timeutil import utcnow
from app.review import impact
from tests.support.billing import fill_month
from tests.support.review import client_for, draft, seed, set_price, set_quota

pytestmark = pytest.mark.anyio
LAST = impact.previous_month()  # the newest complete month as the tests run
BEFORE = impact.month_before(LAST)


def test_month_before_wraps_the_year():
    assert impact.month_before("2026-01") == "2025-12" and impact.month_before("2026-10") == "2026-09"


def test_default_is_the_newest_fully_covered_month_not_a_newer_sparse_one(session):
    v1 = seed(session)
    fill_month(session, BEFORE, v1.id)
    fill_month(session, LAST, v1.id, skip=range(2, 10_000))  # two hours: the month the old preview re-rated
    chosen = impact.resolve_month(session=session, month=None)
    assert chosen["month"] == BEFORE and chosen["hours_ok"] == chosen["hours_expected"] > 600
    assert chosen["note"] is None and not chosen["requested"]
    assert [c["month"] for c in chosen["choices"][:2]] == [LAST, BEFORE]
    assert chosen["choices"][0]["hours_ok"] == 2
    asked = impact.resolve_month(session=session, month=LAST)
    assert asked["month"] == LAST and asked["requested"] and "2 of" in asked["note"]


def test_without_a_fully_covered_month_the_most_covered_one_is_chosen_and_said(session):
    v1 = seed(session)
    fill_month(session, BEFORE, v1.id, skip={0, 1, 2})
    fill_month(session, LAST, v1.id, skip=range(10, 10_000))
    chosen = impact.resolve_month(session=session, month=None)
    assert chosen["month"] == BEFORE
    assert chosen["note"].startswith("no complete month is fully covered") and BEFORE in chosen["note"]


def test_no_data_falls_back_to_last_month_with_a_note(session):
    seed(session)
    chosen = impact.resolve_month(session=session, month=None)
    assert chosen["month"] == LAST and chosen["hours_ok"] == 0 and "no complete month" in chosen["note"]


@pytest.mark.parametrize("bad", ["2026-13", "october", "2026-1", "2999-01"])
def test_a_bad_or_future_month_is_refused_naming_month(session, bad):
    seed(session)
    with pytest.raises(Invalid) as err:
        impact.resolve_month(session=session, month=bad)
    assert [e.path for e in err.value.errors] == ["month"]


def test_price_and_platform_share_conserve_the_fleet_cost(session):
    """Energy 0.20 -> 0.40 per kWh re-rates the month; before and after, tenants' invoices plus the platform's
    share add up to C, the fleet's cost (SPEC 5's conservation), so a shift onto the platform is visible."""
    v1 = seed(session)
    fill_month(session, BEFORE, v1.id)
    change = draft(session, v1, edit=set_price("0.40"))
    preview = impact.preview(session=session, change=change)
    price = preview["price"]
    assert preview["month"]["month"] == price["month"] == BEFORE and price["pool_hours"] == preview["month"]["hours_ok"]
    tenants = {r["tenant"]: r for r in price["tenants"]}
    assert {"search", "vision", "etl"} <= set(tenants) and "platform" not in tenants
    platform = {r["kind"]: r for r in price["platform"]}
    assert {"platform_idle", "platform_dark_discount", "total", "cost"} <= set(platform)
    for side in ("before", "after"):
        invoices = sum((Decimal(r[side]) for r in tenants.values()), Decimal(0))
        assert invoices + Decimal(platform["total"][side]) == Decimal(platform["cost"][side]), side
    assert Decimal(platform["cost"]["after"]) > Decimal(platform["cost"]["before"])  # energy costs more
    assert Decimal(platform["total"]["delta"]) > 0  # the idle share of the dearer energy falls to the platform


def test_quota_use_and_the_preemption_estimate(session):
    """vision holds 6 GPUs every hour; its quota 4 + borrowing 4 admits that, 2 + 2 would leave 2 GPUs out each hour."""
    v1 = seed(session)
    fill_month(session, BEFORE, v1.id, gpus=16, usage=[("vision", "training", False, 6 * 3600)], breach_hours=0)

    def shrink(data: dict) -> None:
        data["quotas"][0].update(guaranteed_gpus=2, borrowing_limit=2, lending_limit=1)

    change = draft(session, v1, edit=shrink)
    rows = {(r["tenant"], r["pool"]): r for r in impact.preview(session=session, change=change)["quota_use"]}
    vision = rows[("vision", "mixed-a100")]
    hours = impact.resolve_month(session=session, month=BEFORE)["hours_ok"]
    assert (vision["peak_gpus"], vision["mean_gpus"]) == ("6.00", "6.00")
    assert (vision["guaranteed_before"], vision["limit_before"], vision["guaranteed_after"], vision["limit_after"]) == (4, 8, 2, 4)
    assert (vision["hours_borrowing_before"], vision["hours_borrowing_after"]) == (hours, hours)
    assert (vision["hours_over_limit_before"], vision["hours_over_limit_after"]) == (0, hours)
    assert Decimal(vision["gpu_hours_over_limit_after"]) == 2 * hours and vision["preempted"] == "more"


def test_quota_use_is_pure_and_says_fewer_when_limits_grow():
    from tests.support.review import example_document

    base = example_document()
    data = base.to_data()
    data["quotas"][0]["borrowing_limit"] = 8
    from app.policy.document import PolicyDocument

    doc = PolicyDocument.model_validate(data)
    use = {("vision", "mixed-a100"): [Decimal(10), Decimal(2)]}
    row = impact.quota_use(use, 4, base, doc)[0]
    assert (row["peak_gpus"], row["mean_gpus"]) == ("10.00", "3.00")  # 12 GPU-hours over 4 ingested hours
    assert (row["hours_over_limit_before"], row["hours_over_limit_after"]) == (1, 0) and row["preempted"] == "fewer"


async def test_preview_route_month_default_and_validation(fresh_engine):
    from app.core.db import unit_of_work
    from app.policy.service import latest_version

    client, headers = client_for(fresh_engine)
    with unit_of_work(fresh_engine) as session:
        v1 = latest_version(session=session)
        fill_month(session, BEFORE, v1.id)
        fill_month(session, LAST, v1.id, skip=range(2, 10_000))
        change_id = draft(session, v1, edit=set_quota(6)).id
    url = f"/api/v1/policy/changes/{change_id}/preview"
    body = client.get(url, headers=headers).json()
    assert body["month"]["month"] == BEFORE and body["month"]["note"] is None
    assert body["months"][0] == {"month": LAST, "hours_expected": body["months"][0]["hours_expected"], "hours_ok": 2}
    assert body["price"] is None and body["quota_use"][0]["tenant"] == "vision"
    assert client.get(url, headers=headers, params={"month": LAST}).json()["month"]["month"] == LAST
    for bad in ("2026-13", f"{utcnow().year + 1}-01"):
        refused = client.get(url, headers=headers, params={"month": bad})
        assert refused.status_code == 422 and refused.headers["content-type"].startswith("application/problem+json")
        assert [e["path"] for e in refused.json()["errors"]] == ["month"]
