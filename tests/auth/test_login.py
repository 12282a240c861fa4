"""Browser sign-in over HTTP: cookie flags, redirects, throttling, logout, pages behind login."""

import pytest
from sqlmodel import select

from app.auth import sessions
from app.auth.models import AuthSession
from tests.support.routes import asgi_client, make_user, page_csrf, sign_in

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("fast_hashing")]
PASSWORD = "a correct and long password"


async def _login(client, username, password, next_url="/"):
    token = page_csrf((await client.get("/login")).text)
    return await client.post("/login", data={"username": username, "password": password, "next": next_url,
                                             "csrf_token": token})


async def test_pages_redirect_to_login_and_back(client, session):
    make_user(session, "gina", "viewer", password=PASSWORD)
    first = await client.get("/admin/users?x=1")
    assert first.status_code == 303
    assert first.headers["location"] == "/login?next=/admin/users%3Fx%3D1"
    htmx = await client.get("/", headers={"HX-Request": "true"})
    assert htmx.headers["HX-Redirect"] == "/login?next=/"
    signed_in = await _login(client, "gina", PASSWORD, next_url="/?start=2026-11-01")
    assert signed_in.status_code == 303
    assert signed_in.headers["location"] == "/?start=2026-11-01"
    cookie = [c for c in signed_in.headers.get_list("set-cookie") if c.startswith(sessions.SESSION_COOKIE)][0]
    assert "HttpOnly" in cookie and "SameSite=lax" in cookie.replace("Lax", "lax")
    assert "Secure" not in cookie  # plain http here
    page = await client.get("/")
    assert page.status_code == 200
    assert "gina" in page.text and "Sign out" in page.text


async def test_cookie_is_secure_over_https(app, session):
    make_user(session, "hal", "viewer", password=PASSWORD)
    async with asgi_client(app, "https://portal.test") as c:
        response = await _login(c, "hal", PASSWORD)
    assert response.status_code == 303
    cookies = response.headers.get_list("set-cookie")
    assert all("Secure" in c for c in cookies if c.startswith(sessions.SESSION_COOKIE))


async def test_open_redirects_are_refused(client, session):
    make_user(session, "ivy", "viewer", password=PASSWORD)
    response = await _login(client, "ivy", PASSWORD, next_url="//evil.example/x")
    assert response.headers["location"] == "/"


async def test_wrong_password_then_lockout_with_retry_after(client, session):
    make_user(session, "jack", "viewer", password=PASSWORD)
    for _ in range(4):
        wrong = await _login(client, "jack", "not the password")
        assert wrong.status_code == 401
        assert "Wrong user name or password" in wrong.text
    locked = await _login(client, "jack", "not the password")
    assert locked.status_code == 429
    assert 840 < int(locked.headers["retry-after"]) <= 900
    assert (await _login(client, "jack", PASSWORD)).status_code == 429
    assert sessions.SESSION_COOKIE not in client.cookies


async def test_logout_ends_the_session_server_side(client, session):
    user = make_user(session, "kim", "viewer", password=PASSWORD)
    await _login(client, "kim", PASSWORD)
    stolen = client.cookies[sessions.SESSION_COOKIE]
    token = page_csrf((await client.get("/")).text)
    out = await client.post("/logout", data={"csrf_token": token})
    assert out.status_code == 303 and out.headers["location"] == "/login"
    assert session.exec(select(AuthSession).where(AuthSession.user_id == user.id)).all() == []
    # A copy of the old cookie no longer works.
    client.cookies.set(sessions.SESSION_COOKIE, stolen, domain="portal.test")
    assert (await client.get("/")).status_code == 303


async def test_deactivated_user_loses_access(client, session):
    from app.auth import service

    user = make_user(session, "lee", "viewer")
    sign_in(client, session, user)
    assert (await client.get("/")).status_code == 200
    service.update_user(session=session, user_id=user.id, role="viewer", tenants=[], active=False, actor="test")
    session.commit()
    assert (await client.get("/")).status_code == 303


async def test_admin_creates_and_updates_users_through_pages(client, session):
    admin = make_user(session, "root", "admin")
    token = sign_in(client, session, admin)
    created = await client.post("/admin/users", data={"name": "tm", "role": "tenant", "tenants": "team-a, team-b",
                                                      "password": PASSWORD, "csrf_token": token})
    assert created.status_code == 303
    page = await client.get("/admin/users")
    assert "tm" in page.text and "team-a, team-b" in page.text
    bad = await client.post("/admin/users", data={"name": "t2", "role": "tenant", "password": PASSWORD,
                                                  "csrf_token": token}, headers={"HX-Request": "true"})
    assert bad.status_code == 422
    assert bad.headers["HX-Retarget"] == "#messages"
    assert "tenants" in bad.text and "at least one tenant" in bad.text
    dup = await client.post("/admin/users", data={"name": "tm", "role": "viewer", "password": PASSWORD,
                                                  "csrf_token": token})
    assert dup.status_code == 409
    from app.auth.models import User

    tm = session.exec(select(User).where(User.name == "tm")).one()
    demoted = await client.post(f"/admin/users/{tm.id}", data={"role": "viewer", "active": "true",
                                                              "csrf_token": token})
    assert demoted.status_code == 303
    session.refresh(tm)
    assert tm.role == "viewer"
    self_demote = await client.post(f"/admin/users/{admin.id}", data={"role": "viewer", "active": "true",
                                                                     "csrf_token": token})
    assert self_demote.status_code == 409


async def test_signing_in_again_replaces_the_session(client, session):
    user = make_user(session, "mia", "viewer", password=PASSWORD)
    await _login(client, "mia", PASSWORD)
    first = client.cookies[sessions.SESSION_COOKIE]
    assert (await client.get("/login")).status_code == 303  # already signed in: no form
    token = page_csrf((await client.get("/")).text)
    again = await client.post("/login", data={"username": "mia", "password": PASSWORD, "csrf_token": token})
    assert again.status_code == 303
    assert client.cookies[sessions.SESSION_COOKIE] != first
    assert len(session.exec(select(AuthSession).where(AuthSession.user_id == user.id)).all()) == 1
