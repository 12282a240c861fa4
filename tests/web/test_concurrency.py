"""A real uvicorn under parallel and back-to-back use: read-your-write, login throttling, SQLite concurrency."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import httpx
import pytest
from sqlmodel import Session, func, select

from app.auth import service
from app.auth.models import ApiToken, LoginAttempt
from app.core.db import make_engine, unit_of_work
from tests.support.databases import (
    BACKENDS,
    drop_postgres_database,
    migrated,
    new_postgres_database,
    new_sqlite_database,
)
from tests.support.review import seed
from tests.support.routes import page_csrf
from tests.support.server import running_portal

PASSWORD = "correct horse battery staple"
WORKERS = 32
GUESSES = 80


@pytest.fixture(scope="module", params=BACKENDS)
def served(request, tmp_path_factory) -> Iterator[tuple]:
    """One portal per backend on a database of its own, seeded with users, tokens and policy v1."""
    url = (migrated(new_sqlite_database(tmp_path_factory.mktemp("served"))) if request.param == "sqlite"
           else migrated(new_postgres_database()))
    engine = make_engine(url)
    tokens = {}
    with unit_of_work(engine) as s:
        seed(s)
        for name, role in [("ada", "admin"), ("olga", "operator"), ("vic", "viewer"), ("victim", "viewer")]:
            user = service.create_user(session=s, name=name, role=role, password=PASSWORD, actor="test")
            _, tokens[name] = service.create_token(session=s, user=user, scopes="write",
                                                   lifetime=timedelta(days=1), actor="test")
    try:
        with running_portal(url) as portal:
            yield portal, engine, tokens
    finally:
        engine.dispose()
        if request.param == "postgres":
            drop_postgres_database(url)


def _bearer(raw: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {raw}"}


def _signed_in(base: str, name: str) -> tuple[httpx.Client, httpx.Response]:
    """A browser-like client that has just posted the sign-in form; returns it and the answer."""
    client = httpx.Client(base_url=base, timeout=60)
    csrf = page_csrf(client.get("/login").text)
    answer = client.post("/login", data={"username": name, "password": PASSWORD, "csrf_token": csrf})
    return client, answer


def test_create_then_read_and_withdraw_never_misses(served):
    portal, _, tokens = served
    misses = []
    with httpx.Client(base_url=portal.base, headers=_bearer(tokens["olga"]), timeout=60) as client:
        for i in range(100):
            created = client.post("/api/v1/policy/changes", json={"title": f"rw {i}", "justification": "loop"})
            assert created.status_code == 201, created.text
            change_id = created.json()["id"]
            read = client.get(f"/api/v1/policy/changes/{change_id}")
            gone = client.post(f"/api/v1/policy/changes/{change_id}/withdraw")
            if read.status_code != 200 or gone.status_code != 200:
                misses.append((i, read.status_code, gone.status_code))
    assert misses == []


def test_sign_in_then_open_a_page_never_bounces_to_login(served):
    portal, _, _ = served
    misses = []
    for i in range(40):
        client, answer = _signed_in(portal.base, "vic")
        try:
            assert answer.status_code == 303, answer.text
            page = client.get("/policy")
            if page.status_code != 200 or "/login" in str(page.url):
                misses.append((i, page.status_code))
        finally:
            client.close()
    assert misses == []


def test_parallel_guesses_check_at_most_the_lockout_number(served):
    portal, engine, _ = served
    forms = []
    # More guesses than the server has worker threads (40): waiting writers must not starve the lock holder.
    # Each form is fetched on a connection the server closes at once, so every guess opens a fresh one: an idle
    # kept-alive connection would be closed by uvicorn after its keep-alive timeout (5 s) while the 80 forms load
    # under a busy machine, and a guess sent as it closes is lost ("Server disconnected without sending a response").
    for _ in range(GUESSES):
        client = httpx.Client(base_url=portal.base, timeout=120)
        forms.append((client, page_csrf(client.get("/login", headers={"Connection": "close"}).text)))

    def guess(form) -> int:
        client, csrf = form
        return client.post("/login", data={"username": "victim", "password": "wrong guess 12345",
                                           "csrf_token": csrf}).status_code

    with ThreadPoolExecutor(len(forms)) as pool:
        statuses = Counter(pool.map(guess, forms))
    for client, _ in forms:
        client.close()
    with Session(engine) as s:
        checked = s.exec(select(func.count()).select_from(LoginAttempt).where(LoginAttempt.username == "victim")).one()
    assert checked <= service.MAX_FAILURES, (checked, statuses)
    # The guess that reaches the limit is already told to wait (429); the rest are refused unchecked.
    assert set(statuses) <= {401, 429} and statuses[401] < checked, statuses
    # Locked now, even for the right password.
    assert _signed_in(portal.base, "victim")[1].status_code == 429


def test_thirty_two_parallel_mixed_requests_answer_without_a_500(served):
    portal, engine, tokens = served
    browser, answer = _signed_in(portal.base, "ada")
    assert answer.status_code == 303
    change = httpx.post(f"{portal.base}/api/v1/policy/changes", headers=_bearer(tokens["olga"]),
                        json={"title": "busy", "justification": "mixed load"}, timeout=60).json()["id"]

    def one(i: int) -> int:
        kind = i % 4
        if kind == 0:  # token-authenticated read (records the token's last use)
            return httpx.get(f"{portal.base}/api/v1/me", headers=_bearer(tokens["vic"]), timeout=120).status_code
        if kind == 1:  # a sign-in (a write: session row, login attempt)
            client, response = _signed_in(portal.base, "olga")
            client.close()
            return response.status_code
        if kind == 2:  # a page view on a session cookie
            return httpx.get(f"{portal.base}/policy", cookies=browser.cookies, timeout=120).status_code
        return httpx.post(f"{portal.base}/api/v1/policy/changes/{change}/comments", headers=_bearer(tokens["olga"]),
                          json={"body": f"comment {i}"}, timeout=120).status_code

    with ThreadPoolExecutor(WORKERS) as pool:
        statuses = Counter(pool.map(one, range(WORKERS * 3)))
    browser.close()
    assert statuses[500] == 0 and set(statuses) <= {200, 201, 303}, (statuses, portal.log()[-3000:])
    # The reads' token-use bookkeeping (best effort, its own transaction) got through at least once.
    with Session(engine) as s:
        vic = service.get_user_by_name(session=s, name="vic")
        assert s.exec(select(ApiToken.last_used_at).where(ApiToken.user_id == vic.id)).one() is not None
