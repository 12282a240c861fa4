"""Input limits enforced before any work: a request body cap (413) and no NUL character in any text input (422).

`InputLimitsMiddleware` is a pure ASGI middleware placed outside routing, so it runs before
authentication, CSRF and body parsing. It reads at most `max_body_bytes` (counted as the bytes
arrive, so a chunked body without Content-Length is cut off too), then replays the buffered body
to the app. NUL is refused here once for the path, the query and JSON/form bodies, because
PostgreSQL cannot store it in text and every route would otherwise fail differently.
"""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import parse_qsl

from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.core.errors import AppError, FieldError, Invalid
from app.http.problems import problem_response

# A JSON string escape for NUL preceded by an even number of backslashes (an odd number is literal text).
_JSON_NUL = re.compile(rb"(?<!\\)(?:\\\\)*\\u0000", re.IGNORECASE)


class BodyTooLarge(AppError):
    def __init__(self, limit: int):
        super().__init__(detail=f"The request body is larger than {limit} bytes", status=413, title="Content too large",
                         errors=[FieldError("body", f"at most {limit} bytes")])


def _nul_in_tree(value: Any, path: str) -> str | None:
    """The path of the first string (key or value) holding a NUL in decoded JSON, or None."""
    if isinstance(value, str):
        return path if "\x00" in value else None
    if isinstance(value, dict):
        for key, item in value.items():
            where = f"{path}.{key.replace(chr(0), '')}"
            if "\x00" in key:
                return where
            found = _nul_in_tree(item, where)
            if found:
                return found
    if isinstance(value, list):
        for i, item in enumerate(value):
            found = _nul_in_tree(item, f"{path}[{i}]")
            if found:
                return found
    return None


def _nul_in_pairs(pairs: list[tuple[str, str]], prefix: str) -> str | None:
    for key, value in pairs:
        if "\x00" in key or "\x00" in value:
            return f"{prefix}.{key.replace(chr(0), '')}"
    return None


def nul_field(*, path: str, query: bytes, content_type: str, body: bytes) -> str | None:
    """Where a NUL character appears in a request's text input (a field path), or None."""
    if "\x00" in path:
        return "path"
    if b"%00" in query or b"\x00" in query:
        found = _nul_in_pairs(parse_qsl(query.decode("latin-1"), keep_blank_values=True), "query")
        if found:
            return found
    if not body:
        return None
    media = content_type.split(";", 1)[0].strip().lower()
    if media == "application/x-www-form-urlencoded":
        if b"%00" in body or b"\x00" in body:
            return _nul_in_pairs(parse_qsl(body.decode("latin-1"), keep_blank_values=True), "body")
        return None
    if media == "application/json" or media.endswith("+json"):
        if not _JSON_NUL.search(body):
            return None  # a raw NUL byte is not valid JSON: the parser refuses it with 422
        try:
            return _nul_in_tree(json.loads(body), "body")
        except (ValueError, RecursionError):
            return None  # not JSON (or nested too deeply): the route's own parsing answers 400
    return "body" if b"\x00" in body else None  # multipart and plain text: any NUL byte


class InputLimitsMiddleware:
    """413 for a body over the limit and 422 for NUL in text input, answered before the app sees the request."""

    def __init__(self, app: ASGIApp, max_body_bytes: int | None = None) -> None:
        self.app = app
        self._max = max_body_bytes

    @property
    def max_body_bytes(self) -> int:
        if self._max is None:
            from app.core.settings import get_settings

            self._max = get_settings().max_body_bytes
        return self._max

    async def _refuse(self, scope: Scope, receive: Receive, send: Send, error: AppError) -> None:
        response = problem_response(Request(scope), error, headers={"Connection": "close"} if error.status == 413 else None)
        await response(scope, receive, send)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.max_body_bytes
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        declared = headers.get("content-length", "")
        # isascii first: "²".isdigit() is True and int("²") raises (a 500 before any route).
        if declared.isascii() and declared.isdigit() and int(declared) > limit:
            await self._refuse(scope, receive, send, BodyTooLarge(limit))
            return
        chunks: list[bytes] = []
        size = 0
        more = True
        while more:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                await self._refuse(scope, receive, send, BodyTooLarge(limit))
                return
            chunks.append(chunk)
            more = message.get("more_body", False)
        body = b"".join(chunks)
        where = nul_field(path=scope.get("path", ""), query=scope.get("query_string", b""),
                          content_type=headers.get("content-type", ""), body=body)
        if where:
            await self._refuse(scope, receive, send,
                               Invalid("Text input must not contain a NUL character", [FieldError(where, "contains a NUL character")]))
            return
        await self.app(scope, _replay(body, receive), send)


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()  # later calls wait for the disconnect, as the server would answer

    return replay
