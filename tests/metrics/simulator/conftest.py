"""One simulator per test session: building its 28-day energy table takes about a second."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from app.metrics.simulator import Simulator

# A fixed UTC day: the tests' windows are inside it, so results never depend on the clock.
DAY = datetime(2026, 11, 28, tzinfo=UTC)


@pytest.fixture(scope="session")
def sim() -> Simulator:
    return Simulator(seed=42, gpus=32)
