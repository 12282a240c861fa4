"""CSRF: tokens bound to the browser nonce and the session; state-changing requests without one get 403."""

import pytest
from starlette.requests import Request

from app.auth import sessions
from tests.support.routes import make_user, page_csrf, sign_in

pytestmark = pytest.mark.usefixtures("fast_hashing")


def _request(cookies: dict[str, str]) -> Request:
    header = "; ".join(f"{k}={v}" for k, v in cookies.items())
    return Request({"type": "http", "method": "POST", "path": "/", "headers": [(b"cookie", header.encode())]})


def test_token_bound_to_nonce_and_session():
    signed = sessions.sign_session_id("session-1")
    request = _request({sessions.CSRF_COOKIE: "nonce-1", sessions.SESSION_COOKIE: signed})
    good = sessions.csrf_token_for("nonce-1", "session-1")
    assert sessions.csrf_valid(request, good)
    assert not sessions.csrf_valid(request, sessions.csrf_token_for("nonce-2", "session-1"))  # another browser
    assert not sessions.csrf_valid(request, sessions.csrf_token_for("nonce-1", "session-2"))  # another login
    assert not sessions.csrf_valid(request, sessions.csrf_token_for("nonce-1", ""))  # the pre-login token
    assert not sessions.csrf_valid(request, "")
    assert not sessions.csrf_valid(request, None)
    assert not sessions.csrf_valid(_request({sessions.SESSION_COOKIE: signed}), good)  # no nonce cookie


def test_session_cookie_signature_checked():
    signed = sessions.sign_session_id("abc")
    assert sessions.unsign_session_id(signed) == "abc"
    # Change the signature's second-to-last character (the last one may carry only padding bits).
    tampered = signed[:-2] + ("A" if signed[-2] != "A" else "B") + signed[-1]
    assert sessions.unsign_session_id(tampered) is None
    assert sessions.unsign_session_id("abc") is None
    assert sessions.unsign_session_id(None) is None


@pytest.mark.anyio
async def test_first_visit_gets_nonce_cookie_and_matching_form_token(client):
    page = await client.get("/login")
    assert page.status_code == 200
    set_cookie = page.headers["set-cookie"]
    assert sessions.CSRF_COOKIE in set_cookie and "HttpOnly" in set_cookie and "SameSite=Lax" in set_cookie
    nonce = client.cookies[sessions.CSRF_COOKIE]
    assert page_csrf(page.text) == sessions.csrf_token_for(nonce, "")
    # Machine paths do not hand out cookies.
    assert "set-cookie" not in (await client.get("/healthz")).headers


@pytest.mark.anyio
async def test_state_changing_request_without_csrf_is_403(client, session):
    admin = make_user(session, "root", "admin")
    token = sign_in(client, session, admin)
    form = {"name": "new-user", "role": "viewer", "password": "a long enough password"}
    refused = await client.post("/admin/users", data=form)
    assert refused.status_code == 403
    assert "CSRF" in refused.text
    wrong = await client.post("/admin/users", data={**form, "csrf_token": "0" * 64})
    assert wrong.status_code == 403
    # JSON API with the session cookie: same rule, problem+json.
    api = await client.post("/api/v1/tokens", json={"scopes": ["read"]})
    assert api.status_code == 403
    assert api.headers["content-type"].startswith("application/problem+json")
    assert "CSRF" in api.json()["detail"]
    # With the token (form field or htmx header) it goes through.
    ok = await client.post("/admin/users", data={**form, "csrf_token": token})
    assert ok.status_code == 303
    htmx = await client.post("/admin/users", data={**form, "name": "other-user"},
                             headers={"X-CSRF-Token": token, "HX-Request": "true"})
    assert htmx.status_code == 201
    assert "User other-user created." in htmx.text
    assert "<html" not in htmx.text  # only the content block


@pytest.mark.anyio
async def test_login_and_logout_forms_need_csrf(client, session):
    make_user(session, "carol", "viewer", password="carol's long password")
    await client.get("/login")
    refused = await client.post("/login", data={"username": "carol", "password": "carol's long password"})
    assert refused.status_code == 403
    assert sessions.SESSION_COOKIE not in client.cookies
    assert (await client.post("/logout")).status_code == 403
