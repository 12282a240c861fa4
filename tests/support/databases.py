"""Throwaway databases for tests: a fresh SQLite file or a fresh PostgreSQL database, built by migrations."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

from sqlalchemy import create_engine, text

from app.core.migrate import upgrade

BACKENDS = ["sqlite", "postgres"]
PG_ADMIN_URL = os.environ.get("CHARGEBACK_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")


def _psycopg(url: str) -> str:
    return "postgresql+psycopg://" + url.split("://", 1)[1]


def new_postgres_database(prefix: str = "cbtest") -> str:
    """Create an empty database on the test server and return its URL."""
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    admin = create_engine(_psycopg(PG_ADMIN_URL), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    return PG_ADMIN_URL.rsplit("/", 1)[0] + "/" + name


def drop_postgres_database(url: str) -> None:
    name = url.rsplit("/", 1)[1]
    admin = create_engine(_psycopg(PG_ADMIN_URL), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


def new_sqlite_database(directory: Path) -> str:
    return f"sqlite:///{directory / ('cb-' + uuid.uuid4().hex[:8] + '.db')}"


def migrated(url: str) -> str:
    upgrade(url)
    return url
