"""Jinja2 rendering for pages: the whole page normally, only the `content` block for htmx requests.

Every template gets `principal` (None before login), `csrf_token`, `nav` and `current_path`.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from jinja2_fragments.fastapi import Jinja2Blocks
from starlette.requests import Request
from starlette.responses import Response

from app.auth.sessions import csrf_token
from app.core.errors import AppError
from app.core.problems import is_htmx
from app.core.resources import resource_path

# (label, href, roles that see it; None = everyone signed in)
NAV: list[tuple[str, str, frozenset[str] | None]] = [
    ("Overview", "/", None),
    ("Tenants", "/tenants", None),
    ("Fleet", "/fleet", frozenset({"admin", "operator", "reviewer", "finance", "viewer"})),
    ("SLA", "/sla", None),
    ("Billing", "/billing", None),
    ("Policy", "/policy", frozenset({"admin", "operator", "reviewer", "finance", "viewer"})),
    ("Admin", "/admin/users", frozenset({"admin"})),
]


def _is_current(href: str, path: str) -> bool:
    if href == "/":
        return path == "/"
    section = "/admin" if href.startswith("/admin/") else href
    return path == section or path.startswith(section + "/")


def _context(request: Request) -> dict[str, Any]:
    principal = getattr(request.state, "principal", None)
    nav = []
    if principal is not None:
        nav = [
            (label, href, _is_current(href, request.url.path))
            for label, href, roles in NAV
            if roles is None or principal.roles & roles
        ]
    return {"principal": principal, "csrf_token": csrf_token(request), "nav": nav, "current_path": request.url.path}


def _hours(value: Any, digits: int = 1) -> str:
    """Format a number of hours with thousands separators (Decimal stays Decimal until formatting)."""
    if value is None:
        return "–"
    return f"{Decimal(value):,.{digits}f}"


templates = Jinja2Blocks(directory=str(resource_path("templates")), context_processors=[_context])
templates.env.filters["hours"] = _hours


def render(
    request: Request,
    name: str,
    context: dict[str, Any] | None = None,
    *,
    status_code: int = 200,
    block: str | None = "content",
    headers: dict[str, str] | None = None,
) -> Response:
    """Render a page template; for an htmx request only its `block` (default `content`)."""
    kwargs: dict[str, Any] = {}
    if block and is_htmx(request):
        kwargs["block_name"] = block
    return templates.TemplateResponse(
        request, name, dict(context or {}), status_code=status_code, headers=headers, **kwargs
    )


def render_error(request: Request, error: AppError, *, headers: dict[str, str] | None = None) -> Response:
    """A readable error page, or for htmx a fragment the page swaps into its message area."""
    context = {"error": error, "title": error.title}
    if is_htmx(request):
        # Error fragments go to the page's live region rather than replacing the htmx target.
        headers = {**(headers or {}), "HX-Retarget": "#messages", "HX-Reswap": "innerHTML"}
        return templates.TemplateResponse(
            request, "error.html", context, status_code=error.status, headers=headers, block_name="message"
        )
    return templates.TemplateResponse(request, "error.html", context, status_code=error.status, headers=headers)
