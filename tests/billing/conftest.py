"""Fixtures shared by the billing tests."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from app.billing import periods
from tests.support.billing import add_hour, store_policy

OCT1 = datetime(2026, 10, 1, tzinfo=UTC)


@pytest.fixture
def october(session):
    """October rated as a draft from two hours of the SPEC example (one with SLA breaches)."""
    v = store_policy(session)
    add_hour(session, hour=OCT1, version=v.id)
    add_hour(session, hour=OCT1 + timedelta(hours=1), version=v.id, breaches=())
    return periods.rate(session=session, period="2026-10", actor="fin")
