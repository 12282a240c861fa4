"""The fleet's month cost (app.billing.fleet_cost): priced from rollups while the month is open, then the rated figure."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest

from app.billing import periods
from app.billing.fleet_cost import month_cost, range_cost
from app.billing.loader import DocumentCache
from app.billing.period import month_parts
from app.core.settings import get_settings
from app.metrics.date_ranges import DateRange
from tests.support.pages import overview_month

pytestmark = pytest.mark.anyio


def _whole_month(day, tz) -> DateRange:
    first = day.replace(day=1)
    return DateRange(first, (first + timedelta(days=32)).replace(day=1) - timedelta(days=1), tz)


@pytest.fixture
def seeded(session) -> dict:
    return overview_month(session)


async def test_month_cost_priced_from_rollups_then_from_rated_period(session, seeded):
    hours = seeded["hours"]
    tz = get_settings().tz
    (part,) = month_parts(_whole_month(hours[0].astimezone(tz).date(), tz))
    month, start, end = part.month, part.start, part.end
    computed = month_cost(session=session, month=month, start=start, end=end,
                                                docs=DocumentCache(session))
    # SPEC worked example: 2 A100s at 1.30 per GPU-hour = 2.60 per hour.
    assert computed.source == "computed" and computed.cost == Decimal("2.60") * len(hours)
    assert computed.utilisation == Decimal(6480) / Decimal(7200)
    periods.rate(session=session, period=month, actor="test")
    rated = month_cost(session=session, month=month, start=start, end=end,
                                             docs=DocumentCache(session))
    assert rated.source == "rated" and rated.cost == computed.cost


async def test_range_cost_prices_part_of_a_rated_month_from_its_own_hours(session, seeded):
    """The overview's cards follow the chosen range: part of a rated month is its own hours priced, never the
    month's stored total; the whole month is the rated figure."""
    hours, tz = seeded["hours"], get_settings().tz
    month = _whole_month(hours[0].astimezone(tz).date(), tz)
    periods.rate(session=session, period=month.start.strftime("%Y-%m"), actor="test")
    whole = range_cost(session=session, window=month, label="m", docs=DocumentCache(session))
    assert whole.source == "rated" and whole.cost == Decimal("2.60") * len(hours)
    first_day = hours[0].astimezone(tz).date()
    day = DateRange(first_day, first_day, tz)
    in_day = [h for h in hours if h.astimezone(tz).date() == first_day]
    part = range_cost(session=session, window=day, label="d", docs=DocumentCache(session))
    assert part.source == "computed" and part.cost == Decimal("2.60") * len(in_day)  # its hours, not the stored total
    empty = DateRange(month.start - timedelta(days=3), month.start - timedelta(days=1), tz)
    nothing = range_cost(session=session, window=empty, label="e", docs=DocumentCache(session))
    assert nothing.cost is None and nothing.source == "none"
