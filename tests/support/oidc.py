"""A real OpenID Connect provider for the single sign-on tests: `oidc-provider-mock` as a process of its own.

The provider signs ID tokens (RS256) with a key it generates at start and publishes at its JWKS; the claims of
a subject are set through its API (PUT /users/<sub>), and its authorization page is a form where the subject is
typed in or picked: the tests post that form, the browser test clicks it.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote, urlsplit

import httpx
import pytest

from app.auth import oidc
from app.core import settings as settings_module
from tests.support.server import free_port

CLIENT_ID = "chargeback-portal"
CLIENT_SECRET = "portal-client-secret-for-tests"
ROLE_MAP = "gpu-admins=admin,gpu-finance=finance,gpu-ops=operator,gpu-review=reviewer,gpu-staff=viewer"


@contextmanager
def running_provider(*, timeout_s: float = 30) -> Iterator[str]:
    """Start oidc-provider-mock on a free loopback port (nonce required); yields its issuer URL."""
    port = free_port()
    log_path = Path(tempfile.mkdtemp(prefix="oidc-provider-")) / "provider.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "oidc_provider_mock", "--host", "127.0.0.1", "--port",
                                 str(port), "--require-nonce"], stdout=log, stderr=subprocess.STDOUT)
    issuer = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                if httpx.get(f"{issuer}/.well-known/openid-configuration", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"oidc-provider-mock did not come up:\n{log_path.read_text()}")
            time.sleep(0.1)
        yield issuer
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def set_claims(issuer: str, sub: str, **claims) -> None:
    """The claims the provider puts in `sub`'s next ID token (groups among them)."""
    response = httpx.put(f"{issuer}/users/{quote(sub, safe='')}", json=claims, timeout=10)
    assert response.status_code == 204, response.text


def sso_env(issuer: str, **extra: str) -> dict[str, str]:
    """CHARGEBACK_* variables configuring single sign-on against `issuer`."""
    return {
        "CHARGEBACK_OIDC_ISSUER": issuer,
        "CHARGEBACK_OIDC_CLIENT_ID": CLIENT_ID,
        "CHARGEBACK_OIDC_CLIENT_SECRET": CLIENT_SECRET,
        "CHARGEBACK_OIDC_PROVIDER_NAME": "Example ID",
        "CHARGEBACK_OIDC_ROLE_MAP": ROLE_MAP,
        **{f"CHARGEBACK_{k.upper()}": v for k, v in extra.items()},
    }


@pytest.fixture(scope="module")
def oidc_provider() -> Iterator[str]:
    """The issuer URL of a provider process shared by a module (each test sets the claims of its own subjects)."""
    with running_provider() as issuer:
        yield issuer


@pytest.fixture
def sso_settings(monkeypatch):
    """Configure single sign-on for this test: `sso_settings(issuer, local_login_enabled="false", ...)`."""

    def configure(issuer: str, **extra: str) -> None:
        for name, value in sso_env(issuer, **extra).items():
            monkeypatch.setenv(name, value)
        settings_module.get_settings.cache_clear()
        oidc.forget_providers()

    yield configure
    monkeypatch.undo()
    settings_module.get_settings.cache_clear()
    oidc.forget_providers()


async def authorize_at_provider(authorization_url: str, sub: str) -> str:
    """Post the provider's authorization form as `sub`; returns where the provider redirects (the callback URL)."""
    async with httpx.AsyncClient(timeout=10) as provider:
        answer = await provider.post(authorization_url, data={"sub": sub})
    assert answer.status_code in (302, 303), answer.text
    return answer.headers["location"]


async def sso_sign_in(client: httpx.AsyncClient, sub: str, *, next_url: str = "/") -> httpx.Response:
    """Single sign-on over HTTP as `sub`: the portal's redirect, the provider's form, the portal's callback answer."""
    start = await client.get("/auth/oidc/login", params={"next": next_url})
    assert start.status_code == 303, start.text
    callback = await authorize_at_provider(start.headers["location"], sub)
    parts = urlsplit(callback)
    return await client.get(f"{parts.path}?{parts.query}")
