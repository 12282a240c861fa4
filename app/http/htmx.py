"""What kind of answer a request wants: a page, an htmx fragment, or JSON."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

# Paths that always answer in JSON, whatever the Accept header says.
_MACHINE_PREFIXES = ("/api/", "/healthz", "/readyz", "/metrics")


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


def htmx_target(request: Request) -> str:
    """The id of the element an htmx request will swap ("" for a page request)."""
    return request.headers.get("hx-target", "")


def redirect_after_post(request: Request, url: str) -> Response:
    """Post/redirect/get: a 303 for a plain form, HX-Redirect for htmx (which would follow a 3xx inside the XHR)."""
    if is_htmx(request):
        return Response(status_code=204, headers={"HX-Redirect": url})
    return RedirectResponse(url, status_code=303)
