"""Fixtures for policy tests: the SPEC example document (text, document, data), and the app on a database of its own."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi import FastAPI
from sqlmodel import Session

from app.core.db import unit_of_work
from app.core.deps import get_session
from app.main import create_app
from app.policy.document import PolicyDocument
from app.policy.parsing import parse_document
from tests.policy.review_builders import seed

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "policy.yaml"


@pytest.fixture(scope="session")
def example_text() -> str:
    return EXAMPLE.read_text()


@pytest.fixture(scope="session")
def example_doc(example_text) -> PolicyDocument:
    return parse_document(example_text)


@pytest.fixture
def data(example_doc) -> dict:
    """A fresh, mutable, JSON-ready copy of the example document."""
    return copy.deepcopy(example_doc.to_data())


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
