"""Single sign-on end to end over HTTP: the portal (ASGI, both databases) against a live OpenID Connect provider.

Users are created at their first sign-in, their role and tenants follow the groups claim at every sign-in,
and a provider that is down or a sign-in that does not check out ends on the sign-in page with the reason,
no session, and the local form still working.
"""

from __future__ import annotations

import json
import re
from datetime import timedelta
from urllib.parse import parse_qs, urlsplit

import pytest
from sqlmodel import select

from app.auth import service, sessions
from app.auth.models import AuthSession, OidcIdentity, User
from app.core.audit import AuditEntry
from tests.support.billing import store_policy
from tests.support.oidc import authorize_at_provider, set_claims, sso_sign_in
from tests.support.routes import make_user, page_csrf, sign_in
from tests.support.server import free_port

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("fast_hashing")]
PASSWORD = "a correct and long password"


async def _me(client) -> dict:
    response = await client.get("/api/v1/me")
    assert response.status_code == 200, response.text
    return response.json()


def _session_cookie(response) -> str | None:
    cookies = [c for c in response.headers.get_list("set-cookie") if c.startswith(sessions.SESSION_COOKIE + "=")]
    return cookies[0] if cookies else None


async def _local_login(client, username: str, password: str):
    token = page_csrf((await client.get("/login")).text)
    return await client.post("/login", data={"username": username, "password": password, "csrf_token": token})


async def test_login_page_offers_the_provider_and_keeps_the_local_form(client, oidc_provider, sso_settings):
    sso_settings(oidc_provider)
    page = await client.get("/login?next=/billing")
    assert 'href="/auth/oidc/login?next=/billing"' in page.text
    assert "Sign in with Example ID" in page.text
    assert 'name="password"' in page.text


async def test_first_sign_in_creates_a_tenant_member_who_sees_only_its_tenant(client, session, oidc_provider,
                                                                              sso_settings):
    sso_settings(oidc_provider)
    store_policy(session)  # tenants search, vision, etl
    session.commit()
    set_claims(oidc_provider, "u-1001", preferred_username="vera", email="vera@example.org",
               groups=["tenant:vision", "all-staff-mailing-list"])
    answer = await sso_sign_in(client, "u-1001", next_url="/billing")
    assert answer.status_code == 303, answer.text
    assert answer.headers["location"] == "/billing"
    cookie = _session_cookie(answer)
    assert cookie and "HttpOnly" in cookie
    me = await _me(client)
    assert (me["name"], me["roles"], me["tenants"], me["via"]) == ("vera", ["tenant"], ["vision"], "session")
    identity = session.exec(select(OidcIdentity).where(OidcIdentity.subject == "u-1001")).one()
    assert identity.issuer == oidc_provider
    assert json.loads(identity.groups) == ["all-staff-mailing-list", "tenant:vision"]
    created = session.exec(select(AuditEntry).where(AuditEntry.action == "user.create",
                                                    AuditEntry.entity_id == str(identity.user_id))).one()
    assert created.actor == "oidc" and json.loads(created.after)["tenants"] == ["vision"]
    # Another tenant's directory entry and invoice: the same 404 as an unknown tenant.
    assert (await client.get("/api/v1/tenants/search")).status_code == 404
    assert (await client.get("/billing/2026-10/search")).status_code == 404
    assert (await client.get("/fleet")).status_code == 403
    admin = make_user(session, "ada", "admin")
    client.cookies.clear()
    sign_in(client, session, admin)
    listing = (await client.get("/admin/users")).text
    assert re.search(r"vera\s*<span[^>]*>single sign-on</span>", listing)
    assert not re.search(r"ada\s*<span[^>]*>single sign-on", listing)


async def test_groups_are_re_evaluated_at_every_sign_in(client, session, oidc_provider, sso_settings):
    sso_settings(oidc_provider)
    store_policy(session)
    session.commit()
    set_claims(oidc_provider, "u-2002", preferred_username="fred", groups=["gpu-finance", "tenant:vision"])
    assert (await sso_sign_in(client, "u-2002")).status_code == 303
    assert (await _me(client))["roles"] == ["finance"]

    client.cookies.clear()
    set_claims(oidc_provider, "u-2002", preferred_username="fred", groups=["tenant:vision", "tenant:etl"])
    assert (await sso_sign_in(client, "u-2002")).status_code == 303
    me = await _me(client)
    assert (me["roles"], me["tenants"]) == (["tenant"], ["etl", "vision"])

    client.cookies.clear()
    set_claims(oidc_provider, "u-2002", preferred_username="fred", groups=["tenant:etl"])
    assert (await sso_sign_in(client, "u-2002")).status_code == 303
    assert (await _me(client))["tenants"] == ["etl"]
    users = session.exec(select(User).where(User.name.startswith("fred"))).all()
    assert [u.name for u in users] == ["fred"], "one account per (issuer, subject), whatever the sign-ins"
    updates = session.exec(select(AuditEntry).where(AuditEntry.action == "user.update",
                                                    AuditEntry.entity_id == str(users[0].id))
                           .order_by(AuditEntry.id)).all()
    assert [json.loads(u.after)["tenants"] for u in updates] == [["etl", "vision"], ["etl"]]


async def test_losing_every_mapped_group_refuses_and_suspends_until_a_group_returns(client, session, oidc_provider,
                                                                                    sso_settings):
    sso_settings(oidc_provider)
    set_claims(oidc_provider, "u-3003", preferred_username="olav", groups=["gpu-ops"])
    assert (await sso_sign_in(client, "u-3003")).status_code == 303
    user = session.exec(select(User).where(User.name == "olav")).one()
    live = await client.get("/api/v1/me")
    assert live.status_code == 200

    set_claims(oidc_provider, "u-3003", preferred_username="olav", groups=["left-the-team"])
    refused = await sso_sign_in(client, "u-3003")
    assert refused.status_code == 403
    assert "no longer has a group" in refused.text
    assert _session_cookie(refused) is None
    session.expire_all()
    assert session.get(User, user.id).active is False
    assert not session.exec(select(AuthSession).where(AuthSession.user_id == user.id)).all(), "sessions ended"
    assert (await client.get("/api/v1/me")).status_code == 401

    set_claims(oidc_provider, "u-3003", preferred_username="olav", groups=["gpu-review"])
    assert (await sso_sign_in(client, "u-3003")).status_code == 303
    assert (await _me(client))["roles"] == ["reviewer"]


async def test_no_mapped_group_and_no_default_role_creates_nobody(client, session, oidc_provider, sso_settings):
    sso_settings(oidc_provider)
    set_claims(oidc_provider, "u-4004", preferred_username="nina", groups=["somewhere-else"])
    refused = await sso_sign_in(client, "u-4004")
    assert refused.status_code == 403 and "no group that gives access" in refused.text
    assert session.exec(select(User).where(User.name == "nina")).first() is None

    sso_settings(oidc_provider, oidc_default_role="viewer")
    assert (await sso_sign_in(client, "u-4004")).status_code == 303
    assert (await _me(client))["roles"] == ["viewer"]


async def test_a_provider_user_never_takes_over_a_local_account_of_the_same_name(client, session, oidc_provider,
                                                                                 sso_settings):
    sso_settings(oidc_provider)
    local = make_user(session, "root-ops", "admin", password=PASSWORD)
    set_claims(oidc_provider, "u-5005", preferred_username="root-ops", groups=["gpu-staff"])
    assert (await sso_sign_in(client, "u-5005")).status_code == 303
    me = await _me(client)
    assert me["name"] == "root-ops-2" and me["roles"] == ["viewer"]
    assert session.get(User, local.id).role == "admin"


async def test_a_deactivated_account_stays_out(client, session, oidc_provider, sso_settings):
    sso_settings(oidc_provider)
    set_claims(oidc_provider, "u-6006", preferred_username="dora", groups=["gpu-staff"])
    assert (await sso_sign_in(client, "u-6006")).status_code == 303
    user = session.exec(select(User).where(User.name == "dora")).one()
    user.active = False  # as an admin would on /admin/users
    session.add(user)
    session.commit()
    client.cookies.clear()
    refused = await sso_sign_in(client, "u-6006")
    assert refused.status_code == 403 and "deactivated" in refused.text and _session_cookie(refused) is None


async def test_state_mismatch_and_a_missing_flow_cookie_are_refused(client, oidc_provider, sso_settings):
    sso_settings(oidc_provider)
    set_claims(oidc_provider, "u-7007", groups=["gpu-staff"])
    start = await client.get("/auth/oidc/login")
    callback = await authorize_at_provider(start.headers["location"], "u-7007")
    parts = urlsplit(callback)
    wrong_state = await client.get(f"{parts.path}?{parts.query.replace('state=', 'state=x')}")
    assert wrong_state.status_code == 401 and "state mismatch" in wrong_state.text
    assert _session_cookie(wrong_state) is None
    client.cookies.clear()  # the flow cookie gone: the callback was opened in another browser
    other_browser = await client.get("/auth/oidc/callback?code=abc&state=def")
    assert other_browser.status_code == 400 and "another browser" in other_browser.text
    assert (await client.get("/api/v1/me")).status_code == 401


async def test_provider_refusal_is_shown(client, oidc_provider, sso_settings):
    sso_settings(oidc_provider)
    start = await client.get("/auth/oidc/login")
    state = parse_qs(urlsplit(start.headers["location"]).query)["state"][0]
    denied = await client.get(f"/auth/oidc/callback?error=access_denied&state={state}")
    assert denied.status_code == 401 and "refused the sign-in: access_denied" in denied.text


async def test_provider_down_shows_an_error_and_local_sign_in_still_works(client, session, sso_settings):
    sso_settings(f"http://127.0.0.1:{free_port()}", oidc_timeout_s="2")  # nothing listens there
    make_user(session, "breakglass", "admin", password=PASSWORD)
    down = await client.get("/auth/oidc/login")
    assert down.status_code == 503
    assert "could not be reached" in down.text and 'name="password"' in down.text
    local = await _local_login(client, "breakglass", PASSWORD)
    assert local.status_code == 303 and _session_cookie(local)
    assert (await _me(client))["roles"] == ["admin"]


async def test_local_sign_in_disabled_except_break_glass(client, session, oidc_provider, sso_settings):
    sso_settings(oidc_provider, local_login_enabled="false", break_glass_users="keeper")
    make_user(session, "keeper", "admin", password=PASSWORD)
    make_user(session, "clerk", "viewer", password=PASSWORD)
    page = await client.get("/login")
    assert "Break-glass sign-in" in page.text and "Sign in with Example ID" in page.text
    refused = await _local_login(client, "clerk", PASSWORD)
    assert refused.status_code == 403 and "Local sign-in is disabled" in refused.text
    assert _session_cookie(refused) is None
    wrong = await _local_login(client, "clerk", "not the password")
    assert wrong.status_code == 401, "a wrong password reveals nothing about break-glass accounts"
    keeper = await _local_login(client, "keeper", PASSWORD)
    assert keeper.status_code == 303 and _session_cookie(keeper)


async def test_tenant_groups_naming_no_tenant_give_nothing_and_are_reported(client, session, oidc_provider,
                                                                            sso_settings):
    sso_settings(oidc_provider)
    store_policy(session)  # tenants search, vision, etl
    session.commit()
    set_claims(oidc_provider, "u-8008", preferred_username="gus", groups=["tenant:ghost"])
    refused = await sso_sign_in(client, "u-8008")
    assert refused.status_code == 403 and "tenants this portal does not know (ghost)" in refused.text
    assert session.exec(select(User).where(User.name == "gus")).first() is None
    set_claims(oidc_provider, "u-8008", preferred_username="gus", groups=["tenant:ghost", "tenant:vision"])
    assert (await sso_sign_in(client, "u-8008")).status_code == 303
    me = await _me(client)
    assert (me["roles"], me["tenants"]) == (["tenant"], ["vision"])
    reports = session.exec(select(AuditEntry).where(AuditEntry.action == "oidc.unknown_tenant")
                           .order_by(AuditEntry.id)).all()
    assert [(r.actor, r.entity_id, json.loads(r.after)["tenants"]) for r in reports] == [
        ("oidc", "u-8008", ["ghost"]), ("oidc", "u-8008", ["ghost"])]
    client.cookies.clear()
    sign_in(client, session, make_user(session, "ada", "admin"))
    notice = (await client.get("/admin/users")).text
    assert re.search(r'id="unknown-tenant-groups".*gus &mdash;\s*<code>ghost</code>', notice, re.S)


async def test_local_tokens_and_sessions_with_local_sign_in_off(client, session, oidc_provider, sso_settings):
    """Off: only break-glass accounts' local credentials work; provider accounts keep theirs."""
    keeper = make_user(session, "keeper", "admin", password=PASSWORD)
    clerk = make_user(session, "clerk", "admin", password=PASSWORD)
    sso_settings(oidc_provider)
    set_claims(oidc_provider, "u-9009", preferred_username="sol", groups=["gpu-staff"])
    assert (await sso_sign_in(client, "u-9009")).status_code == 303
    sol = session.exec(select(User).where(User.name == "sol")).one()
    raw = {}
    for user in (keeper, clerk, sol):
        _, raw[user.name] = service.create_token(session=session, user=user, scopes="read",
                                                 lifetime=timedelta(days=1), actor="test")
    session.commit()
    client.cookies.clear()
    sign_in(client, session, clerk)
    sso_settings(oidc_provider, local_login_enabled="false", break_glass_users="keeper")
    status = {}
    for name, token in raw.items():
        answer = await client.get("/api/v1/me", headers={"Authorization": f"Bearer {token}"})
        status[name] = answer.status_code
    assert status == {"keeper": 200, "clerk": 401, "sol": 200}
    assert (await client.get("/api/v1/me")).status_code == 401, "the clerk's session from before the switch"
    sso_settings(oidc_provider, local_login_enabled="true")
    assert (await client.get("/api/v1/me")).status_code == 200, "back on: the same credentials work again"


async def test_a_provider_user_never_takes_a_break_glass_name_even_before_it_exists(client, session, oidc_provider,
                                                                                     sso_settings):
    sso_settings(oidc_provider, local_login_enabled="false", break_glass_users="keeper,rescue")
    set_claims(oidc_provider, "u-1010", preferred_username="keeper", groups=["gpu-admins"])
    assert (await sso_sign_in(client, "u-1010")).status_code == 303
    assert (await _me(client))["name"] == "keeper-2"
    keeper = make_user(session, "keeper", "admin", password=PASSWORD)  # the break-glass account, made later
    client.cookies.clear()
    assert (await _local_login(client, "keeper", PASSWORD)).status_code == 303
    assert (await _me(client))["name"] == keeper.name


async def test_a_provider_account_with_a_break_glass_name_is_not_break_glass(client, session, oidc_provider,
                                                                            sso_settings):
    """An account made by single sign-on before the name was reserved (or given a password by an admin)."""
    sso_settings(oidc_provider, local_login_enabled="false", break_glass_users="keeper")
    keeper = make_user(session, "keeper", "admin", password=PASSWORD)
    session.add(OidcIdentity(issuer=oidc_provider, subject="u-old", user_id=keeper.id, created_at=keeper.created_at,
                             last_login_at=keeper.created_at))
    session.commit()
    refused = await _local_login(client, "keeper", PASSWORD)
    assert refused.status_code == 403 and "Local sign-in is disabled" in refused.text


async def test_sso_routes_are_404_when_not_configured(client):
    assert (await client.get("/auth/oidc/login")).status_code == 404
    assert (await client.get("/auth/oidc/callback?code=a&state=b")).status_code == 404
    assert "/auth/oidc/login" not in (await client.get("/login")).text
