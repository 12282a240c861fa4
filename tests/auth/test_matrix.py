"""Authorization matrix: every route of the app against every role, from the app's own route table.

A route without a rule in RULES fails `test_every_route_has_a_rule`, so nobody adds an endpoint
without deciding who may call it. Allowed callers must not get 401/403 (any other status, e.g. 404
or 422 for the dummy parameters, is fine: authorization happens before validation); everyone else
gets 403, and an anonymous caller 401 (API) or a redirect to /login (pages).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest

from app.auth import service, sessions
from app.billing import periods
from tests.support.billing import add_hour, policy_doc, store_policy
from tests.support.oidc import set_claims, sso_sign_in
from tests.support.policies import SPEC_TENANTS
from tests.support.routes import ROLES, app_routes, make_user, sign_in

PUBLIC = "public"  # no sign-in needed
SIGNED_IN = frozenset(ROLES)  # every role, tenant members included (they see only their tenants)
STAFF = frozenset(ROLES) - {"tenant"}
ADMIN = frozenset({"admin"})
FINANCE = frozenset({"finance"})
OPERATOR = frozenset({"operator"})
REVIEWER = frozenset({"reviewer"})

RULES: dict[tuple[str, str], str | frozenset[str]] = {
    # framework and probes
    ("GET", "/api/v1/openapi.json"): PUBLIC,
    ("GET", "/api/v1/docs"): PUBLIC,
    ("GET", "/healthz"): PUBLIC,
    ("GET", "/readyz"): PUBLIC,
    ("GET", "/metrics"): PUBLIC,
    # accounts
    ("GET", "/login"): PUBLIC,
    ("POST", "/login"): PUBLIC,
    ("POST", "/logout"): PUBLIC,
    ("GET", "/auth/oidc/login"): PUBLIC,  # single sign-on: starts at the provider, ends with a session
    ("GET", "/auth/oidc/callback"): PUBLIC,
    ("GET", "/api/v1/me"): SIGNED_IN,
    ("GET", "/api/v1/tokens"): SIGNED_IN,
    ("POST", "/api/v1/tokens"): SIGNED_IN,
    ("DELETE", "/api/v1/tokens/{token_id}"): SIGNED_IN,
    ("GET", "/admin/users"): ADMIN,
    ("POST", "/admin/users"): ADMIN,
    ("POST", "/admin/users/{user_id}"): ADMIN,
    ("GET", "/admin/tokens"): ADMIN,
    ("POST", "/admin/tokens"): ADMIN,
    ("POST", "/admin/tokens/{token_id}/revoke"): ADMIN,
    ("GET", "/admin/doctor"): ADMIN,
    # billing e-mail: contacts and the sends, for admins and finance
    ("GET", "/admin/contacts"): FINANCE,
    ("POST", "/admin/contacts/{tenant}"): FINANCE,
    ("POST", "/admin/mail/{send_id}/retry"): FINANCE,
    ("GET", "/api/v1/tenants/{tenant}/contacts"): FINANCE,
    ("PUT", "/api/v1/tenants/{tenant}/contacts"): FINANCE,
    # budgets: finance and admins set them; everyone reads what they may (members: their own tenants')
    ("GET", "/budgets"): FINANCE,
    ("POST", "/budgets/tenants/{tenant}"): FINANCE,
    ("POST", "/budgets/tenants/{tenant}/delete"): FINANCE,
    ("POST", "/budgets/departments/{department}"): FINANCE,
    ("POST", "/budgets/departments/{department}/delete"): FINANCE,
    ("GET", "/api/v1/budgets"): SIGNED_IN,
    ("GET", "/api/v1/budgets/tenants/{tenant}"): SIGNED_IN,
    ("PUT", "/api/v1/budgets/tenants/{tenant}"): FINANCE,
    ("DELETE", "/api/v1/budgets/tenants/{tenant}"): FINANCE,
    ("GET", "/api/v1/budgets/departments/{department}"): STAFF,
    ("PUT", "/api/v1/budgets/departments/{department}"): FINANCE,
    ("DELETE", "/api/v1/budgets/departments/{department}"): FINANCE,
    # webhooks: admins configure the finance integrations' receivers (they get every tenant's events)
    ("GET", "/admin/webhooks"): ADMIN,
    ("POST", "/admin/webhooks"): ADMIN,
    ("GET", "/admin/webhooks/{webhook_id}"): ADMIN,
    ("POST", "/admin/webhooks/{webhook_id}"): ADMIN,
    ("POST", "/admin/webhooks/{webhook_id}/secret"): ADMIN,
    ("POST", "/admin/webhooks/{webhook_id}/delete"): ADMIN,
    ("POST", "/admin/webhooks/{webhook_id}/deliveries/{delivery_id}/redeliver"): ADMIN,
    ("GET", "/api/v1/webhooks"): ADMIN,
    ("POST", "/api/v1/webhooks"): ADMIN,
    ("GET", "/api/v1/webhooks/{webhook_id}"): ADMIN,
    ("PATCH", "/api/v1/webhooks/{webhook_id}"): ADMIN,
    ("DELETE", "/api/v1/webhooks/{webhook_id}"): ADMIN,
    ("POST", "/api/v1/webhooks/{webhook_id}/secret"): ADMIN,
    ("GET", "/api/v1/webhooks/{webhook_id}/deliveries"): ADMIN,
    ("POST", "/api/v1/webhooks/{webhook_id}/deliveries/{delivery_id}/redeliver"): ADMIN,
    # pages (dashboard: tenant members see only their tenants)
    ("GET", "/"): SIGNED_IN,
    ("GET", "/tenants"): SIGNED_IN,
    ("GET", "/tenants/{tenant}"): SIGNED_IN,
    ("GET", "/sla"): SIGNED_IN,
    ("GET", "/fleet"): STAFF,
    ("GET", "/fleet/live"): STAFF,
    ("GET", "/overview/health"): SIGNED_IN,
    ("GET", "/overview/sla"): SIGNED_IN,
    # billing and usage (tenant members: only their own tenants, others answered 404)
    ("GET", "/api/v1/usage"): SIGNED_IN,
    ("GET", "/api/v1/allocation"): SIGNED_IN,
    ("GET", "/allocation"): SIGNED_IN,
    ("GET", "/allocation.csv"): SIGNED_IN,
    ("GET", "/api/v1/periods"): SIGNED_IN,
    ("GET", "/api/v1/periods/{period}/invoices"): SIGNED_IN,
    ("GET", "/api/v1/periods/{period}/invoices/{tenant}"): SIGNED_IN,
    ("GET", "/api/v1/periods/{period}/statement"): STAFF,
    ("GET", "/api/v1/periods/{period}/checklist"): STAFF,
    ("GET", "/api/v1/periods/{period}/report"): STAFF,  # the monthly report: finance and staff, not tenant members
    ("GET", "/api/v1/periods/{period}/export"): FINANCE,
    ("POST", "/api/v1/periods/{period}/rate"): FINANCE,
    ("POST", "/api/v1/periods/{period}/close"): FINANCE,
    ("POST", "/api/v1/periods/{period}/corrections"): FINANCE,
    ("GET", "/billing"): SIGNED_IN,
    ("GET", "/billing/{period}"): SIGNED_IN,
    ("GET", "/billing/{period}/{tenant}"): SIGNED_IN,
    ("GET", "/billing/{period}/{tenant}/invoice.pdf"): SIGNED_IN,
    ("GET", "/billing/{period}/report"): STAFF,
    ("GET", "/billing/{period}/report.pdf"): STAFF,
    ("GET", "/billing/{period}/{tenant}/days"): SIGNED_IN,
    ("GET", "/sla/paid"): SIGNED_IN,
    ("POST", "/billing/{period}/rate"): FINANCE,
    ("POST", "/billing/{period}/close"): FINANCE,
    # policy: staff read, operators propose and release, reviewers decide
    ("GET", "/api/v1/policy/versions"): STAFF,
    ("GET", "/api/v1/policy/versions/active"): STAFF,
    ("GET", "/api/v1/policy/versions/{number}"): STAFF,
    ("GET", "/api/v1/policy/versions/{number}/artifacts"): STAFF,
    ("GET", "/api/v1/policy/versions/{number}/artifacts.zip"): STAFF,
    ("POST", "/api/v1/policy/validate"): STAFF,
    ("GET", "/api/v1/policy/changes"): STAFF,
    ("POST", "/api/v1/policy/changes"): OPERATOR,
    ("GET", "/api/v1/policy/changes/{change_id}"): STAFF,
    ("GET", "/api/v1/policy/changes/{change_id}/preview"): STAFF,
    ("GET", "/api/v1/policy/changes/{change_id}/artifacts"): STAFF,
    ("GET", "/api/v1/policy/versions/{number}/artifacts/diff"): STAFF,
    ("PATCH", "/api/v1/policy/changes/{change_id}"): OPERATOR,
    ("POST", "/api/v1/policy/changes/{change_id}/fields"): OPERATOR,
    ("POST", "/api/v1/policy/changes/{change_id}/submit"): OPERATOR,
    ("POST", "/api/v1/policy/changes/{change_id}/approve"): REVIEWER,
    ("POST", "/api/v1/policy/changes/{change_id}/reject"): REVIEWER,
    ("POST", "/api/v1/policy/changes/{change_id}/withdraw"): OPERATOR,
    ("POST", "/api/v1/policy/changes/{change_id}/comments"): STAFF,
    ("POST", "/api/v1/policy/changes/{change_id}/rebase"): OPERATOR,
    ("GET", "/api/v1/policy/releases"): STAFF,
    ("POST", "/api/v1/policy/releases"): OPERATOR,
    ("GET", "/api/v1/policy/releases/{release_id}"): STAFF,
    ("PATCH", "/api/v1/policy/releases/{release_id}"): OPERATOR,
    ("DELETE", "/api/v1/policy/releases/{release_id}"): OPERATOR,
    ("POST", "/api/v1/policy/releases/{release_id}/changes"): OPERATOR,
    ("DELETE", "/api/v1/policy/releases/{release_id}/changes/{change_id}"): OPERATOR,
    ("POST", "/api/v1/policy/releases/{release_id}/apply"): OPERATOR,
    ("POST", "/api/v1/policy/releases/{release_id}/deploy"): OPERATOR,
    ("POST", "/api/v1/policy/releases/{release_id}/rollback"): OPERATOR,
    # directory: tenant members see only their tenants and the audit entries about them
    ("GET", "/api/v1/tenants"): SIGNED_IN,
    ("GET", "/api/v1/tenants/{name}"): SIGNED_IN,
    ("GET", "/api/v1/departments"): SIGNED_IN,
    ("GET", "/api/v1/audit"): SIGNED_IN,
    ("GET", "/api/v1/audit/{entry_id}"): SIGNED_IN,
    ("GET", "/policy"): STAFF,
    ("GET", "/policy/versions"): STAFF,
    ("GET", "/policy/versions/{number}"): STAFF,
    ("GET", "/policy/changes"): STAFF,
    ("GET", "/policy/changes/new"): OPERATOR,
    ("POST", "/policy/changes"): OPERATOR,
    ("POST", "/policy/validate"): STAFF,
    ("GET", "/policy/changes/{change_id}"): STAFF,
    ("GET", "/policy/changes/{change_id}/edit"): OPERATOR,
    ("POST", "/policy/changes/{change_id}"): OPERATOR,
    ("POST", "/policy/changes/{change_id}/fields"): OPERATOR,
    ("GET", "/policy/changes/{change_id}/sections/{section}"): OPERATOR,
    ("POST", "/policy/changes/{change_id}/sections/{section}"): OPERATOR,
    ("POST", "/policy/changes/{change_id}/submit"): OPERATOR,
    ("POST", "/policy/changes/{change_id}/approve"): REVIEWER,
    ("POST", "/policy/changes/{change_id}/reject"): REVIEWER,
    ("POST", "/policy/changes/{change_id}/withdraw"): OPERATOR,
    ("POST", "/policy/changes/{change_id}/rebase"): OPERATOR,
    ("POST", "/policy/changes/{change_id}/comments"): STAFF,
    ("GET", "/policy/review"): STAFF,
    ("GET", "/policy/changes/{change_id}/artifacts"): STAFF,
    ("GET", "/policy/versions/{number}/artifacts"): STAFF,
    ("GET", "/policy/releases"): STAFF,
    ("POST", "/policy/releases"): OPERATOR,
    ("POST", "/policy/releases/{release_id}/attach"): OPERATOR,
    ("POST", "/policy/releases/{release_id}/detach/{change_id}"): OPERATOR,
    ("POST", "/policy/releases/{release_id}/apply"): OPERATOR,
    ("POST", "/policy/releases/{release_id}/deploy"): OPERATOR,
    ("POST", "/policy/releases/{release_id}/rollback"): OPERATOR,
    ("GET", "/policy/audit"): STAFF,
}


@pytest.fixture
def app(bound_app):
    """One app per backend for the whole module: the matrix only reads its route table and calls it."""
    return bound_app


def test_every_route_has_a_rule():
    missing = [f"{m} {p}" for m, p in app_routes() if (m, p) not in RULES]
    assert not missing, "routes without an authorization rule in tests/auth/test_matrix.py: " + ", ".join(missing)
    stale = [f"{m} {p}" for m, p in RULES if (m, p) not in set(app_routes())]
    assert not stale, "rules for routes that no longer exist: " + ", ".join(stale)


def _fill(path: str, params: dict[str, str]) -> str:
    return re.sub(r"\{(\w+)(:\w+)?\}", lambda m: params.get(m.group(1), "1"), path)


async def _matrix_failures(client, session, caller: str, user, params: dict[str, str]) -> list[str]:
    """Every route called as `user` (in the role `caller`; None: anonymous), against RULES."""
    failures = []
    for method, path in app_routes():
        rule = RULES[(method, path)]
        url = _fill(path, params)
        headers, kwargs = {}, {}
        client.cookies.clear()
        if user is not None:
            headers["X-CSRF-Token"] = sign_in(client, session, user)
        else:  # a browser that has seen a page: public forms (sign-in) must still work
            client.cookies.set(sessions.CSRF_COOKIE, "anonymous-nonce", domain="portal.test")
            headers["X-CSRF-Token"] = sessions.csrf_token_for("anonymous-nonce", "")
        if method in ("POST", "PUT", "PATCH") and path.startswith("/api/"):
            kwargs["json"] = {}
        elif method in ("POST", "PUT", "PATCH"):
            kwargs["data"] = {"csrf_token": headers.get("X-CSRF-Token", "")}
        response = await client.request(method, url, headers=headers, **kwargs)
        status = response.status_code
        allowed = rule == PUBLIC or (caller != "anonymous" and (caller == "admin" or caller in rule))
        if status >= 500:
            failures.append(f"{method} {url}: {status}")
        elif allowed and status in (401, 403):
            failures.append(f"{method} {url}: {caller} should pass, got {status}")
        elif not allowed and caller == "anonymous":
            expected_redirect = not path.startswith("/api/")
            ok = (status == 303 and response.headers["location"].startswith("/login")) if expected_redirect else status == 401
            if not ok:
                failures.append(f"{method} {url}: anonymous should be sent to sign in, got {status}")
        elif not allowed and status != 403:
            failures.append(f"{method} {url}: {caller} should get 403, got {status}")
    return failures


@pytest.mark.anyio
@pytest.mark.parametrize("caller", ["anonymous", *ROLES])
async def test_matrix(client, session, caller):
    users = {role: make_user(session, f"m-{role}", role) for role in ROLES}
    target, _ = service.create_token(session=session, user=users["viewer"], scopes="read",
                                     lifetime=timedelta(days=1), actor="test")
    session.commit()
    params = {"user_id": str(users["viewer"].id), "token_id": str(target.id)}
    failures = await _matrix_failures(client, session, caller, users.get(caller), params)
    assert not failures, "\n".join(failures)


# Groups of the single sign-on tests' role map (tests/support/oidc.py), one per role, among unmapped ones.
CLAIM_GROUPS = {"admin": "gpu-admins", "operator": "gpu-ops", "reviewer": "gpu-review", "finance": "gpu-finance",
                "viewer": "gpu-staff", "tenant": "tenant:team-a"}


@pytest.mark.anyio
@pytest.mark.parametrize("role", ROLES)
async def test_matrix_for_roles_mapped_from_claims(client, session, oidc_provider, sso_settings, role):
    """A user created by single sign-on, its role taken from the groups claim, gets exactly its role's answers."""
    sso_settings(oidc_provider)
    if role == "tenant":  # a tenant group counts only for a tenant the policy in effect defines
        team_a = {"name": "team-a", "department": "research", "namespaces": ["team-a"], "class": "training"}
        store_policy(session, policy_doc(tenants=[*map(dict, SPEC_TENANTS), team_a]))
        session.commit()
    set_claims(oidc_provider, f"claims-{role}", preferred_username=f"c-{role}",
               groups=["everyone", CLAIM_GROUPS[role], "tenant-admins-mailing-list"])
    assert (await sso_sign_in(client, f"claims-{role}")).status_code == 303
    me = (await client.get("/api/v1/me")).json()
    assert (me["roles"], me["tenants"]) == ([role], ["team-a"] if role == "tenant" else None)
    user = service.get_user_by_name(session=session, name=f"c-{role}")
    target, _ = service.create_token(session=session, user=user, scopes="read", lifetime=timedelta(days=1),
                                     actor="test")
    session.commit()
    failures = await _matrix_failures(client, session, role, user, {"user_id": str(user.id),
                                                                    "token_id": str(target.id)})
    assert not failures, "\n".join(failures)


@pytest.mark.anyio
async def test_member_mapped_from_a_claim_sees_only_its_tenant(client, session, oidc_provider, sso_settings):
    """tenant:vision in the groups claim: vision's invoice and directory entry, every other tenant's a 404."""
    version = store_policy(session)
    add_hour(session, hour=datetime(2026, 10, 1, tzinfo=UTC), version=version.id)
    periods.rate(session=session, period="2026-10", actor="test")
    session.commit()
    sso_settings(oidc_provider)
    set_claims(oidc_provider, "claims-vision", preferred_username="c-vision", groups=["tenant:vision"])
    assert (await sso_sign_in(client, "claims-vision")).status_code == 303
    for own in ("/billing/2026-10/vision", "/api/v1/periods/2026-10/invoices/vision", "/api/v1/tenants/vision"):
        assert (await client.get(own)).status_code == 200, own
    for tenant in ("search", "etl"):
        for path in (f"/billing/2026-10/{tenant}", f"/api/v1/periods/2026-10/invoices/{tenant}",
                     f"/api/v1/tenants/{tenant}", f"/billing/2026-10/{tenant}/invoice.pdf"):
            assert (await client.get(path)).status_code == 404, path
    listed = (await client.get("/api/v1/periods/2026-10/invoices")).json()
    assert [invoice["tenant"] for invoice in listed["items"]] == ["vision"]


@pytest.mark.anyio
@pytest.mark.parametrize("role", ROLES)
async def test_api_matrix_with_bearer_tokens(client, session, role):
    """The same rules hold for /api routes called with a (write-scoped) token instead of a session."""
    user = make_user(session, f"t-{role}", role)
    _, raw = service.create_token(session=session, user=user, scopes="write", lifetime=timedelta(days=1),
                                  actor="test")
    # DELETE /api/v1/tokens/{id} gets another token of the caller's, not the one it authenticates with.
    spare, _ = service.create_token(session=session, user=user, scopes="read", lifetime=timedelta(days=1),
                                    actor="test")
    session.commit()
    failures = []
    for method, path in app_routes():
        rule = RULES[(method, path)]
        if not path.startswith("/api/") or rule == PUBLIC:
            continue
        kwargs = {"json": {}} if method in ("POST", "PUT", "PATCH") else {}
        url = _fill(path, {"token_id": str(spare.id)})
        response = await client.request(method, url, headers={"Authorization": f"Bearer {raw}"}, **kwargs)
        allowed = role == "admin" or role in rule
        if response.status_code >= 500 or (allowed and response.status_code in (401, 403)) or (
            not allowed and response.status_code != 403
        ):
            failures.append(f"{method} {path}: {role} got {response.status_code}")
    assert not failures, "\n".join(failures)
