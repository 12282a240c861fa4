"""Browser sessions and CSRF.

The session cookie holds a random session id signed with Settings.secret_key (itsdangerous); the
database keeps only its SHA-256, so logout and expiry are enforced server-side. CSRF uses a
per-browser random nonce cookie; the token put in forms and in `hx-headers` is an HMAC over the
nonce and the session id, so a token is bound to one browser and one login.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from datetime import timedelta

from itsdangerous import BadSignature, URLSafeTimedSerializer
from starlette.datastructures import MutableHeaders
from starlette.requests import HTTPConnection, Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.core.settings import get_settings

SESSION_COOKIE = "cb_session"
CSRF_COOKIE = "cb_csrf"
CSRF_HEADER = "x-csrf-token"
CSRF_FIELD = "csrf_token"
SESSION_LIFETIME = timedelta(hours=12)
_NO_NONCE_PREFIXES = ("/api/", "/healthz", "/readyz", "/metrics", "/static/")


def _serializer() -> URLSafeTimedSerializer:
    return URLSafeTimedSerializer(get_settings().secret_key, salt="chargeback.session")


def new_session_id() -> str:
    """A fresh random session id (256 bits)."""
    return secrets.token_urlsafe(32)


def sign_session_id(session_id: str) -> str:
    """The cookie value for a session id."""
    return _serializer().dumps(session_id)


def unsign_session_id(value: str | None) -> str | None:
    """The session id in a cookie value, or None when it is missing, forged or older than the lifetime."""
    if not value:
        return None
    try:
        return _serializer().loads(value, max_age=int(SESSION_LIFETIME.total_seconds()))
    except BadSignature:
        return None


def is_https(conn: HTTPConnection) -> bool:
    return conn.url.scheme == "https"


def set_session_cookie(response: Response, request: Request, session_id: str) -> None:
    """Attach the signed session cookie: HttpOnly, SameSite=Lax, Secure over https."""
    response.set_cookie(
        SESSION_COOKIE,
        sign_session_id(session_id),
        max_age=int(SESSION_LIFETIME.total_seconds()),
        httponly=True,
        samesite="lax",
        secure=is_https(request),
        path="/",
    )


def clear_session_cookie(response: Response, request: Request) -> None:
    response.delete_cookie(SESSION_COOKIE, path="/", httponly=True, samesite="lax", secure=is_https(request))


def csrf_nonce(conn: HTTPConnection) -> str:
    """This browser's CSRF nonce: from its cookie, or the one CsrfCookieMiddleware is about to set."""
    return conn.scope.get("state", {}).get("csrf_nonce") or conn.cookies.get(CSRF_COOKIE, "")


def csrf_token(conn: HTTPConnection) -> str:
    """The CSRF token pages embed for this browser and its current session."""
    session_id = unsign_session_id(conn.cookies.get(SESSION_COOKIE)) or ""
    return csrf_token_for(csrf_nonce(conn), session_id)


def csrf_context(conn: HTTPConnection) -> dict[str, str]:
    """Template variable `csrf_token` for forms and `hx-headers` (a context processor of the page templates)."""
    return {"csrf_token": csrf_token(conn)}


def csrf_token_for(nonce: str, session_id: str) -> str:
    """The CSRF token for a browser nonce and a session id ("" before sign-in)."""
    key = get_settings().secret_key.encode()
    return hmac.new(key, f"csrf|{nonce}|{session_id}".encode(), hashlib.sha256).hexdigest()


async def submitted_csrf_token(request: Request) -> str:
    """The token sent with a request: the X-CSRF-Token header (htmx, fetch) or the form field."""
    header = request.headers.get(CSRF_HEADER)
    if header:
        return header
    content_type = request.headers.get("content-type", "")
    if content_type.startswith(("application/x-www-form-urlencoded", "multipart/form-data")):
        form = await request.form()  # cached by Starlette; the route reads the same parsed form
        value = form.get(CSRF_FIELD)
        return value if isinstance(value, str) else ""
    return ""


def csrf_valid(conn: HTTPConnection, submitted: str | None) -> bool:
    """True when `submitted` is the CSRF token of this browser (nonce cookie) and its session."""
    nonce = conn.cookies.get(CSRF_COOKIE)
    if not nonce or not submitted:
        return False
    session_id = unsign_session_id(conn.cookies.get(SESSION_COOKIE)) or ""
    # Bytes, not str: compare_digest raises TypeError on a non-ASCII str, and a token sent as "é" is a 403.
    return hmac.compare_digest(submitted.encode("utf-8", "surrogatepass"),
                               csrf_token_for(nonce, session_id).encode())


async def csrf_ok(request: Request) -> bool:
    """True when the request carries its CSRF token (header or form field)."""
    return csrf_valid(request, await submitted_csrf_token(request))


class CsrfCookieMiddleware:
    """Give every browser a CSRF nonce cookie on its first request, so the first form it sees works."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        conn = HTTPConnection(scope)
        # Machine paths never render forms; bearer clients should not collect cookies.
        if conn.cookies.get(CSRF_COOKIE) or conn.url.path.startswith(_NO_NONCE_PREFIXES):
            await self.app(scope, receive, send)
            return
        nonce = secrets.token_urlsafe(32)
        scope.setdefault("state", {})["csrf_nonce"] = nonce
        secure = "; Secure" if is_https(conn) else ""
        cookie = f"{CSRF_COOKIE}={nonce}; Path=/; HttpOnly; SameSite=Lax{secure}"

        async def send_with_cookie(message: Message) -> None:
            if message["type"] == "http.response.start":
                MutableHeaders(scope=message).append("set-cookie", cookie)
            await send(message)

        await self.app(scope, receive, send_with_cookie)
