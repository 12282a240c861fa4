"""Jinja2 rendering for pages: the whole page normally, only the `content` block for htmx requests.

Every template gets `current_path`; the layers above add their own variables with
`add_context_processor` (auth: `csrf_token`; web: `principal` and `nav`), so this kit knows no roles.
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import ROUND_HALF_UP, Decimal
from typing import Any
from urllib.parse import urlencode

from jinja2_fragments.fastapi import Jinja2Blocks
from starlette.requests import Request
from starlette.responses import Response

from app.core.errors import AppError
from app.core.resources import resource_path
from app.core.settings import get_settings
from app.core.timeutil import aware
from app.http import numbers
from app.http.htmx import is_htmx
from app.http.numbers import exact_number


def _context(request: Request) -> dict[str, Any]:
    return {"current_path": request.url.path}


def _pct(value: Any, digits: int = 1) -> str:
    """A fraction as a percentage, rounded once, here."""
    return "–" if value is None else f"{Decimal(str(value)) * 100:,.{digits}f}%"


def _minutes(value: Any) -> str:
    """Breach (or any) minutes: whole minutes."""
    return "–" if value is None else f"{Decimal(str(value)).quantize(Decimal(1), ROUND_HALF_UP):,f}"


def _when(value: Any) -> str:
    """An instant on pages: minutes in the billing time zone, named ("2026-12-03 08:18 CET"); naive values are UTC."""
    if value is None:
        return "–"
    return aware(value).astimezone(get_settings().tz).strftime("%Y-%m-%d %H:%M %Z")


def merge_query(query: dict, **changes) -> str:
    """A query string: `query` with `changes` applied and empty values dropped (a Jinja filter)."""
    merged = {**query, **changes}
    return urlencode({k: v for k, v in merged.items() if v not in (None, "")})


templates = Jinja2Blocks(directory=str(resource_path("templates")), context_processors=[_context])
templates.env.filters["hours"] = numbers.hours  # GPU-hours: 1 decimal on pages
templates.env.filters["merge_query"] = merge_query
templates.env.filters["pct"] = _pct
templates.env.filters["money"] = numbers.money
templates.env.filters["minutes"] = _minutes
templates.env.filters["when"] = _when
templates.env.filters["exact"] = lambda value, trim=True: exact_number(value, trim=trim)


def add_context_processor(processor: Callable[[Request], dict[str, Any]]) -> None:
    """Give every template the variables `processor(request)` returns (registering it twice is harmless)."""
    if processor not in templates.context_processors:
        templates.context_processors.append(processor)


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
