"""API tokens: high-entropy random strings, shown once, stored as SHA-256 digests."""

from __future__ import annotations

import hashlib
import re
import secrets
from datetime import timedelta

from app.auth.models import SCOPES
from app.core.errors import FieldError, Invalid

PREFIX = "cbt_"
MAX_LIFETIME = timedelta(days=366)
_DURATION = re.compile(r"^\s*(\d{1,6})\s*([hdw])\s*$")  # 6 digits: no timedelta overflow before the range check
_UNITS = {"h": timedelta(hours=1), "d": timedelta(days=1), "w": timedelta(weeks=1)}


def new_token() -> str:
    """A fresh token: a recognisable prefix and 256 random bits."""
    return PREFIX + secrets.token_urlsafe(32)


def digest(token: str) -> str:
    """The stored form of a token (or session id). A plain hash suffices: the input has 256 bits of entropy."""
    return hashlib.sha256(token.encode()).hexdigest()


def display_prefix(token: str) -> str:
    """The first characters of a token, safe to show in lists (12 of ~47 characters)."""
    return token[: len(PREFIX) + 8]


def parse_lifetime(value: str, *, path: str = "expires") -> timedelta:
    """Parse '90d', '12h' or '2w' into a timedelta (at most a year)."""
    match = _DURATION.match(value or "")
    if not match:
        raise Invalid("Bad token lifetime", [FieldError(path, f"{value!r} is not a duration like 90d, 12h or 2w")])
    lifetime = int(match.group(1)) * _UNITS[match.group(2)]
    if lifetime <= timedelta(0) or lifetime > MAX_LIFETIME:
        raise Invalid("Bad token lifetime", [FieldError(path, "must be more than 0 and at most 366d")])
    return lifetime


def parse_scopes(values: str | list[str], *, path: str = "scopes") -> list[str]:
    """Normalise scopes given as 'read,write', 'read write' or a list; `write` implies `read`."""
    items = values if isinstance(values, list) else re.split(r"[\s,]+", values or "")
    scopes = {s.strip().lower() for s in items if s and s.strip()}
    unknown = sorted(scopes - set(SCOPES))
    if unknown:
        raise Invalid("Unknown scope", [FieldError(path, f"{', '.join(unknown)}: scopes are {', '.join(SCOPES)}")])
    if not scopes:
        raise Invalid("No scope", [FieldError(path, f"give at least one of {', '.join(SCOPES)}")])
    if "write" in scopes:
        scopes.add("read")
    return sorted(scopes)
