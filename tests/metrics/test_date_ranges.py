"""Date ranges of whole local days: defaults, and one limit for pages and the usage API alike."""

from datetime import date, timedelta

import pytest

from app.core.errors import Invalid
from app.core.settings import get_settings
from app.metrics.date_ranges import MAX_RANGE_DAYS, date_range


def test_date_range_rules():
    tz = get_settings().tz
    today = date(2026, 11, 30)
    default = date_range(None, None, today=today, tz=tz)
    assert (default.start, default.end) == (date(2026, 11, 1), today)
    assert (default.end_utc - default.start_utc) == timedelta(days=30)
    with pytest.raises(Invalid) as err:
        date_range(date(2025, 1, 1), today, today=today, tz=tz)
    assert err.value.errors[0].path == "query.end"


def test_the_limit_is_the_usage_apis():
    today = date(2026, 11, 30)
    longest = date_range(today - timedelta(days=MAX_RANGE_DAYS - 1), today, today=today, tz=get_settings().tz)
    assert (longest.end - longest.start).days + 1 == MAX_RANGE_DAYS == 400
