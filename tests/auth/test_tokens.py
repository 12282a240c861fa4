"""API token primitives: entropy, digest, lifetimes and scopes."""

from datetime import timedelta

import pytest

from app.auth import tokens
from app.core.errors import Invalid


def test_tokens_are_unique_prefixed_and_long():
    made = {tokens.new_token() for _ in range(200)}
    assert len(made) == 200
    for token in made:
        assert token.startswith(tokens.PREFIX)
        assert len(token) >= len(tokens.PREFIX) + 43  # 32 random bytes, base64url


def test_digest_is_sha256_hex_and_prefix_is_short():
    token = tokens.new_token()
    assert len(tokens.digest(token)) == 64
    assert tokens.digest(token) != tokens.digest(token + "x")
    assert token.startswith(tokens.display_prefix(token))
    assert len(tokens.display_prefix(token)) == len(tokens.PREFIX) + 8


@pytest.mark.parametrize(
    "text,expected",
    [("90d", timedelta(days=90)), ("12h", timedelta(hours=12)), ("2w", timedelta(weeks=2)), (" 366d ", timedelta(days=366))],
)
def test_lifetimes(text, expected):
    assert tokens.parse_lifetime(text) == expected


@pytest.mark.parametrize("text", ["", "90", "d", "0d", "367d", "-1d", "1y", "1.5d"])
def test_bad_lifetimes_name_the_field(text):
    with pytest.raises(Invalid) as err:
        tokens.parse_lifetime(text, path="--expires")
    assert err.value.errors[0].path == "--expires"


def test_scopes_normalised_write_implies_read():
    assert tokens.parse_scopes("read") == ["read"]
    assert tokens.parse_scopes("write") == ["read", "write"]
    assert tokens.parse_scopes("read, WRITE") == ["read", "write"]
    assert tokens.parse_scopes(["write", "read"]) == ["read", "write"]
    with pytest.raises(Invalid) as err:
        tokens.parse_scopes("read,admin")
    assert "admin" in err.value.errors[0].message
    with pytest.raises(Invalid):
        tokens.parse_scopes("")
