"""One place that turns every error into RFC 9457 problem+json (API) or a readable page/fragment (HTML).

`install(app)` registers the handlers and `problem_openapi(app)` documents them (the `Problem`
schema on every /api error response); `create_app` calls both. Business code raises `AppError`
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
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response

from app.core.errors import AppError, FieldError
from app.http.htmx import is_htmx, wants_html
from app.http.templating import render_error

PROBLEM_JSON = "application/problem+json"
log = logging.getLogger("app.errors")


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


# ---- problems in the OpenAPI document ---------------------------------------------------------


class ProblemError(BaseModel):
    path: str
    message: str
    severity: str = "error"


class Problem(BaseModel):
    """RFC 9457 problem details, as every /api error is answered."""

    type: str = "about:blank"
    title: str
    status: int
    detail: str
    instance: str | None = None
    errors: list[ProblemError] | None = None


_PROBLEM_REF = {"$ref": "#/components/schemas/Problem"}
_STANDARD = {
    "401": "Missing, unknown, expired or revoked credentials",
    "403": "The caller's role, token scope or CSRF token does not allow this",
    "404": "Not found, or not visible to the caller",
    "422": "A parameter or the body is not valid; `errors` names each field path",
    "500": "Unexpected server error (logged; no internals disclosed)",
}


def problem_openapi(app: FastAPI) -> None:
    """Make `app.openapi()` document every /api error as application/problem+json with the Problem schema."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema:
            return app.openapi_schema
        schema = get_openapi(title=app.title, version=app.version, routes=app.routes, description=app.description,
                             webhooks=app.webhooks.routes)
        for operations in schema.get("webhooks", {}).values():  # requests the portal sends: it reads no 422 back
            for operation in operations.values():
                operation.get("responses", {}).pop("422", None)
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        components["Problem"] = Problem.model_json_schema(ref_template="#/components/schemas/{model}")
        components.update(components["Problem"].pop("$defs", {}))
        for name in ("HTTPValidationError", "ValidationError"):
            components.pop(name, None)
        schema["components"]["securitySchemes"] = {
            "bearerAuth": {"type": "http", "scheme": "bearer", "description": "An API token (cbt_...)"}
        }
        for path, operations in schema.get("paths", {}).items():
            if not path.startswith("/api/"):
                continue
            for method, operation in operations.items():
                operation.setdefault("security", [{"bearerAuth": []}])
                responses = operation.setdefault("responses", {})
                wanted = dict(_STANDARD)
                if method in ("post", "put", "patch", "delete"):
                    wanted["409"] = "Conflicts with the current state (or a request with the same Idempotency-Key still in progress)"
                    wanted["400"] = "The body could not be parsed (not valid JSON or form data)"
                    wanted["413"] = "The body is larger than the configured limit (CHARGEBACK_MAX_BODY_BYTES)"
                for status, description in wanted.items():
                    responses.setdefault(status, {"description": description})
                for status, response in responses.items():
                    if status[:1] in ("4", "5"):
                        response["content"] = {"application/problem+json": {"schema": _PROBLEM_REF}}
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]
