"""Hostile input for every form field, query and path parameter, JSON field, header and cookie the portal reads.

`cases(app, ...)` enumerates the app's routes (FastAPI's own dependency tree: each declared Form, Query, Path
and Body field) plus the inputs routes read by hand (the OIDC callback's query, the headers and cookies of
app.auth, app.http), and yields one request per (input, hostile value), every other input benign: a signed-in
browser's cookies and CSRF token, so each request gets past authentication to the parsing it targets.
`asgi_status` sends a case straight into the ASGI app (no client-side validation: a proxy may pass what
httpx would refuse); benchmarks/reliability.py sends the same cases over a raw socket to uvicorn.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import date, datetime
from decimal import Decimal
from functools import partial
from typing import Any, get_args, get_origin
from urllib.parse import quote, quote_from_bytes, unquote_to_bytes

from fastapi import FastAPI
from fastapi.dependencies.utils import _get_flat_body_params, get_flat_params
from fastapi.routing import APIRoute, iter_route_contexts
from pydantic import BaseModel

# Each value as the bytes put on the wire (percent-encoded in paths, queries and forms; raw in headers).
VALUES: dict[str, bytes] = {
    "non-ascii": "é".encode(),
    "latin-1 byte": b"\xe9",  # invalid UTF-8; a header decodes it (latin-1) to "é"
    "superscript two": b"\xb2",  # "²".isdigit() is True, int("²") raises
    "nul": b"\x00",
    "crlf": b"\r\nX-Injected: 1",
    "line separator": "\u2028\u0085".encode(),
    "oversized": b"A" * 1_000_000,
}
# Inputs read from the request by hand rather than declared as parameters.
HEADERS = ("authorization", "x-csrf-token", "idempotency-key", "hx-request", "hx-target", "hx-boosted",
           "hx-history-restore-request", "accept", "if-none-match", "content-type", "content-length")
COOKIES = ("cb_session", "cb_csrf", "cb_oidc")
EXTRA_QUERY = {"/auth/oidc/callback": ("state", "code", "error", "error_description")}
# Benign path values by parameter name (else by type: ints 1, strings "x").
PATH_VALUES = {"period": "2026-10", "month": "2026-10", "tenant": "vision", "pool": "mixed-a100", "cluster": "default",
               "department": "research", "service": "search-chat", "version": "1", "format": "csv"}


@dataclass(frozen=True)
class Case:
    surface: str  # form, query, path, json, header, cookie
    method: str
    route: str
    input: str
    value: str
    raw_path: bytes
    query: bytes
    headers: tuple[tuple[bytes, bytes], ...]
    body: bytes = b""

    def describe(self) -> str:
        return f"{self.method} {self.route} {self.surface} {self.input!r} = {self.value}"


@dataclass
class Browser:
    """The benign credentials every case carries: a session cookie, the CSRF nonce cookie and its token."""

    session_cookie: str
    csrf_nonce: str
    csrf_token: str
    host: str = "portal.test"
    extra: dict[str, str] = field(default_factory=dict)


def _benign(annotation: Any) -> str:
    origin = get_origin(annotation)
    if origin is not None:
        args = [a for a in get_args(annotation) if a is not type(None)]
        return _benign(args[0]) if args else "x"
    if annotation is bool:
        return "true"
    if annotation in (int, float, Decimal):
        return "1"
    if annotation is date:
        return "2026-10-01"
    if annotation is datetime:
        return "2026-10-01T00:00:00Z"
    return "x"


def _is_list(annotation: Any) -> bool:
    if get_origin(annotation) in (list, tuple, set):
        return True
    return any(_is_list(a) for a in get_args(annotation))


def _path(template: str, values: dict[str, bytes]) -> bytes:
    out = template
    for name, value in values.items():
        out = out.replace("{" + name + "}", quote_from_bytes(value, safe=""))
    return out.encode("ascii")


def _pairs(pairs: list[tuple[str, bytes]]) -> bytes:
    return "&".join(f"{quote(k)}={quote_from_bytes(v, safe='')}" for k, v in pairs).encode("ascii")


def _model(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        found = _model(arg)
        if found:
            return found
    return None


def routes(app: FastAPI) -> list[tuple[str, str, APIRoute]]:
    """(method, path, route) for every endpoint, HEAD folded into GET."""
    out = []
    for context in iter_route_contexts(app.routes):
        route = context.original_route
        if isinstance(route, APIRoute):
            out.extend((m, context.path, route) for m in sorted(context.methods or ()) if m != "HEAD")
    return sorted(out, key=lambda r: (r[1], r[0]))


def _cookie_header(browser: Browser, override: tuple[str, bytes] | None = None) -> bytes:
    cookies = {"cb_session": browser.session_cookie.encode(), "cb_csrf": browser.csrf_nonce.encode(),
               **{k: v.encode() for k, v in browser.extra.items()}}
    if override:
        cookies[override[0]] = override[1]
    return b"; ".join(k.encode() + b"=" + v for k, v in cookies.items())


def _request(browser: Browser, method: str, template: str, takes_json: bool, json_body: dict,
             form_values: list[tuple[str, bytes]], path_values: dict[str, bytes], surface: str, name: str,
             value_name: str, *, path=None, query=(), form=None, json_value=None,
             headers: dict[bytes, bytes] | None = None, cookie=None) -> Case:
    """One request to `template`: the benign inputs, with `name` (of `surface`) replaced as given."""
    hdrs = {b"host": browser.host.encode(), b"cookie": _cookie_header(browser, cookie)}
    if method != "GET":
        hdrs[b"x-csrf-token"] = browser.csrf_token.encode()
    content = b""
    if takes_json and (json_value is not None or form is None):
        content = json_value if json_value is not None else json.dumps(json_body).encode()
        hdrs[b"content-type"] = b"application/json"
    elif method != "GET":
        content = _pairs(form if form is not None else form_values)
        hdrs[b"content-type"] = b"application/x-www-form-urlencoded"
    hdrs.update(headers or {})
    if method != "GET" and b"content-length" not in (headers or {}):
        hdrs[b"content-length"] = str(len(content)).encode()
    return Case(surface=surface, method=method, route=template, input=name, value=value_name,
                raw_path=_path(template, path or path_values), query=_pairs(list(query)),
                headers=tuple(hdrs.items()), body=content)


def cases(app: FastAPI, browser: Browser, *, header_routes: int = 8) -> Iterator[Case]:
    """Every (input, hostile value) of every route; headers and cookies on `header_routes` routes of each kind."""
    header_budget: dict[tuple[bool, bool], int] = {}
    for method, template, route in routes(app):
        params = get_flat_params(route.dependant)
        body = _get_flat_body_params(route.dependant)
        path_fields = {f.alias: f for f in params if type(f.field_info).__name__ == "Path"}
        query_fields = {f.alias: f for f in params if type(f.field_info).__name__ == "Query"}
        for extra in EXTRA_QUERY.get(template, ()):
            query_fields.setdefault(extra, None)
        form_fields = {f.alias: f for f in body if type(f.field_info).__name__ == "Form"}
        json_fields = [f for f in body if type(f.field_info).__name__ != "Form"]
        path_values = {n: PATH_VALUES.get(n, _benign(f.field_info.annotation)).encode() for n, f in path_fields.items()}
        form_values: list[tuple[str, bytes]] = []
        for name, f in form_fields.items():
            if f.field_info.is_required() or name == "csrf_token":
                form_values.append((name, (browser.csrf_token if name == "csrf_token" else
                                           _benign(f.field_info.annotation)).encode()))
        if method != "GET" and ("csrf_token", browser.csrf_token.encode()) not in form_values:
            form_values.append(("csrf_token", browser.csrf_token.encode()))
        json_body = {}
        model = _model(json_fields[0].field_info.annotation) if json_fields else None
        if model is not None:
            json_body = {name: _benign(info.annotation) for name, info in model.model_fields.items() if info.is_required()}

        request = partial(_request, browser, method, template, bool(json_fields), json_body, form_values,
                          path_values)

        for value_name, value in VALUES.items():
            for name in path_fields:
                yield request("path", name, value_name, path={**path_values, name: value})
            for name in query_fields:
                yield request("query", name, value_name, query=[(name, value)])
            for name in form_fields:
                others = [(k, v) for k, v in form_values if k != name]
                yield request("form", name, value_name, form=[*others, (name, value)])
            if model is not None:
                for name in model.model_fields:
                    text = value.decode("utf-8", "replace")
                    yield request("json", name, value_name, json_value=json.dumps({**json_body, name: text}).encode())
            if json_fields:
                yield request("json", "(whole body)", value_name, json_value=b'"' + value + b'"')
        kind = (template.startswith("/api/"), method != "GET")
        if header_budget.get(kind, 0) >= header_routes:
            continue
        header_budget[kind] = header_budget.get(kind, 0) + 1
        for value_name, value in VALUES.items():
            for name in HEADERS:
                yield request("header", name, value_name, headers={name.encode(): value})
            for name in COOKIES:
                yield request("cookie", name, value_name, cookie=(name, value))


async def asgi_status(app, case: Case) -> int:
    """The status the app answers `case` with (500 for an exception escaping the app)."""
    path = unquote_to_bytes(case.raw_path).decode("utf-8", "replace")
    scope = {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"}, "http_version": "1.1",
             "method": case.method, "scheme": "http", "path": path, "raw_path": case.raw_path,
             "query_string": case.query, "root_path": "", "headers": [(k, v) for k, v in case.headers],
             "client": ("127.0.0.1", 50000), "server": ("portal.test", 80), "state": {}}
    sent = False
    status: list[int] = []

    async def receive():
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": case.body, "more_body": False}

    async def send(message):
        if message["type"] == "http.response.start":
            status.append(message["status"])

    try:
        await app(scope, receive, send)
    except Exception:  # an exception escaping the app is what a server answers 500 for
        return 500
    return status[0] if status else 500
