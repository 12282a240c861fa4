"""The usage read side (app.metrics.usage_read): GPU-hours per tenant and class, daily usage with idle, dark-time share."""

from __future__ import annotations

from decimal import Decimal

import pytest

from app.core.settings import get_settings
from app.core.timeutil import utcnow
from app.metrics import usage_read
from app.metrics.date_ranges import date_range
from tests.support.pages import date_range_over, overview_month
from tests.support.rollups import overview_rollups

pytestmark = pytest.mark.anyio


@pytest.fixture
def rollups(session):
    return overview_rollups(session)


@pytest.fixture
def seeded(session) -> dict:
    return overview_month(session)


def test_query_is_exact_decimal_and_filters_tenants(session, rollups):
    tz = get_settings().tz
    period = date_range(None, None, today=utcnow().astimezone(tz).date(), tz=tz)
    rows = usage_read.gpu_hours_by_tenant_class(session=session, period=period, tenants=None)
    assert [(r.tenant, r.klass, r.gpu_hours) for r in rows] == [
        ("team-a", "inference", Decimal("6.000")), ("team-a", "training", Decimal("1.500")),
        ("team-b", "training", Decimal("3.000")),
    ]
    only_b = usage_read.gpu_hours_by_tenant_class(session=session, period=period, tenants=frozenset({"team-b"}))
    assert [r.tenant for r in only_b] == ["team-b"]
    assert usage_read.gpu_hours_by_tenant_class(session=session, period=period, tenants=frozenset()) == []


async def test_daily_usage_idle_and_dark_share(session, seeded):
    period = date_range_over(seeded["hours"])
    usage = usage_read.daily_usage(session=session, period=period, tenants=None)
    n = len(seeded["hours"])
    assert sum(usage.by_class["training"].values()) == Decimal(4320 * n) / 3600
    # Capacity 2 GPUs x 3600 s per hour; used 1800 + 2520 + 1800 + 360 = 6480 s: idle 720 s an hour.
    assert sum(usage.idle.values()) == Decimal(720 * n) / 3600
    member = usage_read.daily_usage(session=session, period=period, tenants=frozenset({"etl"}))
    assert member.idle is None and set(member.by_class) == {"preprocessing"}
    dark = usage_read.dark_share(session=session, period=period, tenants=None)
    assert dark.minute_share == Decimal(25) / 60 and dark.hour_share == Decimal(1800) / Decimal(6480)
