"""OpenID Connect sign-in: the authorization code flow with PKCE (S256), state and nonce.

authlib builds the authorization URL (with the S256 code challenge) and the token request; httpx sends it
(client_secret_basic; authlib's own httpx client is left out: it is moving to another HTTP library).
joserfc verifies the ID token against the provider's JWKS: signature (asymmetric algorithms only), iss,
aud (and azp when there are several audiences), exp, iat and nonce. The provider's discovery document
and keys are cached for DISCOVERY_TTL_S; a token signed with a key id the cache does not hold refetches
the keys once (rotation).

Between the redirect to the provider and its redirect back, the flow's secrets (state, nonce, PKCE
verifier, the page to return to) ride in a short-lived cookie signed with Settings.secret_key, bound to
the browser that started the flow: nothing is stored server-side.
"""

from __future__ import annotations

import hmac
import secrets
import threading
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import httpx
from authlib.oauth2.rfc6749.parameters import prepare_grant_uri, prepare_token_request
from authlib.oauth2.rfc7636 import create_s256_code_challenge
from itsdangerous import BadSignature, URLSafeTimedSerializer
from joserfc import jwt
from joserfc.errors import InvalidKeyIdError, JoseError
from joserfc.jwk import KeySet

from app.core.settings import Settings

FLOW_COOKIE = "cb_oidc"
FLOW_LIFETIME_S = 600  # the user has ten minutes at the provider's page
DISCOVERY_TTL_S = 3600.0
LEEWAY_S = 60  # clock skew tolerated between the provider and the portal
# Asymmetric only: an HS256 token would be "signed" with the client secret, which the portal shares.
ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA")


class OidcUnavailable(Exception):
    """The provider could not be reached, or answered something that is not OpenID Connect."""


class OidcRejected(Exception):
    """The provider's answer failed a check (state, error, code, ID token); the message says which, for the user."""


class UnknownKey(OidcRejected):
    """The token names a key id the JWKS does not hold (the provider may have rotated its keys)."""


@dataclass(frozen=True)
class Provider:
    issuer: str
    authorization_endpoint: str
    token_endpoint: str
    jwks_uri: str


@dataclass(frozen=True)
class PendingLogin:
    state: str
    nonce: str
    verifier: str
    next_url: str


# ---- discovery and keys -----------------------------------------------------------------------

_cache: dict[str, tuple[float, Provider, KeySet]] = {}
_cache_lock = threading.Lock()


def _get_json(url: str, *, timeout: float) -> dict[str, Any]:
    try:
        response = httpx.get(url, timeout=timeout, follow_redirects=False)
        response.raise_for_status()
        body = response.json()
    except (httpx.HTTPError, ValueError) as exc:
        raise OidcUnavailable(f"{url}: {exc.__class__.__name__}: {exc}") from exc
    if not isinstance(body, dict):
        raise OidcUnavailable(f"{url}: not a JSON object")
    return body


def _discover(issuer: str, *, timeout: float) -> Provider:
    doc = _get_json(issuer.rstrip("/") + "/.well-known/openid-configuration", timeout=timeout)
    try:
        provider = Provider(issuer=doc["issuer"], authorization_endpoint=doc["authorization_endpoint"],
                            token_endpoint=doc["token_endpoint"], jwks_uri=doc["jwks_uri"])
    except KeyError as exc:
        raise OidcUnavailable(f"discovery document of {issuer} lacks {exc}") from exc
    # OpenID Connect Discovery 1.0 section 4.3: the document must name the issuer it was fetched for.
    if provider.issuer.rstrip("/") != issuer.rstrip("/"):
        raise OidcUnavailable(f"discovery document of {issuer} names another issuer, {provider.issuer}")
    return provider


def _keys(provider: Provider, *, timeout: float) -> KeySet:
    try:
        return KeySet.import_key_set(_get_json(provider.jwks_uri, timeout=timeout))  # type: ignore[arg-type]
    except (JoseError, ValueError, TypeError, KeyError) as exc:
        raise OidcUnavailable(f"JWKS of {provider.issuer} is not usable: {exc}") from exc


def provider_and_keys(settings: Settings, *, refresh: bool = False) -> tuple[Provider, KeySet]:
    """The configured provider and its signing keys (cached; `refresh` refetches)."""
    issuer = settings.oidc_issuer or ""
    with _cache_lock:
        cached = _cache.get(issuer)
    if cached and not refresh and time.monotonic() - cached[0] < DISCOVERY_TTL_S:
        return cached[1], cached[2]
    provider = _discover(issuer, timeout=settings.oidc_timeout_s)
    keys = _keys(provider, timeout=settings.oidc_timeout_s)
    with _cache_lock:
        _cache[issuer] = (time.monotonic(), provider, keys)
    return provider, keys


def forget_providers() -> None:
    """Drop the discovery cache (tests start providers on new ports; a restarted provider has new keys)."""
    with _cache_lock:
        _cache.clear()


# ---- the flow ---------------------------------------------------------------------------------


def start(settings: Settings, *, redirect_uri: str, next_url: str) -> tuple[str, PendingLogin]:
    """The provider's authorization URL for a new sign-in, and the secrets to keep until it returns."""
    provider, _ = provider_and_keys(settings)
    pending = PendingLogin(state=secrets.token_urlsafe(32), nonce=secrets.token_urlsafe(32),
                           verifier=secrets.token_urlsafe(64), next_url=next_url)
    url = prepare_grant_uri(provider.authorization_endpoint, settings.oidc_client_id, "code",
                            redirect_uri=redirect_uri, scope=settings.oidc_scopes, state=pending.state,
                            nonce=pending.nonce, code_challenge=create_s256_code_challenge(pending.verifier),
                            code_challenge_method="S256")
    return url, pending


def _redeem(settings: Settings, provider: Provider, *, code: str, verifier: str, redirect_uri: str) -> dict:
    """The token endpoint's answer for an authorization code (with the PKCE verifier)."""
    body = prepare_token_request("authorization_code", code=code, redirect_uri=redirect_uri, code_verifier=verifier)
    try:
        response = httpx.post(provider.token_endpoint, content=body, timeout=settings.oidc_timeout_s,
                              auth=(settings.oidc_client_id, settings.oidc_client_secret),
                              headers={"Content-Type": "application/x-www-form-urlencoded",
                                       "Accept": "application/json"})
    except httpx.HTTPError as exc:
        raise OidcUnavailable(f"token endpoint {provider.token_endpoint}: {exc.__class__.__name__}: {exc}") from exc
    try:
        token = response.json()
    except ValueError:
        token = None
    if response.status_code >= 500 or not isinstance(token, dict):
        raise OidcUnavailable(f"token endpoint {provider.token_endpoint} answered {response.status_code}")
    if response.status_code >= 400 or "error" in token:
        reason = token.get("error") or response.status_code
        raise OidcRejected(f"The identity provider did not accept the authorization code ({reason}).")
    return token


def finish(settings: Settings, *, pending: PendingLogin, params: Mapping[str, str], redirect_uri: str) -> dict:
    """Check the provider's redirect, redeem the code (with the PKCE verifier), return the verified ID token claims."""
    # Bytes, not str: compare_digest raises TypeError on a non-ASCII str (a state of "é" is a mismatch, not a 500).
    if not hmac.compare_digest(params.get("state", "").encode("utf-8", "surrogatepass"), pending.state.encode()):
        raise OidcRejected("The sign-in response does not belong to this browser's sign-in (state mismatch).")
    if params.get("error"):
        reason = params.get("error_description") or params["error"]
        raise OidcRejected(f"The identity provider refused the sign-in: {reason}.")
    code = params.get("code")
    if not code:
        raise OidcRejected("The identity provider sent no authorization code.")
    provider, keys = provider_and_keys(settings)
    token = _redeem(settings, provider, code=code, verifier=pending.verifier, redirect_uri=redirect_uri)
    id_token = token.get("id_token")
    if not isinstance(id_token, str):
        raise OidcRejected("The identity provider returned no ID token.")
    try:
        return validate_id_token(id_token, issuer=provider.issuer, client_id=settings.oidc_client_id,
                                 nonce=pending.nonce, keys=keys)
    except UnknownKey:
        _, keys = provider_and_keys(settings, refresh=True)
        return validate_id_token(id_token, issuer=provider.issuer, client_id=settings.oidc_client_id,
                                 nonce=pending.nonce, keys=keys)


def validate_id_token(id_token: str, *, issuer: str, client_id: str, nonce: str, keys: KeySet,
                      now: int | None = None) -> dict:
    """The claims of an ID token whose signature, issuer, audience, expiry and nonce all check out."""
    try:
        token = jwt.decode(id_token, keys, algorithms=list(ALGORITHMS))
    except InvalidKeyIdError as exc:
        raise UnknownKey("The ID token is signed with a key the identity provider does not publish.") from exc
    except (ValueError, JoseError) as exc:
        raise OidcRejected(f"The ID token's signature is not valid ({exc.__class__.__name__}).") from exc
    claims = token.claims
    registry = jwt.JWTClaimsRegistry(
        now=now, leeway=LEEWAY_S,
        iss={"essential": True, "value": issuer}, sub={"essential": True}, aud={"essential": True, "value": client_id},
        exp={"essential": True}, iat={"essential": True}, nonce={"essential": True, "value": nonce},
    )
    try:
        registry.validate(claims)
    except JoseError as exc:
        raise OidcRejected(f"The ID token is not valid for this portal ({exc.__class__.__name__}: {exc}).") from exc
    # OIDC Core 3.1.3.7: with several audiences, the authorized party must be this client.
    audience = claims["aud"]
    if isinstance(audience, list) and len(audience) > 1 and claims.get("azp") != client_id:
        raise OidcRejected("The ID token was issued to another client (azp).")
    return claims


# ---- the flow cookie --------------------------------------------------------------------------


def _serializer(settings: Settings) -> URLSafeTimedSerializer:
    return URLSafeTimedSerializer(settings.secret_key, salt="chargeback.oidc")


def seal(settings: Settings, pending: PendingLogin) -> str:
    return _serializer(settings).dumps(asdict(pending))


def unseal(settings: Settings, value: str | None) -> PendingLogin | None:
    """The pending sign-in in a flow cookie, or None when missing, forged or older than FLOW_LIFETIME_S."""
    if not value:
        return None
    try:
        return PendingLogin(**_serializer(settings).loads(value, max_age=FLOW_LIFETIME_S))
    except (BadSignature, TypeError):
        return None
