"""Fixtures for ingestion tests: a stored policy version (the scenario's Prometheus comes from tests.support.ingest)."""

from __future__ import annotations

import pytest

from tests.support.ingest import add_policy


@pytest.fixture
def policy_id(session) -> int:
    return add_policy(session)
