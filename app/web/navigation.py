"""The site navigation every page shows: the sections the signed-in principal's roles may open, and how many
change requests wait for the principal's review (a badge on Policy)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from starlette.requests import Request

from app.core.deps import SessionDep
from app.http.htmx import is_htmx
from app.review.changes import awaiting_review_count

# (label, href, roles that see it; None = everyone signed in)
NAV: list[tuple[str, str, frozenset[str] | None]] = [
    ("Overview", "/", None),
    ("Tenants", "/tenants", None),
    ("Allocation", "/allocation", None),
    ("Fleet", "/fleet", frozenset({"admin", "operator", "reviewer", "finance", "viewer"})),
    ("SLA", "/sla", None),
    ("Billing", "/billing", None),
    ("Budgets", "/budgets", frozenset({"admin", "finance"})),
    ("Policy", "/policy", frozenset({"admin", "operator", "reviewer", "finance", "viewer"})),
    ("Admin", "/admin/users", frozenset({"admin"})),
]
REVIEWERS = frozenset({"admin", "reviewer"})


def _is_current(href: str, path: str) -> bool:
    if href == "/":
        return path == "/"
    section = "/admin" if href.startswith("/admin/") else href
    return path == section or path.startswith(section + "/")


def page_session(request: Request, session: SessionDep) -> Iterator[None]:
    """Router dependency of the pages: lends the request's session to `navigation_context` while the page renders
    (pages render inside the handler; an error page rendered after the handler gets no badge)."""
    request.state.nav_session = session
    try:
        yield
    finally:
        request.state.nav_session = None


def navigation_context(request: Request) -> dict[str, Any]:
    """Template variables `principal` (None before sign-in), `nav` (label, href, current) and `nav_badges`
    (href -> count, with `review_waiting`: the change requests awaiting this reviewer)."""
    principal = getattr(request.state, "principal", None)
    nav, badges, waiting = [], {}, 0
    if principal is not None:
        nav = [
            (label, href, _is_current(href, request.url.path))
            for label, href, roles in NAV
            if roles is None or principal.roles & roles
        ]
        session = getattr(request.state, "nav_session", None)
        if session is not None and principal.roles & REVIEWERS and not is_htmx(request):  # fragments show no nav
            waiting = awaiting_review_count(session=session, reviewer=principal.name)
            if waiting:
                badges["/policy"] = waiting
    return {"principal": principal, "nav": nav, "nav_badges": badges, "review_waiting": waiting}
