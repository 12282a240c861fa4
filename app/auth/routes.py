"""Sign in/out, user and token administration (HTML), and the caller's own tokens (JSON, /api/v1)."""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Form, Request
from pydantic import BaseModel, Field
from starlette.responses import RedirectResponse, Response

from app.auth import federation, flows, oidc, service, tokens
from app.auth.deps import Admin, CurrentUser, IdempotencyDep
from app.auth.models import ROLES, SCOPES, ApiToken
from app.auth.sessions import (
    SESSION_COOKIE,
    clear_session_cookie,
    csrf_valid,
    is_https,
    set_session_cookie,
    unsign_session_id,
)
from app.core.deps import SessionDep
from app.core.errors import AppError, NotFound
from app.core.settings import get_settings
from app.core.timeutil import utcnow
from app.http.htmx import is_htmx
from app.http.pagination import CursorQuery, IdPath, LimitQuery, Page, paginate
from app.http.responses import json_response
from app.http.templating import render

log = logging.getLogger("app.auth")
web = APIRouter(include_in_schema=False)
api = APIRouter(tags=["tokens"])


def _safe_next(value: str | None) -> str:
    """Only local paths: an open redirect after login would be a phishing aid."""
    if value and value.startswith("/") and not value.startswith("//") and "\\" not in value:
        return value
    return "/"


def _client_ip(request: Request) -> str:
    return request.client.host if request.client else "unknown"


def _after_post(request: Request, location: str) -> Response:
    """Post/redirect/get; htmx navigates with HX-Redirect (a 303 would be followed inside the XHR)."""
    if is_htmx(request):
        return Response(status_code=204, headers={"HX-Redirect": location})
    return RedirectResponse(location, status_code=303)


# ---- sign in / out ----------------------------------------------------------------------------


def _login_page(request: Request, *, next_url: str, username: str = "", message: str = "", status_code: int = 200,
                headers: dict[str, str] | None = None) -> Response:
    settings = get_settings()
    context = {"next_url": next_url, "username": username, "message": message,
               "sso_name": settings.oidc_provider_name if settings.oidc_enabled else "",
               "local_login": settings.local_login_enabled}
    return render(request, "auth/login.html", context, status_code=status_code, block=None, headers=headers)


def _signed_in(request: Request, session, user, next_url: str) -> Response:
    """A fresh session for `user` (ending the one the browser had) and the redirect to `next_url`."""
    previous = unsign_session_id(request.cookies.get(SESSION_COOKIE))
    if previous:  # a fresh id on every sign-in: a session id planted before login is worthless after it
        service.end_session(session=session, session_id=previous)
    session_id = service.start_session(session=session, user=user)
    response = RedirectResponse(next_url, status_code=303)
    set_session_cookie(response, request, session_id)
    return response


@web.get("/login")
def login_page(request: Request, session: SessionDep, next: str = "/") -> Response:
    session_id = unsign_session_id(request.cookies.get(SESSION_COOKIE))
    if session_id and service.principal_for_session(session=session, session_id=session_id):
        return RedirectResponse(_safe_next(next), status_code=303)
    return _login_page(request, next_url=_safe_next(next))


@web.post("/login")
def login(
    request: Request,
    session: SessionDep,
    username: Annotated[str, Form(max_length=200)],
    password: Annotated[str, Form(max_length=2000)],
    next: Annotated[str, Form()] = "/",
    csrf_token: Annotated[str, Form()] = "",
) -> Response:
    next_url = _safe_next(next)
    if not csrf_valid(request, csrf_token):
        raise AppError(detail="The sign-in form expired; reload the page and try again", status=403, title="Forbidden")
    result = service.authenticate(session=session, name=username.strip(), password=password, ip=_client_ip(request))
    if result.user is None:
        if result.locked_until is not None:
            wait = max(1, int((result.locked_until - utcnow()).total_seconds()))
            message = f"Too many failed sign-ins. Try again in {(wait + 59) // 60} minutes."
            return _login_page(request, next_url=next_url, username=username, message=message, status_code=429,
                               headers={"Retry-After": str(wait)})
        return _login_page(request, next_url=next_url, username=username, message="Wrong user name or password.",
                           status_code=401)
    settings = get_settings()
    # Checked after the password, so the answer tells only someone who knows it which accounts are break-glass.
    if not service.local_credentials_allowed(session=session, user=result.user, password_sign_in=True):
        return _login_page(request, next_url=next_url, username=username, status_code=403,
                           message=f"Local sign-in is disabled for this account; sign in with "
                                   f"{settings.oidc_provider_name}.")
    return _signed_in(request, session, result.user, next_url)


# ---- single sign-on (OpenID Connect) ----------------------------------------------------------


def _redirect_uri(request: Request) -> str:
    return get_settings().oidc_redirect_url or str(request.url_for("oidc_callback"))


def _sso_error(request: Request, message: str, status_code: int) -> Response:
    """The sign-in page with the reason: a provider problem never blocks the local (break-glass) form."""
    response = _login_page(request, next_url="/", message=message, status_code=status_code)
    response.delete_cookie(oidc.FLOW_COOKIE, path="/auth/oidc/")
    return response


def _unavailable(request: Request, exc: Exception) -> Response:
    log.warning("oidc provider unavailable: %s", exc)
    name = get_settings().oidc_provider_name
    return _sso_error(request, f"Sign-in with {name} is not available right now: the identity provider could not "
                               "be reached. Try again in a few minutes, or use a local account.", 503)


def _known_tenants(request: Request, session) -> set[str]:
    """The tenants of the policy in effect, from the reader the app factory installs (auth does not import policy)."""
    reader = getattr(request.app.state, "tenant_names", None)
    return set(reader(session)) if reader else set()


@web.get("/auth/oidc/login")
def oidc_login(request: Request, session: SessionDep, next: str = "/") -> Response:
    """Start single sign-on: state, nonce and PKCE verifier into a signed cookie and a one-time record, the browser to the provider."""
    settings = get_settings()
    if not settings.oidc_enabled:
        raise NotFound("Single sign-on is not configured")
    try:
        url, pending = oidc.start(settings, redirect_uri=_redirect_uri(request), next_url=_safe_next(next))
    except oidc.OidcUnavailable as exc:
        return _unavailable(request, exc)
    flows.record(session=session, pending=pending)
    response = RedirectResponse(url, status_code=303)
    response.set_cookie(oidc.FLOW_COOKIE, oidc.seal(settings, pending), max_age=oidc.FLOW_LIFETIME_S, httponly=True,
                        samesite="lax", secure=is_https(request), path="/auth/oidc/")
    return response


@web.get("/auth/oidc/callback", name="oidc_callback")
def oidc_callback(request: Request, session: SessionDep) -> Response:
    """The provider sends the browser back here: verify everything, map the groups, open a session."""
    settings = get_settings()
    if not settings.oidc_enabled:
        raise NotFound("Single sign-on is not configured")
    pending = oidc.unseal(settings, request.cookies.get(oidc.FLOW_COOKIE))
    if pending is None:
        return _sso_error(request, "This sign-in expired or was started in another browser; start it again.", 400)
    params = dict(request.query_params)
    try:
        oidc.check_state(pending, params)  # before consuming: a forged callback must not burn the real one
        if not flows.consume(session=session, pending=pending):
            return _sso_error(request, "This sign-in response was already used or has expired; start the sign-in "
                                       "again.", 400)
        claims = oidc.finish(settings, pending=pending, params=params, redirect_uri=_redirect_uri(request))
        user = federation.sign_in(session=session, issuer=claims["iss"], claims=claims, settings=settings,
                                  known_tenants=_known_tenants(request, session))
    except oidc.OidcUnavailable as exc:
        return _unavailable(request, exc)
    except oidc.OidcRejected as exc:
        log.warning("oidc sign-in rejected: %s", exc)
        return _sso_error(request, f"Sign-in with {settings.oidc_provider_name} failed. {exc}", 401)
    except federation.SignInRefused as exc:
        return _sso_error(request, str(exc), 403)
    response = _signed_in(request, session, user, pending.next_url)
    response.delete_cookie(oidc.FLOW_COOKIE, path="/auth/oidc/")
    return response


@web.post("/logout")
def logout(request: Request, session: SessionDep, csrf_token: Annotated[str, Form()] = "") -> Response:
    if not csrf_valid(request, csrf_token or request.headers.get("x-csrf-token")):
        raise AppError(detail="The CSRF token is missing or does not match; reload the page", status=403,
                       title="Forbidden")
    session_id = unsign_session_id(request.cookies.get(SESSION_COOKIE))
    if session_id:
        service.end_session(session=session, session_id=session_id)
    response = RedirectResponse("/login", status_code=303)
    clear_session_cookie(response, request)
    return response


# ---- user administration ----------------------------------------------------------------------


def _users_page(request: Request, session, *, message: str = "", status_code: int = 200) -> Response:
    users = service.list_users(session=session)
    return render(request, "admin/users.html",
                  {"title": "Users", "users": users, "roles": ROLES, "message": message,
                   "sso_users": federation.sso_user_ids(session=session),
                   "unknown_tenants": federation.unknown_tenant_reports(session=session)}, status_code=status_code)


@web.get("/admin/users")
def users_page(request: Request, session: SessionDep, admin: Admin) -> Response:
    return _users_page(request, session)


def _tenant_list(value: str) -> list[str]:
    return [t.strip() for t in value.replace(",", " ").split() if t.strip()]


@web.post("/admin/users")
def create_user(
    request: Request,
    session: SessionDep,
    admin: Admin,
    name: Annotated[str, Form(max_length=64)],
    role: Annotated[str, Form()],
    password: Annotated[str, Form(max_length=2000)],
    tenants: Annotated[str, Form()] = "",
) -> Response:
    user = service.create_user(session=session, name=name.strip(), role=role, password=password,
                               tenants=_tenant_list(tenants), actor=admin.name)
    if is_htmx(request):
        return _users_page(request, session, message=f"User {user.name} created.", status_code=201)
    return _after_post(request, "/admin/users")


@web.post("/admin/users/{user_id}")
def update_user(
    request: Request,
    session: SessionDep,
    admin: Admin,
    user_id: IdPath,
    role: Annotated[str, Form()],
    tenants: Annotated[str, Form()] = "",
    active: Annotated[bool, Form()] = False,
    password: Annotated[str, Form(max_length=2000)] = "",
) -> Response:
    if user_id == admin.user_id and (role != "admin" or not active):
        raise AppError(detail="You cannot demote or deactivate your own account", status=409, title="Conflict")
    user = service.update_user(session=session, user_id=user_id, role=role, tenants=_tenant_list(tenants),
                               active=active, password=password or None, actor=admin.name)
    if is_htmx(request):
        return _users_page(request, session, message=f"User {user.name} updated.")
    return _after_post(request, "/admin/users")


# ---- token administration ---------------------------------------------------------------------


def _tokens_page(request: Request, session, *, new_token: str = "", message: str = "", status_code: int = 200):
    context = {
        "title": "API tokens",
        "tokens": service.list_tokens(session=session),
        "scopes": SCOPES,
        "new_token": new_token,
        "message": message,
        "now": utcnow(),
    }
    return render(request, "admin/tokens.html", context, status_code=status_code)


@web.get("/admin/tokens")
def tokens_page(request: Request, session: SessionDep, admin: Admin) -> Response:
    return _tokens_page(request, session)


@web.post("/admin/tokens")
def create_token_form(
    request: Request,
    session: SessionDep,
    admin: Admin,
    scopes: Annotated[list[str], Form()],
    expires: Annotated[str, Form()] = "90d",
    label: Annotated[str, Form(max_length=100)] = "",
    user: Annotated[str, Form()] = "",
) -> Response:
    # Four eyes hold by identity: a token minted for someone else would let an admin approve as them.
    if user and user != admin.name:
        raise AppError(detail="An admin creates API tokens only for their own account; other users create their own",
                       status=403, title="Forbidden")
    owner = service.get_user(session=session, user_id=admin.user_id)
    lifetime = tokens.parse_lifetime(expires)
    row, raw = service.create_token(session=session, user=owner, scopes=scopes, lifetime=lifetime, label=label,
                                    actor=admin.name)
    # Rendered, never redirected: the raw token exists only in this response.
    return _tokens_page(request, session, new_token=raw, message=f"Token {row.prefix}… created for {owner.name}.",
                        status_code=201)


@web.post("/admin/tokens/{token_id}/revoke")
def revoke_token_form(request: Request, session: SessionDep, admin: Admin, token_id: IdPath) -> Response:
    row = service.revoke_token(session=session, token_id=token_id, actor=admin.name)
    if is_htmx(request):
        return _tokens_page(request, session, message=f"Token {row.prefix}… revoked.")
    return _after_post(request, "/admin/tokens")


# ---- JSON: the caller and their tokens --------------------------------------------------------


class Me(BaseModel):
    name: str
    roles: list[str]
    tenants: list[str] | None = Field(description="The tenants the caller may read; null means every tenant")
    via: str
    scopes: list[str]


class TokenCreate(BaseModel):
    label: str = Field(default="", max_length=100)
    scopes: list[str] = Field(default_factory=lambda: ["read"], description="read and/or write")
    expires: str = Field(default="90d", description="Lifetime such as 90d, 12h or 2w (at most 366d)")


class TokenPublic(BaseModel):
    id: int
    label: str
    prefix: str
    scopes: list[str]
    created_at: datetime
    expires_at: datetime
    revoked_at: datetime | None
    last_used_at: datetime | None


class TokenCreated(TokenPublic):
    token: str | None = Field(
        description="The token itself, shown only in this response; null when replayed for a repeated Idempotency-Key"
    )


def _public(row: ApiToken) -> TokenPublic:
    return TokenPublic(id=row.id, label=row.label, prefix=row.prefix, scopes=row.scopes.split(),
                       created_at=row.created_at, expires_at=row.expires_at, revoked_at=row.revoked_at,
                       last_used_at=row.last_used_at)


@api.get("/me", response_model=Me, tags=["account"])
def me(user: CurrentUser) -> Me:
    """Who the caller is: name, roles, visible tenants, how they authenticated."""
    visible = user.visible_tenants()
    return Me(name=user.name, roles=sorted(user.roles), tenants=None if visible is None else sorted(visible),
              via=user.via, scopes=sorted(user.scopes))


@api.get("/tokens", response_model=Page[TokenPublic])
def list_my_tokens(
    user: CurrentUser, session: SessionDep, limit: LimitQuery = 100, cursor: CursorQuery = None
) -> Page[TokenPublic]:
    """The caller's own API tokens, newest first, paginated (never the token values)."""
    rows, next_cursor = paginate(session, service.tokens_query(user_id=user.user_id),
                                 keys=[ApiToken.created_at, ApiToken.id], limit=limit, cursor=cursor, descending=True)
    return Page[TokenPublic](items=[_public(row) for row in rows], next_cursor=next_cursor)


@api.post("/tokens", status_code=201, response_model=TokenCreated)
def create_my_token(body: TokenCreate, user: CurrentUser, session: SessionDep, idem: IdempotencyDep) -> Response:
    """Create an API token for the caller. Send an Idempotency-Key to make retries safe."""
    replayed = idem.replay()
    if replayed is not None:
        return replayed
    owner = service.get_user(session=session, user_id=user.user_id)
    if "write" in body.scopes and "write" not in user.scopes:
        raise AppError(detail="A read-only token cannot create a write token", status=403, title="Forbidden")
    row, raw = service.create_token(session=session, user=owner, scopes=body.scopes,
                                    lifetime=tokens.parse_lifetime(body.expires, path="body.expires"),
                                    label=body.label, actor=user.name)
    created = TokenCreated(**_public(row).model_dump(), token=raw)
    # The stored replay omits the token: it is kept nowhere but in the caller's hands.
    return idem.remember(json_response(created, status_code=201), stored_payload=created.model_copy(update={"token": None}))


@api.delete("/tokens/{token_id}", status_code=204)
def revoke_my_token(token_id: IdPath, user: CurrentUser, session: SessionDep) -> Response:
    """Revoke one of the caller's tokens (admins: any token). Revoking twice is harmless."""
    owner = None if "admin" in user.roles else user.user_id
    service.revoke_token(session=session, token_id=token_id, actor=user.name, owner_id=owner)
    return Response(status_code=204)
