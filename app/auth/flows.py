"""Server-side records of single sign-ons in progress: written when the browser leaves for the provider, consumed once.

The flow cookie (app.auth.oidc) binds a flow to the browser that started it; this record makes its callback
single-use: a callback URL replayed (from history, a log, a proxy) finds no record and is refused, even by a
provider that would redeem the same authorization code twice.
"""

from __future__ import annotations

import hashlib
from datetime import timedelta

from sqlalchemy import delete, text
from sqlmodel import Session, col

from app.auth.models import OidcFlow
from app.auth.oidc import FLOW_LIFETIME_S, PendingLogin
from app.core.db import sqlite_write_lock
from app.core.timeutil import utcnow

_LOCK_KEY = int.from_bytes(hashlib.sha256(b"oidc-sign-in").digest()[:8], "big", signed=True)


def _digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


def one_sign_in_at_a_time(session: Session) -> None:
    """Serialize single sign-ons until the caller commits: first sign-ins (one subject twice, one name) never race.

    PostgreSQL: a transaction-scoped advisory lock. SQLite: the write lock, taken at BEGIN (the login and
    callback are GETs, which the request unit of work would otherwise begin as readers).
    """
    bind = session.get_bind()
    if bind.dialect.name == "postgresql":
        session.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _LOCK_KEY})
    else:
        sqlite_write_lock(session)


def record(*, session: Session, pending: PendingLogin) -> None:
    """Keep the flow `pending` until its callback (or FLOW_LIFETIME_S); clears flows that expired unused."""
    one_sign_in_at_a_time(session)
    now = utcnow()
    session.exec(delete(OidcFlow).where(col(OidcFlow.expires_at) <= now))
    session.add(OidcFlow(state_sha256=_digest(pending.state), nonce_sha256=_digest(pending.nonce), created_at=now,
                         expires_at=now + timedelta(seconds=FLOW_LIFETIME_S)))
    session.flush()


def consume(*, session: Session, pending: PendingLogin) -> bool:
    """True once per recorded, unexpired flow: the record is deleted, and any later call for it is False."""
    one_sign_in_at_a_time(session)
    result = session.exec(delete(OidcFlow).where(
        col(OidcFlow.state_sha256) == _digest(pending.state), col(OidcFlow.nonce_sha256) == _digest(pending.nonce),
        col(OidcFlow.expires_at) > utcnow()))
    session.flush()
    return result.rowcount == 1
