"""Fixtures for review tests: the app on a database of its own, and the seeded first policy version."""

from __future__ import annotations

import pytest
from fastapi import FastAPI

from app.core.db import unit_of_work
from tests.support.review import seed


@pytest.fixture
def app(committed_app) -> FastAPI:
    """The real app on a database of its own, committing per request as in production."""
    return committed_app


@pytest.fixture
def v1(fresh_engine):
    """The seeded first policy version."""
    with unit_of_work(fresh_engine) as session:
        return seed(session)
