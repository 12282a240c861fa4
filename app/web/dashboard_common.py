"""Shared plumbing of the dashboard pages: the date range and its presets, the active policy, chart JSON."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from decimal import Decimal
from urllib.parse import urlencode

from sqlmodel import Session
from starlette.requests import Request

from app.core.settings import get_settings
from app.core.timeutil import utcnow
from app.metrics.date_ranges import DateRange, date_range
from app.policy.document import PolicyDocument


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


def active_document(session: Session, at: datetime | None = None) -> PolicyDocument | None:
    """The policy in effect now, or None when there is none (or it cannot be read)."""
    from app.policy.service import active_version, load_document

    version = active_version(session=session, at=at)
    if version is None:
        return None
    try:
        return load_document(version)
    except ValueError:  # a stored document that no longer parses should not take the pages down
        return None


def chart_json(data: dict) -> str:
    """JSON for a <script type="application/json"> block; Decimals become floats (drawing only)."""

    def default(value):
        if isinstance(value, Decimal):
            return float(value)
        if isinstance(value, date):
            return value.isoformat()
        raise TypeError(type(value).__name__)

    # "</" would end the script element early if a name contained it.
    return json.dumps(data, default=default, separators=(",", ":")).replace("</", "<\\/")


def sparkline(values: list[Decimal], *, width: int = 120, height: int = 28) -> str:
    """SVG polyline points for a small trend line (server-drawn: no script needed per row)."""
    if not values:
        return ""
    top = max(values) or Decimal(1)
    step = width / max(1, len(values) - 1)
    points = []
    for i, v in enumerate(values):
        y = height - 2 - float(v / top) * (height - 4)
        points.append(f"{i * step:.1f},{y:.1f}")
    return " ".join(points)
