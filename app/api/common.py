"""Shared pieces of the JSON API: the Problem schema, cursor pagination, ETags, Idempotency-Key.

- `Problem` + `problem_openapi(app)`: every /api error response documented as application/problem+json.
- `LimitQuery`, `CursorQuery`, `paginate(...)`: keyset pagination with an opaque cursor.
- `etag_for`, `conditional(...)`: strong ETags and 304 for If-None-Match.
- `IdempotencyDep`: replay a stored answer when a POST is retried with the same Idempotency-Key.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Annotated, Any, Generic, TypeVar

from fastapi import Depends, FastAPI, Path, Query, Request
from fastapi.encoders import jsonable_encoder
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel
from sqlalchemy import bindparam, tuple_
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session
from starlette.responses import JSONResponse, Response

from app.auth.deps import CurrentUser
from app.core.deps import SessionDep
from app.core.errors import AppError, Conflict, FieldError, Invalid
from app.core.timeutil import aware, parse_iso, utcnow

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
        schema = get_openapi(title=app.title, version=app.version, routes=app.routes, description=app.description)
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


# ---- ids in paths -------------------------------------------------------------------------------

MAX_ID = 2_147_483_647  # ids are 32-bit integer columns: a larger one is a 422, not a database error
IdPath = Annotated[int, Path(ge=1, le=MAX_ID)]


# ---- cursor pagination ------------------------------------------------------------------------

MAX_LIMIT = 500
T = TypeVar("T")
LimitQuery = Annotated[int, Query(ge=1, le=MAX_LIMIT, description="Items per page (1-500)")]
CursorQuery = Annotated[str | None, Query(description="Opaque cursor from the previous page's `next_cursor`")]


class Page(BaseModel, Generic[T]):
    """One page of a list; pass `next_cursor` back as `cursor` for the next page (null: no more)."""

    items: list[T]
    next_cursor: str | None = None


def _plain(value: Any) -> Any:
    if isinstance(value, datetime):
        return aware(value).isoformat()
    if isinstance(value, Decimal):
        return str(value)
    return value


def encode_cursor(values: tuple | list) -> str:
    """An opaque cursor for the key of the last item of a page."""
    raw = json.dumps([_plain(v) for v in values], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str, types: list[type], *, path: str = "query.cursor") -> list[Any]:
    """Decode a cursor made by `encode_cursor`, converting each value back to its column's Python type."""
    bad = Invalid("The cursor is not valid", [FieldError(path, "not a cursor from a previous page of this list")])
    try:
        values = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    except (binascii.Error, ValueError, UnicodeDecodeError):
        raise bad from None
    if not isinstance(values, list) or len(values) != len(types):
        raise bad
    out = []
    try:
        for value, kind in zip(values, types, strict=True):
            if kind is datetime:
                if not isinstance(value, str):
                    raise TypeError(value)
                out.append(parse_iso(value))
            elif kind is Decimal:
                if not isinstance(value, str) or not Decimal(value).is_finite():
                    raise ValueError(value)
                out.append(Decimal(value))
            elif kind in (int, str, bool):
                if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
                    raise ValueError(value)
                out.append(value)
            elif isinstance(value, (list, dict)):
                raise TypeError(value)
            else:
                out.append(value)
            # The database must be able to compare what comes back: 64-bit integers, text without NUL.
            if (isinstance(value, int) and not -(2**63) <= value < 2**63) or (isinstance(value, str) and "\x00" in value):
                raise ValueError(value)
    except (ValueError, TypeError, ArithmeticError):
        raise bad from None
    return out


def paginate(
    session: Session, query, *, keys: list, limit: int, cursor: str | None, descending: bool = False
) -> tuple[list, str | None]:
    """Run `query` ordered by `keys` (columns, unique together) from after `cursor`; returns (rows, next_cursor).

    Keyset pagination: stable under inserts and as fast on page 1,000 as on page 1. `query` must be
    a select whose rows expose the key columns by name (ORM entities or labelled columns);
    `descending` pages newest-first (every key descending).
    """
    types = [_python_type(column) for column in keys]
    if cursor:
        values = decode_cursor(cursor, types)
        # Typed bind parameters so that datetimes compare as the column stores them (SQLite: text).
        bound = [bindparam(None, v, type_=column.type) for v, column in zip(values, keys, strict=True)]
        after = tuple_(*keys) < tuple_(*bound) if descending else tuple_(*keys) > tuple_(*bound)
        query = query.where(after)
    order = [column.desc() for column in keys] if descending else keys
    rows = list(session.exec(query.order_by(*order).limit(limit + 1)))
    if len(rows) <= limit:
        return rows, None
    rows = rows[:limit]
    last = rows[-1]
    return rows, encode_cursor([_key_value(last, column) for column in keys])


def _python_type(column) -> type:
    kind = column.type
    python_type = kind.python_type
    if python_type is object:  # a TypeDecorator (e.g. SQLModel's UTCDateTime): ask what it decorates
        impl = getattr(kind, "impl_instance", None) or getattr(kind, "impl", None)
        python_type = getattr(impl, "python_type", object)
    return python_type


def _key_value(row: Any, column) -> Any:
    name = column.key
    if hasattr(row, name):
        return getattr(row, name)
    mapping = getattr(row, "_mapping", None)
    if mapping is not None:
        for value_key, value in mapping.items():
            if getattr(value_key, "key", value_key) == name:
                return value
            if hasattr(value, name):
                return getattr(value, name)
    raise KeyError(name)


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


# ---- Idempotency-Key ----------------------------------------------------------------------------

IDEMPOTENCY_TTL = timedelta(hours=24)
_KEY_MAX = 200


@dataclass
class Idempotency:
    """The Idempotency-Key of a POST (None when absent). Use `replay()` first, then `remember(response)`."""

    session: Session
    actor: str
    key: str | None
    method: str
    path: str
    fingerprint: str

    def replay(self) -> Response | None:
        """The stored answer for this key, or None when the request is new (a different body -> 422)."""
        from app.auth.models import IdempotencyRecord

        if self.key is None:
            return None
        record = self.session.get(IdempotencyRecord, (self.actor, self.key))
        if record is None:
            return None
        if aware(record.created_at) < utcnow() - IDEMPOTENCY_TTL:
            self.session.delete(record)
            self.session.flush()
            return None
        if record.fingerprint != self.fingerprint:
            raise Invalid(
                "This Idempotency-Key was used for a different request",
                [FieldError("header.Idempotency-Key", "reused with another method, path or body; use a new key")],
            )
        return Response(
            record.body.encode(),
            status_code=record.status_code,
            media_type=record.content_type or None,
            headers={"Idempotent-Replayed": "true"},
        )

    def remember(self, response: Response, *, stored_payload: Any = None) -> Response:
        """Store `response` under the key (in the request's transaction) and return it.

        `stored_payload` replaces the body kept for replays when the response holds a secret.
        """
        from app.auth.models import IdempotencyRecord

        if self.key is None or response.status_code >= 500:
            return response
        self.session.add(
            IdempotencyRecord(
                actor=self.actor, key=self.key, method=self.method, path=self.path, fingerprint=self.fingerprint,
                status_code=response.status_code, content_type=response.media_type or "",
                body=(
                    bytes(response.body).decode()
                    if stored_payload is None
                    else json.dumps(jsonable_encoder(stored_payload), separators=(",", ":"))
                ),
                created_at=utcnow(),
            )
        )
        try:
            self.session.flush()
        except IntegrityError:
            # A concurrent request with the same key got there first; this one's work is rolled back.
            raise Conflict("A request with this Idempotency-Key is already being processed; retry later") from None
        return response


async def _idempotency(request: Request, principal: CurrentUser, session: SessionDep) -> Idempotency:
    key = request.headers.get("idempotency-key")
    if key is not None and not (0 < len(key.strip()) <= _KEY_MAX):
        raise Invalid("Bad Idempotency-Key", [FieldError("header.Idempotency-Key", f"1-{_KEY_MAX} characters")])
    body = await request.body()  # cached by Starlette: the route still gets its body
    fingerprint = hashlib.sha256(b"\n".join([request.method.encode(), request.url.path.encode(), body])).hexdigest()
    return Idempotency(
        session=session, actor=principal.name, key=key.strip() if key else None,
        method=request.method, path=request.url.path, fingerprint=fingerprint,
    )


IdempotencyDep = Annotated[Idempotency, Depends(_idempotency)]


def json_response(payload: Any, *, status_code: int = 200, headers: dict[str, str] | None = None) -> JSONResponse:
    """A JSONResponse from any JSON-able value (pydantic models included)."""
    return JSONResponse(jsonable_encoder(payload), status_code=status_code, headers=headers)


__all__ = [
    "MAX_ID", "AppError", "CursorQuery", "IdPath", "IdempotencyDep", "LimitQuery", "Page", "Problem", "conditional", "decode_cursor",
    "encode_cursor", "etag_for", "json_response", "paginate", "problem_openapi",
]
