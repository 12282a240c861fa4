"""JSON responses: `json_response` for any JSON-able value, `conditional` for a strong ETag and 304."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from fastapi import Request
from fastapi.encoders import jsonable_encoder
from starlette.responses import JSONResponse, Response


def json_response(payload: Any, *, status_code: int = 200, headers: dict[str, str] | None = None) -> JSONResponse:
    """A JSONResponse from any JSON-able value (pydantic models included)."""
    return JSONResponse(jsonable_encoder(payload), status_code=status_code, headers=headers)


# ---- ETag / If-None-Match ---------------------------------------------------------------------


def etag_for(body: bytes) -> str:
    """A strong ETag for a response body."""
    return '"' + hashlib.sha256(body).hexdigest()[:32] + '"'


def _matches(if_none_match: str, etag: str) -> bool:
    if if_none_match.strip() == "*":
        return True
    candidates = [c.strip().removeprefix("W/") for c in if_none_match.split(",")]
    return etag in candidates


def conditional(
    request: Request,
    body: bytes | str | Any,
    *,
    media_type: str = "application/json",
    status_code: int = 200,
    headers: dict[str, str] | None = None,
) -> Response:
    """A response with an ETag, or 304 Not Modified when If-None-Match already names it.

    `body` is bytes/str as sent, or any JSON-able value (encoded here, so the ETag covers exact bytes).
    """
    if isinstance(body, str):
        data = body.encode()
    elif isinstance(body, bytes):
        data = body
    else:
        data = json.dumps(jsonable_encoder(body), separators=(",", ":"), ensure_ascii=False).encode()
    etag = etag_for(data)
    out_headers = {"ETag": etag, "Cache-Control": "private, no-cache", **(headers or {})}
    if_none_match = request.headers.get("if-none-match")
    if if_none_match and request.method in ("GET", "HEAD") and _matches(if_none_match, etag):
        return Response(status_code=304, headers=out_headers)
    return Response(data, status_code=status_code, media_type=media_type, headers=out_headers)


def download(
    request: Request, content: bytes, *, media_type: str, filename: str, headers: dict[str, str]
) -> Response:
    """A file download carrying `headers` (its ETag among them); 304 when If-None-Match names that ETag."""
    out_headers = {"Content-Disposition": f'attachment; filename="{filename}"', "Cache-Control": "private, no-cache",
                   **headers}
    if_none_match = request.headers.get("if-none-match")
    if if_none_match and request.method in ("GET", "HEAD") and _matches(if_none_match, headers["ETag"]):
        return Response(status_code=304, headers=out_headers)
    return Response(content, media_type=media_type, headers=out_headers)
