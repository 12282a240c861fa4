"""Standard Webhooks signatures (spec/standard-webhooks.md of standard-webhooks/standard-webhooks).

The secret is `whsec_` + base64 of random bytes (the key is the decoded bytes, 24 to 64 of them);
the signed content is `{webhook-id}.{webhook-timestamp}.{body}`; `webhook-signature` is a space-
separated list of `v1,<base64 HMAC-SHA256>`, one per secret in use (two during a rotation).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets

PREFIX = "whsec_"
SECRET_BYTES = 32


def generate_secret() -> str:
    """A new signing secret: 'whsec_' and the base64 of 32 random bytes."""
    return PREFIX + base64.b64encode(secrets.token_bytes(SECRET_BYTES)).decode()


def secret_key(secret: str) -> bytes:
    """The HMAC key of a 'whsec_' secret (the base64-decoded bytes after the prefix)."""
    if not secret.startswith(PREFIX):
        raise ValueError("a webhook secret starts with 'whsec_'")
    try:
        key = base64.b64decode(secret[len(PREFIX):], validate=True)
    except binascii.Error as exc:
        raise ValueError("a webhook secret is 'whsec_' and base64") from exc
    if not 24 <= len(key) <= 64:
        raise ValueError("a webhook secret holds 24 to 64 bytes")
    return key


def signature(secret: str, *, msg_id: str, timestamp: int, body: bytes) -> str:
    """'v1,' and the base64 HMAC-SHA256 of '{msg_id}.{timestamp}.{body}' under the secret's key."""
    content = f"{msg_id}.{timestamp}.".encode() + body
    return "v1," + base64.b64encode(hmac.new(secret_key(secret), content, hashlib.sha256).digest()).decode()


def headers(secrets_in_use: list[str], *, msg_id: str, timestamp: int, body: bytes) -> dict[str, str]:
    """The three Standard Webhooks headers, signed with every secret in use (the current one first)."""
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": " ".join(signature(s, msg_id=msg_id, timestamp=timestamp, body=body)
                                      for s in secrets_in_use),
    }
