"""The site navigation every page shows: the sections the signed-in principal's roles may open."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request

# (label, href, roles that see it; None = everyone signed in)
NAV: list[tuple[str, str, frozenset[str] | None]] = [
    ("Overview", "/", None),
    ("Tenants", "/tenants", None),
    ("Allocation", "/allocation", None),
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


def navigation_context(request: Request) -> dict[str, Any]:
    """Template variables `principal` (None before sign-in) and `nav` (label, href, current)."""
    principal = getattr(request.state, "principal", None)
    nav = []
    if principal is not None:
        nav = [
            (label, href, _is_current(href, request.url.path))
            for label, href, roles in NAV
            if roles is None or principal.roles & roles
        ]
    return {"principal": principal, "nav": nav}
