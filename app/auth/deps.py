"""Who is asking, and what may they see. One dependency for HTML and JSON routes alike.

`get_principal` accepts `Authorization: Bearer <token>` on /api/* and the session cookie everywhere.
A state-changing request authenticated by cookie must carry its CSRF token (403 otherwise); a token
without the `write` scope may only read. No credentials: 401 problem+json on /api (with
WWW-Authenticate), a redirect to /login for pages (rendered by app.http.problems).

The role aliases (`Staff`, `Finance`, `Operator`, `Reviewer`, `Admin`) are defined here once for the
JSON and the HTML routers; `IdempotencyDep` keys the Idempotency-Key store by the caller.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated

from fastapi import Depends, Request

from app.auth import service
from app.auth.principal import Principal
from app.auth.sessions import SESSION_COOKIE, csrf_ok, unsign_session_id
from app.core.deps import SAFE_METHODS, SessionDep
from app.core.errors import AppError
from app.http.idempotency import Idempotency, idempotency_for


@dataclass
class AuthError(AppError):
    """An AppError with response headers (WWW-Authenticate); app.http.problems copies them."""

    headers: dict[str, str] = field(default_factory=dict)


def _unauthenticated(detail: str, *, bearer_error: str | None = None) -> AuthError:
    challenge = 'Bearer realm="chargeback"' + (f', error="{bearer_error}"' if bearer_error else "")
    return AuthError(detail=detail, status=401, title="Unauthorized", headers={"WWW-Authenticate": challenge})


def _forbidden(detail: str) -> AppError:
    return AppError(detail=detail, status=403, title="Forbidden")


def _authenticate(request: Request, session: SessionDep) -> Principal:
    """Find the caller's credentials. Sync on purpose: FastAPI runs it in the threadpool, off the event loop."""
    authorization = request.headers.get("authorization", "")
    if authorization and request.url.path.startswith("/api/"):
        scheme, _, raw = authorization.partition(" ")
        if scheme.lower() != "bearer" or not raw.strip():
            raise _unauthenticated("Send an API token as 'Authorization: Bearer <token>'", bearer_error="invalid_request")
        principal = service.principal_for_token(session=session, raw=raw.strip(),
                                                write_request=request.method not in SAFE_METHODS)
        if principal is None:
            raise _unauthenticated("The API token is unknown, expired or revoked", bearer_error="invalid_token")
        return principal
    session_id = unsign_session_id(request.cookies.get(SESSION_COOKIE))
    principal = service.principal_for_session(session=session, session_id=session_id) if session_id else None
    if principal is None:
        raise _unauthenticated("Sign in, or send an API token as 'Authorization: Bearer <token>'")
    return principal


async def get_principal(request: Request, principal: Annotated[Principal, Depends(_authenticate)]) -> Principal:
    """The caller, from a bearer token (API) or the session cookie; enforces CSRF and token scopes."""
    if request.method not in SAFE_METHODS:
        if principal.via == "token" and "write" not in principal.scopes:
            raise _forbidden("This API token has read scope only")
        if principal.via == "session" and not await csrf_ok(request):
            raise _forbidden("The CSRF token is missing or does not match this session; reload the page and retry")
    request.state.principal = principal  # templates show who is signed in
    return principal


CurrentUser = Annotated[Principal, Depends(get_principal)]


def require_roles(*roles: str):
    """Dependency factory: the caller must hold one of `roles` (admin always passes)."""

    def _check(user: CurrentUser) -> Principal:
        if "admin" in user.roles or user.roles & set(roles):
            return user
        raise _forbidden("Your role does not allow this")

    return Depends(_check)


STAFF_ROLES = ("operator", "reviewer", "finance", "viewer")  # every role that reads all tenants
Staff = Annotated[Principal, require_roles(*STAFF_ROLES)]
Finance = Annotated[Principal, require_roles("finance")]
Operator = Annotated[Principal, require_roles("operator")]
Reviewer = Annotated[Principal, require_roles("reviewer")]
Admin = Annotated[Principal, require_roles("admin")]


async def _idempotency(request: Request, principal: CurrentUser, session: SessionDep) -> Idempotency:
    return await idempotency_for(request, session=session, actor=principal.name)


IdempotencyDep = Annotated[Idempotency, Depends(_idempotency)]
