"""Fixtures and builders for route tests: the app on the per-test rollback session, users by role, signed-in clients."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest
from fastapi import FastAPI
from sqlmodel import Session

from app.auth import service, sessions
from app.auth.models import User
from app.core.deps import get_session
from app.main import create_app

BASE_URL = "http://portal.test"
ROLES = ("admin", "operator", "reviewer", "finance", "viewer", "tenant")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def app(session: Session) -> Iterator[FastAPI]:
    """The real app whose request unit of work runs inside the test's rolled-back transaction."""
    application = create_app()

    def _session() -> Iterator[Session]:
        try:
            yield session
            session.commit()  # a savepoint release under the test's outer transaction
        except BaseException:
            session.rollback()
            raise

    application.dependency_overrides[get_session] = _session
    yield application
    application.dependency_overrides.clear()


@pytest.fixture
async def client(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    """An anonymous client (keeps cookies, like a browser)."""
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url=BASE_URL) as c:
        yield c


def make_user(session: Session, name: str, role: str, *, tenants: list[str] | None = None,
              password: str | None = None) -> User:
    """A committed user created through the service (no password: no argon2 cost)."""
    if tenants is None and role == "tenant":
        tenants = ["team-a"]
    user = service.create_user(session=session, name=name, role=role, password=password, tenants=tenants or [],
                               actor="test")
    session.commit()  # a request that fails rolls back to its own start, not before this user
    return user


def sign_in(client: httpx.AsyncClient, session: Session, user: User) -> str:
    """Give `client` a live session cookie and CSRF nonce for `user`; returns the CSRF token to send."""
    session_id = service.start_session(session=session, user=user)
    session.commit()
    nonce = "test-nonce-" + user.name
    client.cookies.set(sessions.SESSION_COOKIE, sessions.sign_session_id(session_id), domain="portal.test")
    client.cookies.set(sessions.CSRF_COOKIE, nonce, domain="portal.test")
    return sessions.csrf_token_for(nonce, session_id)


def page_csrf(html: str) -> str:
    """The CSRF token a page embeds (hidden form field)."""
    match = re.search(r'name="csrf_token" value="([0-9a-f]+)"', html)
    assert match, "page has no CSRF field"
    return match.group(1)


@pytest.fixture
def fast_hashing(monkeypatch):
    """Cheap argon2 parameters for tests about login logic, not hashing (test_passwords uses the real ones)."""
    from argon2 import PasswordHasher

    from app.auth import passwords

    cheap = PasswordHasher(time_cost=1, memory_cost=1024, parallelism=1)
    monkeypatch.setattr(passwords, "_hasher", cheap)
    monkeypatch.setattr(passwords, "_DUMMY_HASH", cheap.hash("timing only"))
