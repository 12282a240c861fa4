"""The request's unit of work: committed after the route returns and BEFORE the response is sent.

One mechanism for every route, HTML or JSON: `SessionDep` is a `yield` dependency with
`scope="function"`, so FastAPI runs the code after `yield` when the route function has built its
response but before a byte of it goes out (the default request scope would run it after sending,
acknowledging writes that might still fail). A failed COMMIT becomes an error answer through the
one problem handler (problem+json or the error page) and rolls back everything the route flushed,
its Idempotency-Key record included, so a retry runs again. Unsafe methods on SQLite take the
write lock at BEGIN (BEGIN IMMEDIATE, waiting up to the busy timeout) instead of failing on a stale
read snapshot when they first write, and queue for their turn in the event loop first: a worker
thread blocked on BEGIN IMMEDIATE while the lock holder waits for a free thread would deadlock.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterator
from typing import Annotated

import anyio
from anyio.lowlevel import RunVar
from fastapi import Depends, Request
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlmodel import Session

from app.core.db import get_engine, sqlite_write_lock
from app.core.errors import AppError

log = logging.getLogger("app.db")
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "TRACE"})


class NotSaved(AppError):
    """The database refused the COMMIT: nothing the request did was kept."""

    def __init__(self, detail: str, *, status: int = 503):
        super().__init__(detail=detail, status=status, title="Not saved")
        self.headers = {"Retry-After": "1"} if status == 503 else {}


def commit_or_raise(session: Session) -> None:
    """Commit `session`; a refused COMMIT is rolled back and raised as NotSaved (409 conflict, else 503)."""
    try:
        session.commit()
    except DBAPIError as exc:
        session.rollback()
        log.warning("commit failed: %s", exc.orig if exc.orig is not None else exc)
        if isinstance(exc, IntegrityError):
            raise NotSaved("The change conflicts with data saved meanwhile and was not saved; reload and retry",
                           status=409) from exc
        raise NotSaved("The database could not save the change; nothing was changed. Retry shortly.") from exc


_sqlite_writer: RunVar[anyio.Lock] = RunVar("chargeback_sqlite_writer")


def _writes_sqlite(request: Request) -> bool:
    return request.method not in SAFE_METHODS and get_engine().dialect.name == "sqlite"


async def _sqlite_write_turn(request: Request) -> AsyncIterator[None]:
    """One SQLite writer per process at a time, waiting here (not in a worker thread) for its turn."""
    if not _writes_sqlite(request):
        yield
        return
    try:
        lock = _sqlite_writer.get()
    except LookupError:
        lock = anyio.Lock()
        _sqlite_writer.set(lock)
    async with lock:
        yield


def get_session(
    request: Request, _turn: Annotated[None, Depends(_sqlite_write_turn, scope="function")]
) -> Iterator[Session]:
    engine = get_engine()
    session = Session(engine, expire_on_commit=False)
    if _writes_sqlite(request):
        sqlite_write_lock(session)
    try:
        yield session
        commit_or_raise(session)
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()


SessionDep = Annotated[Session, Depends(get_session, scope="function")]
