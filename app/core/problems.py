"""One place that turns every error into RFC 9457 problem+json (API) or a readable page/fragment (HTML).

`install(app)` registers the handlers; `create_app` calls it. Business code raises `AppError`
(app.core.errors) and never builds error responses itself. An exception may carry a `headers`
mapping (e.g. `WWW-Authenticate`, `Retry-After`); the handler copies it onto the response.
"""

from __future__ import annotations

import html
import logging
from http import HTTPStatus
from typing import Any
from urllib.parse import quote

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response

from app.core.errors import AppError, FieldError

PROBLEM_JSON = "application/problem+json"
log = logging.getLogger("app.errors")

# Paths that always answer in JSON, whatever the Accept header says.
_MACHINE_PREFIXES = ("/api/", "/healthz", "/metrics")


def wants_html(request: Request) -> bool:
    """True when the caller is a browser page (not /api, not a probe, not an explicit JSON client)."""
    path = request.url.path
    if path.startswith(_MACHINE_PREFIXES):
        return False
    accept = request.headers.get("accept", "")
    return not ("application/json" in accept and "text/html" not in accept)


def is_htmx(request: Request) -> bool:
    """True for an htmx-issued request that expects a fragment rather than a page.

    A history restore (Back after an htmx navigation, with historyCacheSize 0) replaces the whole body: it gets the page.
    """
    headers = request.headers
    return (headers.get("hx-request") == "true" and headers.get("hx-boosted") != "true"
            and headers.get("hx-history-restore-request") != "true")


def problem_response(request: Request, error: AppError, headers: dict[str, str] | None = None) -> Response:
    """Render `error` for this caller: problem+json, a full error page, or an htmx fragment."""
    headers = dict(headers or {})
    if not wants_html(request):
        return JSONResponse(
            error.problem(instance=request.url.path), status_code=error.status, media_type=PROBLEM_JSON, headers=headers
        )
    if error.status == 401:
        return _login_redirect(request)
    return _html_error(request, error, headers)


def _login_redirect(request: Request) -> Response:
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    location = f"/login?next={quote(target, safe='/')}"
    if is_htmx(request):
        # htmx follows HX-Redirect with a full navigation; a 3xx would be followed inside the XHR.
        return Response(status_code=200, headers={"HX-Redirect": location})
    return RedirectResponse(location, status_code=303)


def _html_error(request: Request, error: AppError, headers: dict[str, str]) -> Response:
    try:
        from app.web.templating import render_error

        return render_error(request, error, headers=headers)
    except Exception:  # the error page itself must never fail; fall back to bare HTML
        log.exception("error page rendering failed")
        body = (
            f"<!doctype html><title>{html.escape(error.title)}</title>"
            f"<main><h1>{html.escape(error.title)}</h1><p>{html.escape(error.detail)}</p>"
            '<p><a href="/">Back to the overview</a></p></main>'
        )
        return HTMLResponse(body, status_code=error.status, headers=headers)


def _validation_errors(exc: RequestValidationError) -> list[FieldError]:
    out = []
    for err in exc.errors():
        loc = [str(part) for part in err.get("loc", ())]
        out.append(FieldError(path=".".join(loc) or "request", message=str(err.get("msg", "invalid value"))))
    return out


async def _on_app_error(request: Request, exc: AppError) -> Response:
    if exc.status >= 500:
        log.warning("%s %s -> %s: %s", request.method, request.url.path, exc.status, exc.detail)
    return problem_response(request, exc, headers=getattr(exc, "headers", None))


async def _on_validation_error(request: Request, exc: RequestValidationError) -> Response:
    errors = _validation_errors(exc)
    detail = "; ".join(f"{e.path}: {e.message}" for e in errors) or "The request is not valid"
    error = AppError(detail=detail, status=422, title="Unprocessable content", errors=errors)
    return problem_response(request, error)


async def _on_http_exception(request: Request, exc: StarletteHTTPException) -> Response:
    try:
        title = HTTPStatus(exc.status_code).phrase
    except ValueError:
        title = "Error"
    detail = exc.detail if isinstance(exc.detail, str) else title
    if exc.status_code == 404 and detail == "Not Found":
        detail = f"Nothing is at {request.url.path}"
    error = AppError(detail=detail, status=exc.status_code, title=title)
    return problem_response(request, error, headers=dict(exc.headers or {}))


async def _on_unexpected(request: Request, exc: Exception) -> Response:
    # Logged with the traceback for operators; the caller learns nothing about internals.
    log.exception("unhandled error on %s %s", request.method, request.url.path)
    error = AppError(
        detail="Something went wrong on our side. The error has been logged.",
        status=500,
        title="Internal server error",
    )
    return problem_response(request, error)


def install(app: FastAPI) -> None:
    """Register the problem handlers on `app` (called once from create_app)."""
    handlers: dict[Any, Any] = {
        AppError: _on_app_error,
        RequestValidationError: _on_validation_error,
        StarletteHTTPException: _on_http_exception,
        Exception: _on_unexpected,
    }
    for exc_class, handler in handlers.items():
        app.add_exception_handler(exc_class, handler)
