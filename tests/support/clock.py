"""Clocks to hand the worker and its tasks: one stopped at a time, or the real one moved on at will."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

from app.core.timeutil import utcnow


def frozen(when: datetime) -> Callable[[], datetime]:
    """A clock that always reads `when` (bound now, not when it is read)."""
    return lambda: when


class MovedClock:
    """The real clock plus an offset that a test moves forward: "minutes pass" without waiting for them."""

    def __init__(self) -> None:
        self.offset = timedelta(0)

    def __call__(self) -> datetime:
        return utcnow() + self.offset

    def advance(self, by: timedelta) -> None:
        self.offset += by
