"""Fixtures for review tests: the app on a database of its own, the seeded first policy version, signed-in browsers."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
from fastapi import FastAPI
from sqlmodel import Session

from app.core.db import unit_of_work
from tests.support.review import seed
from tests.support.routes import asgi_client, make_user, sign_in


@pytest.fixture
def app(committed_app) -> FastAPI:
    """The real app on a database of its own, committing per request as in production."""
    return committed_app


@pytest.fixture
def v1(fresh_engine):
    """The seeded first policy version."""
    with unit_of_work(fresh_engine) as session:
        return seed(session)


@pytest.fixture
async def browser(app, fresh_engine) -> AsyncIterator:
    """Signed-in browsers by user name: (client, csrf token)."""
    clients: list[httpx.AsyncClient] = []

    async def open_as(name: str, role: str) -> tuple[httpx.AsyncClient, str]:
        client = asgi_client(app)
        clients.append(client)
        with Session(fresh_engine, expire_on_commit=False) as session:
            token = sign_in(client, session, make_user(session, name, role))
        return client, token

    yield open_as
    for c in clients:
        await c.aclose()
