"""The fleet's month cost (app.billing.fleet_cost): priced from rollups while the month is open, then the rated figure."""

from __future__ import annotations

from decimal import Decimal

import pytest

from app.billing import periods
from app.billing.fleet_cost import month_cost
from app.billing.loader import DocumentCache
from app.core.settings import get_settings
from app.web import overview_panels
from tests.support.pages import overview_month

pytestmark = pytest.mark.anyio


@pytest.fixture
def seeded(session) -> dict:
    return overview_month(session)


async def test_month_cost_priced_from_rollups_then_from_rated_period(session, seeded):
    hours = seeded["hours"]
    tz = get_settings().tz
    month, start, end = overview_panels._month_bounds(hours[0].astimezone(tz).date(), tz)
    computed = month_cost(session=session, month=month, start=start, end=end,
                                                docs=DocumentCache(session))
    # SPEC worked example: 2 A100s at 1.30 per GPU-hour = 2.60 per hour.
    assert computed.source == "computed" and computed.cost == Decimal("2.60") * len(hours)
    assert computed.utilisation == Decimal(6480) / Decimal(7200)
    periods.rate(session=session, period=month, actor="test")
    rated = month_cost(session=session, month=month, start=start, end=end,
                                             docs=DocumentCache(session))
    assert rated.source == "rated" and rated.cost == computed.cost
