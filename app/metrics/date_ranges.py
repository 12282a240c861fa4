"""Date ranges of whole days in the billing time zone, and folding UTC hours into those days."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from zoneinfo import ZoneInfo

from sqlalchemy import func
from sqlmodel import Session

from app.core.errors import FieldError, Invalid
from app.core.timeutil import aware

# One limit for every usage read, pages and JSON alike (the API's, which clients already rely on).
MAX_RANGE_DAYS = 400


@dataclass(frozen=True)
class DateRange:
    """Whole days [start, end] in the billing time zone, and the UTC instants they cover."""

    start: date
    end: date
    tz: ZoneInfo

    @property
    def start_utc(self) -> datetime:
        return datetime.combine(self.start, time(0), self.tz).astimezone(ZoneInfo("UTC"))

    @property
    def end_utc(self) -> datetime:
        """Exclusive: midnight after `end`."""
        return datetime.combine(self.end + timedelta(days=1), time(0), self.tz).astimezone(ZoneInfo("UTC"))


def date_range(start: date | None, end: date | None, *, today: date, tz: ZoneInfo, default_days: int = 30) -> DateRange:
    """The requested range, defaulting to the last `default_days` days up to today; errors name the field."""
    end = end or today
    start = start or end - timedelta(days=default_days - 1)
    errors = []
    if start > end:
        errors.append(FieldError("query.start", "must be on or before the end date"))
    elif (end - start).days + 1 > MAX_RANGE_DAYS:
        errors.append(FieldError("query.end", f"the range may span at most {MAX_RANGE_DAYS} days"))
    if errors:
        raise Invalid("The date range is not valid", errors)
    return DateRange(start=start, end=end, tz=tz)


def days_of(period: DateRange) -> list[date]:
    """Every day of the range, in order."""
    return [period.start + timedelta(days=i) for i in range((period.end - period.start).days + 1)]


class DayOf:
    """hour (UTC) -> local date, memoised: a month has 720 distinct hours but many rows per hour."""

    def __init__(self, tz: ZoneInfo):
        self.tz = tz
        self.cache: dict[datetime, date] = {}

    def __call__(self, hour: datetime) -> date:
        day = self.cache.get(hour)
        if day is None:
            day = self.cache[hour] = aware(hour).astimezone(self.tz).date()
        return day


def day_column(session: Session, column, tz: ZoneInfo):
    """The local date of a UTC timestamp column, computed by PostgreSQL; None on SQLite (Python folds hours there).

    Grouping by day in the database returns ~30 rows a month instead of ~720 per key, and converting rows is
    what costs most in Python.
    """
    if session.get_bind().dialect.name != "postgresql":
        return None
    return func.date(func.timezone(tz.key, column))
