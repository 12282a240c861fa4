"""One simulator per test session: building its 28-day energy table takes about a second."""

from __future__ import annotations

import pytest

from app.metrics.simulator import Simulator


@pytest.fixture(scope="session")
def sim() -> Simulator:
    return Simulator(seed=42, gpus=32)
