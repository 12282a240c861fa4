"""Fixtures for review tests: the app on a database of its own, and the seeded first policy version."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi import FastAPI
from sqlmodel import Session

from app.core.db import unit_of_work
from app.core.deps import get_session
from app.main import create_app
from tests.review.review_builders import seed


@pytest.fixture
def app(fresh_engine) -> Iterator[FastAPI]:
    """The real app on a database of its own, committing per request as in production."""
    application = create_app()

    def _session() -> Iterator[Session]:
        with unit_of_work(fresh_engine) as session:
            yield session

    application.dependency_overrides[get_session] = _session
    yield application
    application.dependency_overrides.clear()


@pytest.fixture
def v1(fresh_engine):
    """The seeded first policy version."""
    with unit_of_work(fresh_engine) as session:
        return seed(session)
