"""Password hashing: argon2id, salted, verified, rejected when wrong, length rules name the field."""

import pytest

from app.auth import passwords
from app.core.errors import Invalid


def test_hash_is_argon2id_salted_and_verifies():
    first = passwords.hash_password("correct horse battery")
    second = passwords.hash_password("correct horse battery")
    assert first.startswith("$argon2id$")
    assert first != second  # salted
    assert "correct horse" not in first
    assert passwords.verify_password(first, "correct horse battery")
    assert passwords.verify_password(second, "correct horse battery")


def test_wrong_password_empty_hash_and_garbage_hash_never_match():
    stored = passwords.hash_password("correct horse battery")
    assert not passwords.verify_password(stored, "correct horse batterY")
    assert not passwords.verify_password("", "anything at all")
    assert not passwords.verify_password("not-a-hash", "anything at all")
    assert not passwords.verify_password(stored, "x" * (passwords.MAX_LENGTH + 1))


def test_strength_rules_name_the_field():
    with pytest.raises(Invalid) as short:
        passwords.check_strength("short", path="body.password")
    assert short.value.errors[0].path == "body.password"
    assert "12" in short.value.errors[0].message
    with pytest.raises(Invalid):
        passwords.check_strength("x" * (passwords.MAX_LENGTH + 1))
    passwords.check_strength("twelve chars")


def test_needs_rehash_for_weaker_parameters():
    from argon2 import PasswordHasher

    weak = PasswordHasher(time_cost=1, memory_cost=8, parallelism=1).hash("correct horse battery")
    assert passwords.needs_rehash(weak)
    assert not passwords.needs_rehash(passwords.hash_password("correct horse battery"))
    assert passwords.needs_rehash("garbage")
