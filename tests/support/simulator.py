"""Simulator-test support: the fixed day the simulator tests look at."""

from __future__ import annotations

from datetime import UTC, datetime

# A fixed UTC day: the tests' windows are inside it, so results never depend on the clock.
DAY = datetime(2026, 11, 28, tzinfo=UTC)
