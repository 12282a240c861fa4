"""ID tokens that must not sign anyone in: keys generated here; discovery, JWKS and token endpoint over real HTTP.

Each case hands `oidc.finish` (and once the callback route) a token that is wrong in one way only; the
control case, the same token done right, passes, so each refusal is about that one defect.
"""

from __future__ import annotations

import base64
import hashlib
import json
import ssl
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import pytest
from joserfc import jwt
from joserfc.jwk import KeySet, OctKey, RSAKey

from app.auth import oidc, sessions
from app.core.settings import Settings
from tests.support.secured import Pki

CLIENT_ID = "portal"
NONCE = "nonce-of-this-sign-in"
REDIRECT = "http://portal.test/auth/oidc/callback"


class TokenIssuer:
    """Discovery, JWKS, userinfo and a token endpoint answering whatever `token_answer` is (a real HTTP server).

    It redeems any code any number of times (as a provider that does not enforce single-use codes would);
    with `pki`, it serves https with the PKI's server certificate.
    """

    def __init__(self, pki: Pki | None = None) -> None:
        self.key = RSAKey.generate_key(2048, parameters={"kid": "key-1"})
        self.published = KeySet([self.key])
        self.token_answer: tuple[int, dict] = (200, {})
        self.token_requests: list[dict[str, list[str]]] = []
        self.userinfo_answer: dict = {}
        self.userinfo_authorizations: list[str] = []
        issuer = self

        class Handler(BaseHTTPRequestHandler):
            def _send(self, status: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                if self.path == "/.well-known/openid-configuration":
                    self._send(200, {"issuer": issuer.url, "authorization_endpoint": f"{issuer.url}/authorize",
                                     "token_endpoint": f"{issuer.url}/token", "jwks_uri": f"{issuer.url}/jwks",
                                     "userinfo_endpoint": f"{issuer.url}/userinfo"})
                elif self.path == "/jwks":
                    self._send(200, issuer.published.as_dict(private=False))
                elif self.path == "/userinfo":
                    issuer.userinfo_authorizations.append(self.headers.get("Authorization", ""))
                    self._send(200, issuer.userinfo_answer)
                else:
                    self._send(404, {})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                issuer.token_requests.append(parse_qs(self.rfile.read(length).decode()))
                self._send(*issuer.token_answer)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        scheme = "http"
        if pki is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(pki.server_cert, pki.server_key)
            self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
            scheme = "https"
        self.url = f"{scheme}://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def claims(self, **changes) -> dict:
        now = int(time.time())
        claims = {"iss": self.url, "sub": "u-1", "aud": CLIENT_ID, "iat": now, "exp": now + 300, "nonce": NONCE,
                  "groups": ["gpu-staff"]}
        claims.update(changes)
        return {k: v for k, v in claims.items() if v is not None}

    def sign(self, claims: dict, *, key=None, alg: str = "RS256") -> str:
        key = key or self.key
        return jwt.encode({"alg": alg, "kid": key.kid}, claims, key, algorithms=[alg])

    def answer_with(self, id_token: str) -> None:
        self.token_answer = (200, {"access_token": "at", "token_type": "Bearer", "id_token": id_token})


@contextmanager
def serving(issuer: TokenIssuer) -> Iterator[TokenIssuer]:
    issuer._thread.start()
    try:
        yield issuer
    finally:
        issuer.server.shutdown()
        issuer.server.server_close()


@pytest.fixture(scope="module")
def issuer():
    with serving(TokenIssuer()) as running:
        yield running


@pytest.fixture
def settings(issuer):
    oidc.forget_providers()
    yield Settings(_env_file=None, oidc_issuer=issuer.url, oidc_client_id=CLIENT_ID, oidc_client_secret="s3cret",
                   oidc_timeout_s=5)
    oidc.forget_providers()


def _finish(settings, *, state: str = "st", params: dict | None = None) -> dict:
    pending = oidc.PendingLogin(state="st", nonce=NONCE, verifier="v" * 64, next_url="/")
    return oidc.finish(settings, pending=pending, params=params or {"state": state, "code": "c0de"},
                       redirect_uri=REDIRECT)


def test_a_valid_token_passes_and_the_code_is_redeemed_with_the_pkce_verifier(issuer, settings):
    issuer.answer_with(issuer.sign(issuer.claims()))
    claims = _finish(settings)
    assert (claims["sub"], claims["groups"]) == ("u-1", ["gpu-staff"])
    sent = issuer.token_requests[-1]
    assert sent["code"] == ["c0de"] and sent["code_verifier"] == ["v" * 64] and sent["redirect_uri"] == [REDIRECT]


def test_the_authorization_url_carries_state_nonce_and_an_s256_challenge(issuer, settings):
    url, pending = oidc.start(settings, redirect_uri=REDIRECT, next_url="/x")
    query = {k: v[0] for k, v in parse_qs(urlsplit(url).query).items()}
    assert url.startswith(f"{issuer.url}/authorize?")
    assert (query["state"], query["nonce"]) == (pending.state, pending.nonce)
    digest = hashlib.sha256(pending.verifier.encode()).digest()
    assert query["code_challenge_method"] == "S256"
    assert query["code_challenge"] == base64.urlsafe_b64encode(digest).decode().rstrip("=")
    assert query["response_type"] == "code" and query["client_id"] == CLIENT_ID and query["redirect_uri"] == REDIRECT
    assert oidc.unseal(settings, oidc.seal(settings, pending)) == pending
    assert oidc.unseal(settings, oidc.seal(settings, pending)[:-2] + "xx") is None


@pytest.mark.parametrize(("defect", "expected"), [
    ("signed by another key under the same key id", "signature is not valid"),
    ("wrong audience", "Invalid claim: 'aud'"),
    ("expired", "The token is expired"),
    ("nonce of another sign-in", "Invalid claim: 'nonce'"),
    ("another issuer", "Invalid claim: 'iss'"),
    ("no subject", "Missing claim: 'sub'"),
    ("several audiences, this client not the authorized party", "issued to another client (azp)"),
    ("HS256 with the client secret", "signature is not valid"),
])
def test_defective_tokens_are_refused(issuer, settings, defect, expected):
    now = int(time.time())
    token = {
        "signed by another key under the same key id":
            lambda: issuer.sign(issuer.claims(), key=RSAKey.generate_key(2048, parameters={"kid": "key-1"})),
        "wrong audience": lambda: issuer.sign(issuer.claims(aud="someone-else")),
        "expired": lambda: issuer.sign(issuer.claims(iat=now - 900, exp=now - 600)),
        "nonce of another sign-in": lambda: issuer.sign(issuer.claims(nonce="replayed")),
        "another issuer": lambda: issuer.sign(issuer.claims(iss="https://evil.example")),
        "no subject": lambda: issuer.sign(issuer.claims(sub=None)),
        "several audiences, this client not the authorized party":
            lambda: issuer.sign(issuer.claims(aud=[CLIENT_ID, "other"], azp="other")),
        "HS256 with the client secret":
            lambda: issuer.sign(issuer.claims(), key=OctKey.import_key("s3cret" * 6, {"kid": "key-1"}), alg="HS256"),
    }[defect]()
    issuer.answer_with(token)
    with pytest.raises(oidc.OidcRejected) as refused:
        _finish(settings)
    assert expected in str(refused.value)


def test_a_rotated_key_is_fetched_once_and_an_unknown_one_refused(issuer, settings):
    issuer.answer_with(issuer.sign(issuer.claims()))
    _finish(settings)  # caches the JWKS with key-1
    rotated = RSAKey.generate_key(2048, parameters={"kid": "key-2"})
    issuer.published = KeySet([issuer.key, rotated])
    try:
        issuer.answer_with(issuer.sign(issuer.claims(), key=rotated))
        assert _finish(settings)["sub"] == "u-1"
        stranger = RSAKey.generate_key(2048, parameters={"kid": "key-3"})
        issuer.answer_with(issuer.sign(issuer.claims(), key=stranger))
        with pytest.raises(oidc.OidcRejected, match="key the identity provider does not publish"):
            _finish(settings)
    finally:
        issuer.published = KeySet([issuer.key])


def test_state_mismatch_is_refused_before_any_token_request(issuer, settings):
    before = len(issuer.token_requests)
    with pytest.raises(oidc.OidcRejected, match="state mismatch"):
        _finish(settings, state="forged")
    assert len(issuer.token_requests) == before


def test_token_endpoint_refusal_and_failure(issuer, settings):
    issuer.token_answer = (400, {"error": "invalid_grant"})
    with pytest.raises(oidc.OidcRejected, match="invalid_grant"):
        _finish(settings)
    issuer.token_answer = (502, {"oops": True})
    with pytest.raises(oidc.OidcUnavailable):
        _finish(settings)
    issuer.token_answer = (200, {"access_token": "at", "token_type": "Bearer"})
    with pytest.raises(oidc.OidcRejected, match="no ID token"):
        _finish(settings)


@pytest.mark.anyio
async def test_an_invalid_token_at_the_callback_opens_no_session(client, issuer, sso_settings):
    sso_settings(issuer.url, oidc_client_id=CLIENT_ID)
    start = await client.get("/auth/oidc/login")
    query = {k: v[0] for k, v in parse_qs(urlsplit(start.headers["location"]).query).items()}
    issuer.answer_with(issuer.sign(issuer.claims(nonce=query["nonce"], aud="someone-else")))
    refused = await client.get(f"/auth/oidc/callback?code=c0de&state={query['state']}")
    assert refused.status_code == 401 and "not valid for this portal" in refused.text
    assert not [c for c in refused.headers.get_list("set-cookie") if c.startswith(sessions.SESSION_COOKIE + "=")]
    assert (await client.get("/api/v1/me")).status_code == 401


# ---- groups in userinfo, the provider's CA, single-use flows (issue 25) ------------------------


def test_groups_absent_from_the_id_token_come_from_userinfo(issuer, settings):
    issuer.answer_with(issuer.sign(issuer.claims(groups=None)))
    issuer.userinfo_answer = {"sub": "u-1", "groups": ["gpu-finance"], "email": "u1@example.org"}
    claims = _finish(settings)
    assert claims["groups"] == ["gpu-finance"] and claims["email"] == "u1@example.org"
    assert issuer.userinfo_authorizations[-1] == "Bearer at"


def test_userinfo_about_another_subject_is_refused_and_the_id_token_wins(issuer, settings):
    issuer.answer_with(issuer.sign(issuer.claims(groups=None)))
    issuer.userinfo_answer = {"sub": "u-2", "groups": ["gpu-admins"]}
    with pytest.raises(oidc.OidcRejected, match="sub mismatch"):
        _finish(settings)
    before = len(issuer.userinfo_authorizations)
    issuer.answer_with(issuer.sign(issuer.claims(groups=["gpu-staff"])))
    issuer.userinfo_answer = {"sub": "u-1", "groups": ["gpu-admins"]}
    assert _finish(settings)["groups"] == ["gpu-staff"]
    assert len(issuer.userinfo_authorizations) == before, "userinfo is asked only when the ID token lacks the groups"


def test_a_nested_groups_claim_path_is_read_from_userinfo(issuer):
    keycloak = Settings(_env_file=None, oidc_issuer=issuer.url, oidc_client_id=CLIENT_ID, oidc_client_secret="s",
                        oidc_groups_claim="realm_access.roles")
    oidc.forget_providers()
    issuer.answer_with(issuer.sign(issuer.claims()))  # "groups" in the ID token, but not the configured path
    issuer.userinfo_answer = {"sub": "u-1", "realm_access": {"roles": ["gpu-ops"]}}
    assert oidc.claim_at(_finish(keycloak), "realm_access.roles") == ["gpu-ops"]


def test_the_providers_ca_file_is_added_to_the_system_store(tmp_path):
    pki = Pki(tmp_path / "pki")
    with serving(TokenIssuer(pki)) as tls_issuer:
        base = dict(_env_file=None, oidc_issuer=tls_issuer.url, oidc_client_id=CLIENT_ID, oidc_client_secret="s",
                    oidc_timeout_s=5)
        tls_issuer.answer_with(tls_issuer.sign(tls_issuer.claims()))
        oidc.forget_providers()
        with pytest.raises(oidc.OidcUnavailable, match="CERTIFICATE_VERIFY_FAILED"):
            _finish(Settings(**base))
        with_ca = Settings(**base, oidc_ca_file=str(pki.ca))
        oidc.forget_providers()
        assert _finish(with_ca)["sub"] == "u-1"  # discovery, JWKS and token endpoint over the private CA
        tls_issuer.answer_with(tls_issuer.sign(tls_issuer.claims(groups=None)))
        tls_issuer.userinfo_answer = {"sub": "u-1", "groups": ["gpu-ops"]}
        assert _finish(with_ca)["groups"] == ["gpu-ops"]  # and userinfo
        oidc.forget_providers()
    system = ssl.create_default_context().cert_store_stats()["x509_ca"]
    assert system > 0, "the test box has a system CA store"
    assert oidc.tls_context(with_ca).cert_store_stats()["x509_ca"] == system + 1
    with pytest.raises(ValueError, match="OIDC_CA_FILE"):
        Settings(**base, oidc_ca_file=str(tmp_path / "missing.pem"))


@pytest.mark.anyio
async def test_a_replayed_callback_is_refused_even_when_the_provider_redeems_codes_twice(client, issuer,
                                                                                        sso_settings):
    sso_settings(issuer.url, oidc_client_id=CLIENT_ID)
    start = await client.get("/auth/oidc/login")
    query = {k: v[0] for k, v in parse_qs(urlsplit(start.headers["location"]).query).items()}
    flow_cookie = client.cookies[oidc.FLOW_COOKIE]
    issuer.answer_with(issuer.sign(issuer.claims(nonce=query["nonce"])))
    callback = f"/auth/oidc/callback?code=c0de&state={query['state']}"
    first = await client.get(callback)
    assert first.status_code == 303, first.text
    client.cookies.clear()  # another browser, holding what the first one sent (its flow cookie and the URL)
    client.cookies.set(oidc.FLOW_COOKIE, flow_cookie, domain="portal.test", path="/auth/oidc/")
    requests_before = len(issuer.token_requests)
    replay = await client.get(callback)
    assert replay.status_code == 400 and "already used" in replay.text
    assert not [c for c in replay.headers.get_list("set-cookie") if c.startswith(sessions.SESSION_COOKIE + "=")]
    assert len(issuer.token_requests) == requests_before, "the code is not even redeemed again"
    assert (await client.get("/api/v1/me")).status_code == 401
