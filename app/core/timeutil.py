"""UTC helpers. Datetimes are always aware (SQLModel stores them as UTC); rollup keys are epoch seconds."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

SECONDS_PER_MINUTE = 60
SECONDS_PER_HOUR = 3600  # the one definition; rollup hours are epoch seconds on multiples of it
SECONDS_PER_DAY = 24 * SECONDS_PER_HOUR
HOUR = timedelta(seconds=SECONDS_PER_HOUR)


def utcnow() -> datetime:
    return datetime.now(UTC)


def aware(dt: datetime) -> datetime:
    """Treat a naive datetime as UTC; convert an aware one to UTC."""
    return dt.replace(tzinfo=UTC) if dt.tzinfo is None else dt.astimezone(UTC)


def epoch(dt: datetime) -> int:
    return int(aware(dt).timestamp())


def from_epoch(seconds: int | float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


def floor_hour(dt: datetime) -> datetime:
    return aware(dt).replace(minute=0, second=0, microsecond=0)


def hours_between(start: datetime, end: datetime) -> list[datetime]:
    """Hour starts h with start <= h < end (both floored to the hour)."""
    h, stop = floor_hour(start), aware(end)
    out = []
    while h < stop:
        out.append(h)
        h += HOUR
    return out


def parse_iso(value: str) -> datetime:
    """Parse an ISO 8601 timestamp (a trailing Z allowed); naive means UTC."""
    return aware(datetime.fromisoformat(value.replace("Z", "+00:00")))


def hour_runs(hours: list[datetime]) -> list[tuple[datetime, datetime]]:
    """Consecutive hour starts as (first, last) runs, in order: [00:00, 01:00, 02:00, 05:00] -> (00:00, 02:00), (05:00, 05:00)."""
    runs: list[tuple[datetime, datetime]] = []
    for hour in sorted(aware(h) for h in hours):
        if runs and hour - runs[-1][1] == HOUR:
            runs[-1] = (runs[-1][0], hour)
        else:
            runs.append((hour, hour))
    return runs


def format_runs(hours: list[datetime], limit: int = 5) -> str:
    """Hours as ISO runs, e.g. "2026-11-20T06:00..2026-11-30T23:00, 2026-12-01T04:00" (at most `limit` runs shown)."""
    runs = hour_runs(hours)
    shown = [f"{a:%Y-%m-%dT%H:%M}" + (f"..{b:%Y-%m-%dT%H:%M}" if b != a else "") for a, b in runs[:limit]]
    return ", ".join(shown) + (f" and {len(runs) - limit} more run(s)" if len(runs) > limit else "")
