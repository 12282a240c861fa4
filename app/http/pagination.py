"""Keyset pagination with an opaque cursor, and the bounded id and page-size parameters of list routes.

Every collection in the API is one shape: a `Page[T]` of `items` and `next_cursor`, asked for with
`limit` (`LimitQuery`, default 100) and `cursor` (`CursorQuery`). `paginate(...)` pages a SQL query,
`page_of(...)` a list the domain has already read and ordered; both return (items, next_cursor).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Sequence
from datetime import datetime
from decimal import Decimal
from typing import Annotated, Any, Generic, TypeVar

from fastapi import Path, Query
from pydantic import BaseModel
from sqlalchemy import bindparam, tuple_
from sqlmodel import Session

from app.core.errors import FieldError, Invalid
from app.core.timeutil import aware, parse_iso

# ---- ids in paths -------------------------------------------------------------------------------

MAX_ID = 2_147_483_647  # ids are 32-bit integer columns: a larger one is a 422, not a database error
IdPath = Annotated[int, Path(ge=1, le=MAX_ID)]


# ---- cursor pagination ------------------------------------------------------------------------

MAX_LIMIT = 500
T = TypeVar("T")
DEFAULT_LIMIT = 100
LimitQuery = Annotated[int, Query(ge=1, le=MAX_LIMIT, description="Items per page (1-500, default 100)")]
CursorQuery = Annotated[str | None, Query(description="Opaque cursor from the previous page's `next_cursor`")]


class Page(BaseModel, Generic[T]):
    """One page of a list; pass `next_cursor` back as `cursor` for the next page (null: no more)."""

    items: list[T]
    next_cursor: str | None = None


def _cursor_value(value: Any) -> Any:
    """A key value as JSON can hold it: datetimes as aware ISO 8601, Decimals as strings."""
    if isinstance(value, datetime):
        return aware(value).isoformat()
    if isinstance(value, Decimal):
        return str(value)
    return value


def encode_cursor(values: tuple | list) -> str:
    """An opaque cursor for the key of the last item of a page."""
    raw = json.dumps([_cursor_value(v) for v in values], separators=(",", ":")).encode()
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


def page_of(
    items: Sequence[T], *, key: Callable[[T], tuple], types: list[type], limit: int, cursor: str | None,
    descending: bool = False,
) -> tuple[list[T], str | None]:
    """One page of `items`, already ordered by `key` (ascending, or descending with `descending`); (page, next_cursor).

    The same keyset contract as `paginate`: the cursor holds the last item's key, so a page is stable
    when items are added or removed before it. For lists the domain reads whole (tenants of the
    policy, periods, versions): they are small, and their order is not a column.
    """
    if cursor:
        after = tuple(decode_cursor(cursor, types))
        items = [item for item in items if (key(item) < after if descending else key(item) > after)]
    if len(items) <= limit:
        return list(items), None
    page = list(items[:limit])
    return page, encode_cursor(list(key(page[-1])))


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
