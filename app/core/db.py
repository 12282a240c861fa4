"""Engine and session handling. Services flush; only `unit_of_work` and the request dependency commit."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path

from sqlalchemy import event
from sqlalchemy.engine import Engine
from sqlmodel import Session, create_engine, select

from app.core.settings import get_settings


def _private_sqlite_file(path: Path) -> None:
    """Create a missing database file 0600 in a folder made 0700: it holds password hashes and invoices.

    SQLite gives its -wal and -shm files the database file's mode, so they stay private too.
    """
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    if not path.exists():
        os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))


def make_engine(url: str) -> Engine:
    """Create an engine; SQLite gets a busy timeout and foreign keys, and its file is created private."""
    if url.startswith("sqlite"):
        path = url.split("///", 1)[-1]
        if path and path != ":memory:":
            _private_sqlite_file(Path(path))
        # Two per server worker thread (40): a read's own plus its token-use bookkeeping, so none waits.
        engine = create_engine(url, connect_args={"timeout": 30, "check_same_thread": False}, pool_size=10,
                               max_overflow=70)

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_connection, _record):  # pragma: no cover - trivial
            # pysqlite's own transaction handling begins late, so a SAVEPOINT opened before any write
            # would start (and its RELEASE commit) the real transaction: take BEGIN into our hands.
            dbapi_connection.isolation_level = None
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.close()

        @event.listens_for(engine, "begin")
        def _sqlite_begin(conn):  # pragma: no cover - trivial
            # `sqlite_immediate` takes the write lock up front (workers claiming hours wait here).
            conn.exec_driver_sql("BEGIN IMMEDIATE" if conn.get_execution_options().get("sqlite_immediate") else "BEGIN")

        return engine
    if url.startswith("postgresql://"):
        url = "postgresql+psycopg://" + url.removeprefix("postgresql://")
    return create_engine(url, pool_pre_ping=True, pool_size=10, max_overflow=20)


@lru_cache
def get_engine() -> Engine:
    return make_engine(get_settings().database_url)


@contextmanager
def unit_of_work(engine: Engine | None = None) -> Iterator[Session]:
    """The one place outside requests that commits: commit on success, roll back on any error."""
    session = Session(engine or get_engine(), expire_on_commit=False)
    try:
        yield session
        session.commit()
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()


def is_postgres(session_or_engine) -> bool:
    bind = session_or_engine.get_bind() if isinstance(session_or_engine, Session) else session_or_engine
    return bind.dialect.name == "postgresql"


def sqlite_write_lock(session: Session) -> None:
    """SQLite: begin the session's transaction with the write lock (BEGIN IMMEDIATE), so a read that turns into a
    write waits for another writer instead of failing on a stale snapshot. A session whose transaction has already
    begun keeps the one its caller began (SQLite cannot take the lock at BEGIN after the fact). PostgreSQL: nothing;
    callers lock rows or take advisory locks."""
    if session.get_bind().dialect.name == "sqlite" and isinstance(session.bind, Engine) and not session.in_transaction():
        session.connection(execution_options={"sqlite_immediate": True})


def ping(session: Session) -> None:
    """Ask the database a trivial question; raises the driver's error when it does not answer."""
    session.exec(select(1)).one()
