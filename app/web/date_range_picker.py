"""The dashboard pages' date range: the requested range (default: the last 30 days), its presets, and the
picker partial's template variables."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, timedelta
from urllib.parse import urlencode

from starlette.requests import Request

from app.core.settings import get_settings
from app.core.timeutil import utcnow
from app.metrics.date_ranges import DateRange, date_range


@dataclass(frozen=True)
class RangeContext:
    period: DateRange
    now: datetime
    today: date
    timezone: str


def resolve(start: date | None, end: date | None) -> RangeContext:
    """The requested range (default: the last 30 days); a readable 422 naming the field when it is invalid."""
    settings = get_settings()
    now = utcnow()
    today = now.astimezone(settings.tz).date()
    period = date_range(start, end, today=today, tz=settings.tz)
    return RangeContext(period=period, now=now, today=today, timezone=settings.billing_timezone)


def month_start(day: date) -> date:
    return day.replace(day=1)


def presets(today: date) -> list[tuple[str, date, date]]:
    """This month, last month, last 30 days."""
    first = month_start(today)
    last_end = first - timedelta(days=1)
    return [
        ("This month", first, today),
        ("Last month", month_start(last_end), last_end),
        ("Last 30 days", today - timedelta(days=29), today),
    ]


def range_context(request: Request, rc: RangeContext, *, keep: dict[str, str] | None = None) -> dict:
    """Template variables of the date-range picker partial (templates/_partials/range.html)."""
    keep = {k: v for k, v in (keep or {}).items() if v}
    items = []
    for label, start, end in presets(rc.today):
        query = urlencode({"start": start.isoformat(), "end": end.isoformat(), **keep})
        current = start == rc.period.start and end == rc.period.end
        items.append({"label": label, "href": f"{request.url.path}?{query}", "current": current})
    return {"period": rc.period, "range_action": request.url.path, "range_presets": items, "range_keep": keep,
            "timezone": rc.timezone}
