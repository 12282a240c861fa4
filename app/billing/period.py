"""The billing `Period` value type: a calendar month as UTC bounds, and reading the stored period row.

Apart from `periods` (the lifecycle that rates, closes and corrects), so readers never import writers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, date, datetime
from zoneinfo import ZoneInfo

from sqlalchemy import select
from sqlmodel import Session

from app.billing.models import BillingPeriod, PeriodStatus
from app.core.errors import FieldError, Invalid, NotFound
from app.core.settings import get_settings
from app.core.timeutil import utcnow
from app.metrics.date_ranges import DateRange

_PERIOD = re.compile(r"^(\d{4})-(\d{2})$")


@dataclass(frozen=True)
class Period:
    """A calendar month in the billing timezone, as UTC instants [start, end)."""

    month: str
    start: datetime
    end: datetime


def month_name(year: int, month: int) -> str:
    """"YYYY-MM" of a calendar month."""
    return f"{year:04d}-{month:02d}"


def next_month(year: int, month: int) -> tuple[int, int]:
    """The calendar month after (year, month)."""
    return year + (month == 12), month % 12 + 1


def parse_period(value: str, *, field_path: str = "period") -> Period:
    """Parse "YYYY-MM" into the month's UTC bounds in the configured billing timezone."""
    match = _PERIOD.match(value or "")
    if not match or not 1 <= int(match.group(2)) <= 12 or int(match.group(1)) < 1970:
        raise Invalid(
            f"{value!r} is not a billing period; use YYYY-MM, e.g. 2026-10",
            [FieldError(field_path, "expected YYYY-MM with a month from 01 to 12")],
        )
    year, month = int(match.group(1)), int(match.group(2))
    tz = get_settings().tz
    start = datetime(year, month, 1, tzinfo=tz)
    end = datetime(*next_month(year, month), 1, tzinfo=tz)
    return Period(month=value, start=start.astimezone(UTC), end=end.astimezone(UTC))


def require_started(period: Period) -> None:
    """A month that has not begun has nothing to bill: 404."""
    if period.start > utcnow():
        raise NotFound(f"Billing period {period.month} has not started yet")


def get_period(*, session: Session, month: str) -> BillingPeriod | None:
    """The stored period row of a month, if any."""
    return session.execute(select(BillingPeriod).where(BillingPeriod.month == month)).scalars().first()


def rated_period(*, session: Session, month: str) -> BillingPeriod:
    """The stored period, or 404 when it is unknown, in the future or never rated."""
    p = parse_period(month)
    require_started(p)
    row = get_period(session=session, month=p.month)
    if row is None or row.status == PeriodStatus.OPEN:
        raise NotFound(f"Billing period {p.month} has not been rated yet")
    return row


@dataclass(frozen=True)
class MonthPart:
    """The part of one calendar month a window covers, and how it is priced."""

    month: str
    start: datetime  # UTC, inclusive
    end: datetime  # UTC, exclusive
    whole: bool  # the window covers the whole month


def month_parts(window: DateRange) -> list[MonthPart]:
    """The window cut at month boundaries of the billing time zone."""
    parts = []
    year, month = window.start.year, window.start.month
    while date(year, month, 1) <= window.end:
        first = datetime(year, month, 1, tzinfo=window.tz).astimezone(ZoneInfo("UTC"))
        after = datetime(*next_month(year, month), 1, tzinfo=window.tz).astimezone(ZoneInfo("UTC"))
        start, end = max(first, window.start_utc), min(after, window.end_utc)
        parts.append(MonthPart(month_name(year, month), start, end, start == first and end == after))
        year, month = next_month(year, month)
    return parts
