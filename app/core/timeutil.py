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
