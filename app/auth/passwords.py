"""Password hashing with argon2id (argon2-cffi defaults, RFC 9106 low-memory profile)."""

from __future__ import annotations

import threading

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError

from app.core.errors import FieldError, Invalid
from app.core.settings import get_settings

MIN_LENGTH = 12
MAX_LENGTH = 1024  # argon2 accepts more, but a megabyte "password" is a denial-of-service vector

_hasher = PasswordHasher()
# argon2id takes 64 MiB per hash: a flood of logins must queue here, not multiply memory by the thread count.
_slots: threading.BoundedSemaphore | None = None
_slots_created = threading.Lock()


def _hash_slot() -> threading.BoundedSemaphore:
    """The one semaphore bounding argon2 work (created once: two first callers must not make two)."""
    global _slots
    with _slots_created:
        if _slots is None:
            _slots = threading.BoundedSemaphore(max(1, get_settings().password_hash_concurrency))
        return _slots
# Verified when the user does not exist, so that a wrong name costs as much time as a wrong password.
_DUMMY_HASH = _hasher.hash("not-a-real-password-only-for-timing")


def check_strength(password: str, *, path: str = "password") -> None:
    """Reject passwords too short or too long to be accepted (the error names the field)."""
    if len(password) < MIN_LENGTH:
        raise Invalid("Password too short", [FieldError(path, f"must be at least {MIN_LENGTH} characters")])
    if len(password) > MAX_LENGTH:
        raise Invalid("Password too long", [FieldError(path, f"must be at most {MAX_LENGTH} characters")])


def hash_password(password: str) -> str:
    """Return the argon2id hash of `password` (salted; never the same twice)."""
    with _hash_slot():
        return _hasher.hash(password)


def verify_password(password_hash: str, password: str) -> bool:
    """True when `password` matches `password_hash`; an empty or malformed hash never matches."""
    if len(password) > MAX_LENGTH:
        return False
    try:
        with _hash_slot():
            return _hasher.verify(password_hash or _DUMMY_HASH, password) and bool(password_hash)
    except (VerificationError, InvalidHashError):
        return False


def needs_rehash(password_hash: str) -> bool:
    """True when the hash was made with weaker parameters than today's and should be replaced at login."""
    try:
        return _hasher.check_needs_rehash(password_hash)
    except InvalidHashError:
        return True
