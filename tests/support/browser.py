"""Browser-test steps that wait for the server, not for time: a form post's answer, the page it leads to, the text shown."""

from __future__ import annotations

from pathlib import Path

from playwright.sync_api import expect

SHOTS = Path(__file__).resolve().parents[2] / "artifacts" / "screenshots"  # browser tests' screenshots

# argon2 at 64 MiB, a cold page and a busy 2-core machine: generous, because each wait ends on an event.
SERVER_TIMEOUT_MS = 120_000


def _is_post(response) -> bool:
    return response.request.method == "POST" and response.request.resource_type == "document"


def _is_page(response) -> bool:
    return response.request.method == "GET" and response.request.resource_type == "document"


def submit(page, selector: str, *, shows: str | None = None, within: str = "main") -> None:
    """Click a full-page form's submit button; wait for the POST's answer and the page it redirects to (and `shows`)."""
    with page.expect_response(_is_page, timeout=SERVER_TIMEOUT_MS) as landed:
        with page.expect_response(_is_post, timeout=SERVER_TIMEOUT_MS) as posted:
            page.click(selector)
    assert posted.value.status in (200, 303), (posted.value.status, posted.value.url)
    assert landed.value.status == 200, (landed.value.status, landed.value.url)
    page.wait_for_load_state("load")
    if shows is not None:
        expect(page.locator(within)).to_contain_text(shows, timeout=SERVER_TIMEOUT_MS)


def ask(page, selector: str, *, shows: str | None = None, within: str = "main") -> None:
    """Click a button whose POST answers with a page of its own (a confirm step, no redirect); wait for that page."""
    with page.expect_response(_is_post, timeout=SERVER_TIMEOUT_MS) as posted:
        page.click(selector)
    assert posted.value.status == 200, (posted.value.status, posted.value.url)
    page.wait_for_load_state("load")
    if shows is not None:
        expect(page.locator(within)).to_contain_text(shows, timeout=SERVER_TIMEOUT_MS)


def sign_in(page, base: str, name: str, password: str) -> None:
    """Sign in through the login form and wait until the server has answered and the next page has loaded."""
    if "/login" not in page.url:
        page.goto(f"{base}/login")
    page.fill("#username", name)
    page.fill("#password", password)
    with page.expect_response(_is_page, timeout=SERVER_TIMEOUT_MS) as landed:
        with page.expect_response(_is_post, timeout=SERVER_TIMEOUT_MS) as posted:
            page.click("main button[type=submit]")
    assert posted.value.status == 303, f"sign-in answered {posted.value.status}"
    assert "/login" not in landed.value.url, f"signed in, then sent back to {landed.value.url}"
    page.wait_for_load_state("load")
