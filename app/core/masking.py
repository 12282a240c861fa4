"""Secret values masked out of text the portal keeps or shows from a remote answer.

A Prometheus proxy that echoes the request's Authorization header in its error page, an SMTP relay
that repeats the AUTH line, a webhook receiver that prints what it was sent: whatever a remote
server answers is shown (the doctor, the admin pages, the API) and logged (the worker) as an
excerpt, and every configured secret in it is replaced by MASK first, in the forms it travels in
(as given, percent-encoded, and base64 as basic auth and SMTP AUTH carry it).
"""

from __future__ import annotations

import base64
from collections.abc import Iterable
from urllib.parse import quote

from app.core.clusters import ClusterConfig

MASK = "***"


def _b64(raw: str) -> str:
    return base64.b64encode(raw.encode()).decode()


def forms(secret: str) -> set[str]:
    """The spellings a secret travels in: as is, percent-encoded, base64 (SMTP AUTH LOGIN)."""
    return {secret, quote(secret, safe=""), _b64(secret)}


def mask(text: str, secrets: Iterable[str | None]) -> str:
    """`text` with every non-empty secret (in each of its forms) replaced by MASK, the longest first."""
    values = sorted({f for s in secrets if s for f in forms(s)}, key=len, reverse=True)
    for value in values:
        if value in text:
            text = text.replace(value, MASK)
    return text


def basic_auth_forms(username: str, password: str) -> list[str]:
    """What basic auth and SMTP AUTH PLAIN send for a user and password (base64 of both together)."""
    return [_b64(f"{username}:{password}"), _b64(f"\0{username}\0{password}")]


def cluster_secrets(config: ClusterConfig | None) -> list[str]:
    """A cluster's bearer token and basic-auth password as sent now (files read; an unreadable one is skipped)."""
    if config is None or config.is_simulator:
        return []
    out: list[str] = []
    try:
        if token := config.token():
            out.append(token)
        if config.username and (password := config.basic_password()):
            out += [password, *basic_auth_forms(config.username, password)]
    except OSError:
        pass
    return out


def configured_secrets(settings) -> list[str]:
    """Every secret value the portal is configured with: the signing key, the OIDC client secret, the SMTP
    password, each cluster's credentials (`settings` is app.core.settings.Settings)."""
    out = [settings.secret_key, settings.oidc_client_secret]
    if settings.smtp_password:
        out += [settings.smtp_password, *basic_auth_forms(settings.smtp_username or "", settings.smtp_password)]
    for config in settings.cluster_configs():
        out += cluster_secrets(config)
    return [s for s in out if s]
