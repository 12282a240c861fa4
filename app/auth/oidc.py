"""OpenID Connect sign-in: the authorization code flow with PKCE (S256), state and nonce.

authlib builds the authorization URL (with the S256 code challenge) and the token request; httpx sends it
(client_secret_basic; authlib's own httpx client is left out: it is moving to another HTTP library).
joserfc verifies the ID token against the provider's JWKS: signature (asymmetric algorithms only), iss,
aud (and azp when there are several audiences), exp, iat and nonce. When the ID token lacks the groups
claim (Settings.oidc_groups_claim), the claims of the provider's userinfo endpoint fill in what the ID token
does not carry (OIDC Core 5.4: many providers put `groups` there only), after checking that userinfo's `sub`
is the ID token's (5.3.4). Every request to the provider (discovery, JWKS, token, userinfo) trusts the
system's CA store plus Settings.oidc_ca_file when set (a private CA added, never the store replaced). The provider's discovery document
and keys are cached for DISCOVERY_TTL_S; a token signed with a key id the cache does not hold refetches
the keys once (rotation).

Between the redirect to the provider and its redirect back, the flow's secrets (state, nonce, PKCE
verifier, the page to return to) ride in a short-lived cookie signed with Settings.secret_key, bound to
the browser that started the flow; app.auth.flows keeps a server-side record of each flow that the
callback consumes, so a callback is accepted once (a provider that does not enforce single-use codes
cannot be replayed against the portal).
"""

from __future__ import annotations

import hmac
import secrets
import ssl
import threading
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from functools import lru_cache
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
    userinfo_endpoint: str | None = None


@dataclass(frozen=True)
class PendingLogin:
    state: str
    nonce: str
    verifier: str
    next_url: str


# ---- discovery and keys -----------------------------------------------------------------------

_cache: dict[str, tuple[float, Provider, KeySet]] = {}
_cache_lock = threading.Lock()


@lru_cache(maxsize=8)
def _tls_context(ca_file: str | None) -> ssl.SSLContext:
    """The system's CA store, plus `ca_file` when given (create_default_context(cafile=...) would drop the system's)."""
    context = ssl.create_default_context()
    if ca_file:
        try:
            context.load_verify_locations(cafile=ca_file)
        except (OSError, ssl.SSLError) as exc:
            raise OidcUnavailable(f"CHARGEBACK_OIDC_CA_FILE {ca_file}: {exc}") from exc
    return context


def tls_context(settings: Settings) -> ssl.SSLContext:
    """What every request to the provider verifies its certificate with."""
    return _tls_context(settings.oidc_ca_file or None)


def _get_json(url: str, *, settings: Settings, headers: dict[str, str] | None = None) -> dict[str, Any]:
    try:
        response = httpx.get(url, timeout=settings.oidc_timeout_s, follow_redirects=False, headers=headers,
                             verify=tls_context(settings))
        response.raise_for_status()
        body = response.json()
    except (httpx.HTTPError, ValueError) as exc:
        raise OidcUnavailable(f"{url}: {exc.__class__.__name__}: {exc}") from exc
    if not isinstance(body, dict):
        raise OidcUnavailable(f"{url}: not a JSON object")
    return body


def _discover(issuer: str, *, settings: Settings) -> Provider:
    doc = _get_json(issuer.rstrip("/") + "/.well-known/openid-configuration", settings=settings)
    try:
        provider = Provider(issuer=doc["issuer"], authorization_endpoint=doc["authorization_endpoint"],
                            token_endpoint=doc["token_endpoint"], jwks_uri=doc["jwks_uri"],
                            userinfo_endpoint=doc.get("userinfo_endpoint") or None)
    except KeyError as exc:
        raise OidcUnavailable(f"discovery document of {issuer} lacks {exc}") from exc
    # OpenID Connect Discovery 1.0 section 4.3: the document must name the issuer it was fetched for.
    if provider.issuer.rstrip("/") != issuer.rstrip("/"):
        raise OidcUnavailable(f"discovery document of {issuer} names another issuer, {provider.issuer}")
    return provider


def _keys(provider: Provider, *, settings: Settings) -> KeySet:
    try:
        return KeySet.import_key_set(_get_json(provider.jwks_uri, settings=settings))  # type: ignore[arg-type]
    except (JoseError, ValueError, TypeError, KeyError) as exc:
        raise OidcUnavailable(f"JWKS of {provider.issuer} is not usable: {exc}") from exc


def provider_and_keys(settings: Settings, *, refresh: bool = False) -> tuple[Provider, KeySet]:
    """The configured provider and its signing keys (cached; `refresh` refetches)."""
    issuer = settings.oidc_issuer or ""
    with _cache_lock:
        cached = _cache.get(issuer)
    if cached and not refresh and time.monotonic() - cached[0] < DISCOVERY_TTL_S:
        return cached[1], cached[2]
    provider = _discover(issuer, settings=settings)
    keys = _keys(provider, settings=settings)
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
                              auth=(settings.oidc_client_id, settings.oidc_client_secret), verify=tls_context(settings),
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


def check_state(pending: PendingLogin, params: Mapping[str, str]) -> None:
    """Refuse a redirect whose state is not the one this browser's flow cookie holds (OidcRejected)."""
    # Bytes, not str: compare_digest raises TypeError on a non-ASCII str (a state of "é" is a mismatch, not a 500).
    if not hmac.compare_digest(params.get("state", "").encode("utf-8", "surrogatepass"), pending.state.encode()):
        raise OidcRejected("The sign-in response does not belong to this browser's sign-in (state mismatch).")


def claim_at(claims: Mapping[str, Any], path: str) -> Any:
    """The claim named `path`, or at the dotted `path` (Keycloak's realm_access.roles); None when absent.

    The whole name is tried first: namespaced claims such as "https://example.org/groups" contain dots.
    """
    if path in claims:
        return claims[path]
    node: Any = claims
    for part in path.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def _userinfo(settings: Settings, provider: Provider, *, access_token: str, subject: str) -> dict[str, Any]:
    """The userinfo endpoint's claims for `access_token`, refused unless they are about `subject`."""
    assert provider.userinfo_endpoint
    info = _get_json(provider.userinfo_endpoint, settings=settings,
                     headers={"Authorization": f"Bearer {access_token}", "Accept": "application/json"})
    if info.get("sub") != subject:  # OIDC Core 5.3.4: otherwise the answer must not be used
        raise OidcRejected("The identity provider's userinfo answer is about another user (sub mismatch).")
    return info


def finish(settings: Settings, *, pending: PendingLogin, params: Mapping[str, str], redirect_uri: str) -> dict:
    """Check the provider's redirect, redeem the code (with the PKCE verifier), return the verified claims.

    The ID token's claims, completed from userinfo when they lack the groups claim.
    """
    check_state(pending, params)
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
        claims = validate_id_token(id_token, issuer=provider.issuer, client_id=settings.oidc_client_id,
                                   nonce=pending.nonce, keys=keys)
    except UnknownKey:
        _, keys = provider_and_keys(settings, refresh=True)
        claims = validate_id_token(id_token, issuer=provider.issuer, client_id=settings.oidc_client_id,
                                   nonce=pending.nonce, keys=keys)
    access_token = token.get("access_token")
    if (claim_at(claims, settings.oidc_groups_claim) is None and provider.userinfo_endpoint
            and isinstance(access_token, str) and access_token):
        info = _userinfo(settings, provider, access_token=access_token, subject=claims["sub"])
        claims = {**info, **claims}  # the signed ID token wins where both carry a claim
    return claims


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
