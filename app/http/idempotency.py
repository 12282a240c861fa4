"""Idempotency-Key for POSTs: the stored answer and the store that replays it for a retry of the same request."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from fastapi.encoders import jsonable_encoder
from sqlalchemy import Column, Text
from sqlalchemy.exc import IntegrityError
from sqlmodel import Field, Session, SQLModel
from starlette.requests import Request
from starlette.responses import Response

import app.core.models  # noqa: F401  (naming convention)
from app.core.errors import Conflict, FieldError, Invalid
from app.core.timeutil import aware, utcnow


class IdempotencyRecord(SQLModel, table=True):
    """The stored answer to a POST sent with an Idempotency-Key, replayed for a retry of the same request."""

    __tablename__ = "idempotency_record"

    actor: str = Field(primary_key=True)
    key: str = Field(primary_key=True)
    method: str
    path: str
    fingerprint: str  # SHA-256 of method, path and body: the same key with another body is a conflict
    status_code: int
    content_type: str = ""
    body: str = Field(default="", sa_column=Column(Text, nullable=False))
    created_at: datetime = Field(index=True)


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


async def idempotency_for(request: Request, *, session: Session, actor: str) -> Idempotency:
    """The Idempotency-Key store of this request for `actor` (the key is optional; a malformed one is a 422)."""
    key = request.headers.get("idempotency-key")
    # A structured-field string (draft-ietf-httpapi-idempotency-key-header): printable ASCII only, so no NUL
    # (which PostgreSQL cannot store) and no control or non-ASCII character reaches the store.
    if key is not None and not (0 < len(key.strip()) <= _KEY_MAX and all(" " <= c <= "~" for c in key)):
        raise Invalid("Bad Idempotency-Key", [FieldError("header.Idempotency-Key",
                                                         f"1-{_KEY_MAX} printable ASCII characters")])
    body = await request.body()  # cached by Starlette: the route still gets its body
    fingerprint = hashlib.sha256(b"\n".join([request.method.encode(), request.url.path.encode(), body])).hexdigest()
    return Idempotency(
        session=session, actor=actor, key=key.strip() if key else None,
        method=request.method, path=request.url.path, fingerprint=fingerprint,
    )
