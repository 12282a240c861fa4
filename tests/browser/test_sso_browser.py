"""Single sign-on in chromium: "Sign in with ..." through a real OpenID Connect provider's page back to the portal.

A second uvicorn serves the seeded database of the module's portal with single sign-on configured against
an oidc-provider-mock process; the browser clicks the button, authorizes at the provider's form and lands
on the dashboard as the user the groups claim made.
"""

from __future__ import annotations

import os

import pytest
from playwright.sync_api import expect

from tests.support.browser import SERVER_TIMEOUT_MS, SHOTS
from tests.support.oidc import running_provider, set_claims, sso_env
from tests.support.server import running_portal


@pytest.fixture(scope="module")
def sso_portal(portal, tmp_path_factory):
    with running_provider() as issuer:
        env = {**os.environ, **sso_env(issuer)}
        with running_portal(portal["url"], log_dir=tmp_path_factory.mktemp("uvicorn-sso"), env=env) as server:
            yield {"base": server.base, "issuer": issuer, "month": portal["month"]}
        server_log = server.log()
    assert "Traceback" not in server_log, server_log[-5000:]


def _sign_in_at_provider(page, base: str, sub: str) -> None:
    page.goto(f"{base}/login")
    page.click("#sso-sign-in")
    page.wait_for_url("**/oauth2/authorize**", timeout=SERVER_TIMEOUT_MS)
    page.fill("input[name=sub]", sub)
    with page.expect_navigation(url=f"{base}/", timeout=SERVER_TIMEOUT_MS):
        page.click("button:has-text('Authorize')")
    page.wait_for_load_state("load")


def test_sign_in_with_the_provider_lands_on_the_dashboard_as_a_mapped_member(sso_portal, browser, console):
    base, month = sso_portal["base"], sso_portal["month"]
    set_claims(sso_portal["issuer"], "u-browser", preferred_username="vision-lead", email="lead@example.org",
               groups=["tenant:vision", "everyone"])
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    # The provider's page links a stylesheet on a CDN; this machine has no internet: an empty one stands in.
    context.route("https://cdn.jsdelivr.net/**",
                  lambda route: route.fulfill(status=200, content_type="text/css", body=""))
    try:
        page = context.new_page()
        console.watch(page, "sso")
        page.goto(f"{base}/login")
        expect(page.locator("#sso-sign-in")).to_have_text("Sign in with Example ID")
        page.screenshot(path=str(SHOTS / "sso-login.png"))
        _sign_in_at_provider(page, base, "u-browser")
        expect(page.locator(".who-name")).to_contain_text("vision-lead", timeout=SERVER_TIMEOUT_MS)
        expect(page.locator(".who-name .role")).to_have_text("tenant")
        page.screenshot(path=str(SHOTS / "sso-dashboard.png"), full_page=True)
        page.goto(f"{base}/tenants")
        assert page.locator("#tenant-table tbody th a").all_inner_texts() == ["vision"]
        assert page.goto(f"{base}/billing/{month}/search").status == 404
        assert page.goto(f"{base}/billing/{month}/vision").status == 200

        # The provider moves the user to finance: the next sign-in says so.
        set_claims(sso_portal["issuer"], "u-browser", preferred_username="vision-lead", groups=["gpu-finance"])
        context.clear_cookies()
        _sign_in_at_provider(page, base, "u-browser")
        expect(page.locator(".who-name .role")).to_have_text("finance", timeout=SERVER_TIMEOUT_MS)
        assert page.goto(f"{base}/billing/{month}/search").status == 200
    finally:
        context.close()
    assert not console.problems, console.problems


def test_a_replayed_callback_is_refused_in_the_browser(sso_portal, browser):
    """The callback URL and flow cookie of a finished sign-in, replayed in a fresh browser: refused, no session."""
    base = sso_portal["base"]
    set_claims(sso_portal["issuer"], "u-replay", preferred_username="replayer", groups=["gpu-staff"])
    context = browser.new_context()
    context.route("https://cdn.jsdelivr.net/**",
                  lambda route: route.fulfill(status=200, content_type="text/css", body=""))
    callbacks: list[str] = []
    try:
        page = context.new_page()
        page.on("request", lambda request: callbacks.append(request.url) if "/auth/oidc/callback" in request.url
                else None)
        page.goto(f"{base}/login")
        page.click("#sso-sign-in")
        page.wait_for_url("**/oauth2/authorize**", timeout=SERVER_TIMEOUT_MS)
        flow = [c for c in context.cookies() if c["name"] == "cb_oidc"]
        assert len(flow) == 1
        page.fill("input[name=sub]", "u-replay")
        with page.expect_navigation(url=f"{base}/", timeout=SERVER_TIMEOUT_MS):
            page.click("button:has-text('Authorize')")
        expect(page.locator(".who-name")).to_contain_text("replayer", timeout=SERVER_TIMEOUT_MS)
        assert len(callbacks) == 1
        context.clear_cookies()
        context.add_cookies(flow)
        replay = page.goto(callbacks[0])
        assert replay.status == 400
        expect(page.locator("body")).to_contain_text("already used")
        assert page.goto(f"{base}/api/v1/me").status == 401
    finally:
        context.close()
