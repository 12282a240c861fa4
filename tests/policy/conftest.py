"""Fixtures for policy tests: the SPEC example document (text, document, data)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from app.policy.document import PolicyDocument
from app.policy.parsing import parse_document

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
