"""A CSRF token or an OIDC state that is not ASCII is a mismatch (4xx), never a 500 (compare_digest on str raises)."""

from __future__ import annotations

import pytest

from app.auth import oidc, sessions
from app.core.settings import get_settings
from tests.support.routes import make_user, page_csrf, sign_in

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("fast_hashing")]


async def test_a_non_ascii_csrf_field_at_sign_in_is_a_403(client):
    page_csrf((await client.get("/login")).text)  # the browser's CSRF nonce cookie
    answer = await client.post("/login", data={"username": "ada", "password": "pw", "csrf_token": "é"})
    assert answer.status_code == 403 and "form expired" in answer.text


async def test_a_latin_1_csrf_header_at_logout_is_a_403_and_the_session_lives(client, session):
    sign_in(client, session, make_user(session, "ada", "admin"))
    answer = await client.post("/logout", headers=[(b"X-CSRF-Token", b"\xe9")])
    assert answer.status_code == 403
    assert (await client.get("/api/v1/me")).status_code == 200


async def test_a_non_ascii_state_at_the_callback_is_a_401(client, sso_settings):
    sso_settings("http://127.0.0.1:9")  # never contacted: the state is checked first
    pending = oidc.PendingLogin(state="s" * 43, nonce="n", verifier="v" * 64, next_url="/")
    client.cookies.set(oidc.FLOW_COOKIE, oidc.seal(get_settings(), pending), domain="portal.test",
                       path="/auth/oidc/")
    answer = await client.get("/auth/oidc/callback?state=%C3%A9&code=c")
    assert answer.status_code == 401 and "state mismatch" in answer.text
    assert not [c for c in answer.headers.get_list("set-cookie") if c.startswith(sessions.SESSION_COOKIE + "=")]
