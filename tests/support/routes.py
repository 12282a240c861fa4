"""The route-test harness: the real app on a test database, httpx over ASGI, users by role, sign-in, tokens.

Registered for every test by tests/conftest.py (pytest_plugins); test modules import only its builders.
- `app`: the app whose request unit of work runs inside the test's rolled-back transaction (`session`).
- `committed_app`: the app on a database of the test's own (`fresh_engine`), committing per request.
- `client`: an anonymous httpx client on `app` (keeps cookies, like a browser).
- `api`: a sync facade acting as a chosen principal, on an app of its own over `fresh_engine`.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import timedelta
from functools import cache

import httpx
import pytest
from fastapi import FastAPI, Request
from fastapi.routing import iter_route_contexts
from sqlalchemy.engine import Engine
from sqlmodel import Session

from app.auth import service, sessions
from app.auth.deps import Principal, get_principal
from app.auth.models import User
from app.core.db import unit_of_work
from app.core.deps import get_session
from app.main import create_app

BASE_URL = "http://portal.test"
ROLES = ("admin", "operator", "reviewer", "finance", "viewer", "tenant")

FINANCE = Principal(name="fiona", roles=frozenset({"finance"}), user_id=1)
VIEWER = Principal(name="victor", roles=frozenset({"viewer"}), user_id=2)
VISION_MEMBER = Principal(name="vera", roles=frozenset({"tenant"}), tenants=frozenset({"vision"}), user_id=3)


# --- apps -----------------------------------------------------------------------------------------


def _in_test_transaction(current: Callable[[], Session]) -> Callable[[], Iterator[Session]]:
    """A request unit of work on the test's session: a savepoint release on success, a rollback on error."""

    def _session() -> Iterator[Session]:
        session = current()
        try:
            yield session
            session.commit()  # a savepoint release under the test's outer transaction
        except BaseException:
            session.rollback()
            raise

    return _session


def committing_app(engine: Engine) -> FastAPI:
    """The real app on `engine`, committing per request as in production."""
    application = create_app()

    def _session() -> Iterator[Session]:
        with unit_of_work(engine) as session:
            yield session

    application.dependency_overrides[get_session] = _session
    return application


@cache
def app_routes() -> list[tuple[str, str]]:
    """(method, path) for every HTTP endpoint the app serves (HEAD folded into GET, mounts excluded)."""
    out = set()
    for route in iter_route_contexts(create_app().routes):
        for method in route.methods or ():
            if method != "HEAD":
                out.add((method, route.path))
    return sorted(out, key=lambda mp: (mp[1], mp[0]))


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def app(session: Session) -> Iterator[FastAPI]:
    """The real app whose request unit of work runs inside the test's rolled-back transaction."""
    application = create_app()
    application.dependency_overrides[get_session] = _in_test_transaction(lambda: session)
    yield application
    application.dependency_overrides.clear()


@pytest.fixture(scope="module")
def module_app(engine: Engine) -> Iterator[tuple[FastAPI, dict]]:
    """One app per module and backend (for modules that would otherwise build it per case); bind with `bound_app`."""
    current: dict = {}
    application = create_app()
    application.dependency_overrides[get_session] = _in_test_transaction(lambda: current["session"])
    yield application, current
    application.dependency_overrides.clear()


@pytest.fixture
def bound_app(module_app, session: Session) -> Iterator[FastAPI]:
    """The module's app, its requests running inside this test's rolled-back transaction."""
    application, current = module_app
    current["session"] = session
    yield application
    current.clear()


@pytest.fixture
def committed_app(fresh_engine: Engine) -> Iterator[FastAPI]:
    """The real app on a database of its own, committing per request as in production."""
    application = committing_app(fresh_engine)
    yield application
    application.dependency_overrides.clear()


def asgi_client(app: FastAPI, base_url: str = BASE_URL) -> httpx.AsyncClient:
    """An httpx client over ASGI on `app`; app errors become 500 answers, as a server would send."""
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app, raise_app_exceptions=False), base_url=base_url)


@pytest.fixture
async def client(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    """An anonymous client (keeps cookies, like a browser)."""
    async with asgi_client(app) as c:
        yield c


# --- users, sign-in, tokens -----------------------------------------------------------------------


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


def bearer(session, name: str, role: str, tenants: list[str] | None = None) -> dict[str, str]:
    """Authorization header for a fresh user of `role` (tenant members bound to `tenants`)."""
    user = make_user(session, name, role, tenants=tenants)
    _, raw = service.create_token(session=session, user=user, scopes="read", lifetime=timedelta(days=1), actor="test")
    session.commit()
    return {"Authorization": f"Bearer {raw}"}


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


# --- acting as a principal ------------------------------------------------------------------------


class Api:
    """A sync facade over an httpx AsyncClient on the ASGI app, acting as a chosen principal."""

    def __init__(self, app):
        self.app = app
        self.principal = FINANCE

    def as_(self, principal: Principal) -> Api:
        self.principal = principal
        return self

    def request(self, method: str, url: str, **kwargs) -> httpx.Response:
        async def go():
            transport = httpx.ASGITransport(app=self.app)
            async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
                return await client.request(method, url, **kwargs)

        return asyncio.run(go())

    def get(self, url, **kw):
        return self.request("GET", url, **kw)

    def post(self, url, **kw):
        return self.request("POST", url, **kw)


def acting(app: FastAPI) -> Api:
    """`app` with its caller replaced by the Api's chosen principal (FINANCE until `as_`)."""
    holder = Api(app)

    def _principal(request: Request) -> Principal:
        request.state.principal = holder.principal
        return holder.principal

    app.dependency_overrides[get_principal] = _principal
    return holder


@pytest.fixture
def api(fresh_engine):
    """The app on a database of its own (requests really commit or roll back), as FINANCE by default."""
    return acting(committing_app(fresh_engine))


@pytest.fixture
def session_api(app):
    """The app inside the test's rolled-back transaction (both backends), as FINANCE by default."""
    return acting(app)


def problem(response: httpx.Response, status: int) -> dict:
    """The problem+json body of `response`, asserting its status and shape."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    body = response.json()
    assert body["status"] == status and body["title"] and body["detail"]
    return body
