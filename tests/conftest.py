"""Shared fixtures. Every database-backed test runs on SQLite and on PostgreSQL, schema built by migrations."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from sqlalchemy.engine import Engine
from sqlmodel import Session

from app.core.cache import clear_all
from app.core.db import make_engine
from tests.support.databases import (
    BACKENDS,
    drop_postgres_database,
    migrated,
    new_postgres_database,
    new_sqlite_database,
)
from tests.support.markers import MARKING_FIXTURES, SLOW_MODULES
from tests.support.webhooks import TEST_WEBHOOK_ALLOW

# Webhook receivers in tests listen on loopback, and URLs that are only saved use made-up names: the operator's
# allow-list permits them (read by every Settings, and by the servers and workers tests start). Tests of the
# outbound policy itself give their own (empty) list.
os.environ["CHARGEBACK_WEBHOOK_ALLOW"] = TEST_WEBHOOK_ALLOW

# The route harness and the scenario's Prometheus, for every directory.
pytest_plugins = ["tests.support.routes", "tests.support.ingest", "tests.support.oidc"]


@pytest.fixture(autouse=True)
def _empty_answer_caches() -> Iterator[None]:
    """Each test starts with empty per-process caches: a rolled-back test leaves the data generation and row ids
    where they were, so the next test's keys can equal the last one's while its rows differ."""
    clear_all()
    yield
    clear_all()


def _fixtures_used(item) -> set[str]:
    out = set()
    for name, defs in getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {}).items():
        for definition in defs:
            out.add(f"{definition.func.__module__}.{name}")
    return out


def pytest_collection_modifyitems(config, items) -> None:
    """Mark each test postgres / prometheus / browser from its fixtures and backend parameters, and slow from
    its module."""
    for item in items:
        used = _fixtures_used(item)
        params = getattr(getattr(item, "callspec", None), "params", {})
        for marker, fixtures in MARKING_FIXTURES.items():
            if used & fixtures or (marker == "postgres" and "postgres" in params.values()):
                item.add_marker(marker)
        if item.module is not None and item.module.__name__ in SLOW_MODULES:
            item.add_marker("slow")


@pytest.fixture(scope="session", params=BACKENDS)
def db_url(request, tmp_path_factory) -> Iterator[str]:
    """A migrated database for the whole test session, one per backend."""
    if request.param == "sqlite":
        yield migrated(new_sqlite_database(tmp_path_factory.mktemp("sqlite")))
        return
    url = new_postgres_database()
    try:
        yield migrated(url)
    finally:
        drop_postgres_database(url)


@pytest.fixture(scope="session")
def engine(db_url) -> Iterator[Engine]:
    eng = make_engine(db_url)
    yield eng
    eng.dispose()


@pytest.fixture
def session(engine) -> Iterator[Session]:
    """A session inside a transaction that is rolled back after the test (services may still commit)."""
    connection = engine.connect()
    outer = connection.begin()
    sess = Session(bind=connection, join_transaction_mode="create_savepoint", expire_on_commit=False)
    try:
        yield sess
    finally:
        sess.close()
        outer.rollback()
        connection.close()


@pytest.fixture
def fresh_db_url(tmp_path, request) -> Iterator[str]:
    """An empty, migrated database of its own for tests that commit across processes (SQLite file)."""
    yield migrated(new_sqlite_database(tmp_path))


def _own_postgres() -> Iterator[Engine]:
    url = migrated(new_postgres_database())
    engine = make_engine(url)
    try:
        yield engine
    finally:
        engine.dispose()
        drop_postgres_database(url)


@pytest.fixture
def pg_engine() -> Iterator[Engine]:
    """A migrated PostgreSQL database of its own per test: for row locks and concurrency SQLite does not have."""
    yield from _own_postgres()


@pytest.fixture(params=BACKENDS)
def fresh_engine(request, tmp_path) -> Iterator[Engine]:
    """A migrated database of its own per test, both backends: for tests that commit, lock or crash."""
    if request.param == "sqlite":
        url = migrated(new_sqlite_database(tmp_path))
        eng = make_engine(url)
        yield eng
        eng.dispose()
        return
    yield from _own_postgres()
