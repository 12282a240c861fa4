"""Fixtures for page tests: a rated month of billing data (the route harness comes from tests.support.routes)."""

from __future__ import annotations

import pytest

from tests.support.pages import seeded_month


@pytest.fixture
def seeded(session) -> dict:
    """search (inference), vision (training, pays penalties), etl; a MIG node; one month rated."""
    return seeded_month(session)
