"""Hostile input on every form field, query and path parameter, JSON field, header and cookie: never a 5xx.

The cases (tests/support/hostile.py) come from the app's own routes, each sent straight into the ASGI app
as a signed-in admin with a valid CSRF token, so each reaches the parsing and the handler it targets.
"""

from __future__ import annotations

import time
from collections import Counter

import pytest
from joserfc.jwk import KeySet

from app.auth import oidc, sessions
from app.core.settings import get_settings
from tests.support.hostile import HEADERS, VALUES, Browser, asgi_status, cases
from tests.support.routes import make_user, sign_in

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("fast_hashing")]


async def test_no_hostile_input_gets_a_server_error(app, client, session, sso_settings):
    # Single sign-on on, its provider's discovery cached (nothing listens there): the login and callback
    # routes parse their input, and the callback, with a valid flow cookie, gets as far as the state check.
    issuer = "http://127.0.0.1:9"
    sso_settings(issuer)
    provider = oidc.Provider(issuer=issuer, authorization_endpoint=f"{issuer}/authorize",
                             token_endpoint=f"{issuer}/token", jwks_uri=f"{issuer}/jwks")
    oidc._cache[issuer] = (time.monotonic(), provider, KeySet([]))
    pending = oidc.PendingLogin(state="s" * 43, nonce="n" * 43, verifier="v" * 64, next_url="/")
    admin = make_user(session, "ada", "admin")
    token = sign_in(client, session, admin)
    browser = Browser(session_cookie=client.cookies[sessions.SESSION_COOKIE],
                      csrf_nonce=client.cookies[sessions.CSRF_COOKIE], csrf_token=token,
                      extra={oidc.FLOW_COOKIE: oidc.seal(get_settings(), pending)})
    tried: Counter[str] = Counter()
    callback: Counter[int] = Counter()
    errors: list[str] = []
    for case in cases(app, browser):
        if case.route == "/logout" and case.surface != "form":
            continue  # a valid logout ends the session the other cases ride on (its form field is fuzzed)
        status = await asgi_status(app, case)
        tried[case.surface] += 1
        if case.route == "/auth/oidc/callback" and case.input == "state":
            callback[status] += 1
        if status >= 500:
            errors.append(f"{status} {case.describe()}")
        if case.route == "/admin/users/{user_id}" or case.route == "/logout":
            # A case may have ended the session (a password change); the next ones need it.
            browser.session_cookie = client.cookies[sessions.SESSION_COOKIE]
    assert not errors, f"{len(errors)} server errors:\n" + "\n".join(errors[:80])
    # Every hostile state reaches the state check and fails it (NUL is refused before, by the input limits).
    assert callback == {401: len(VALUES) - 1, 422: 1}, callback
    assert set(tried) == {"form", "query", "path", "json", "header", "cookie"}, tried
    assert tried["header"] >= len(HEADERS) * len(VALUES) * 4 and tried["form"] > 200, tried
