"""Groups to role and tenants (no provider needed), and first sign-ins that race."""

from __future__ import annotations

import threading

import pytest
from sqlmodel import Session, select

from app.auth import federation
from app.auth.models import OidcIdentity, User
from app.core.db import unit_of_work
from app.core.settings import Settings
from tests.support.oidc import ROLE_MAP

ISSUER = "https://id.example.org"


def _settings(**changes) -> Settings:
    return Settings(_env_file=None, oidc_role_map=ROLE_MAP, **changes)


@pytest.mark.parametrize(("groups", "expected"), [
    (["gpu-staff", "gpu-finance", "gpu-ops"], ("operator", [])),  # the first in ROLES order
    (["gpu-admins", "tenant:vision"], ("admin", [])),  # staff see every tenant: memberships dropped
    (["tenant:vision", "tenant:etl", "tenant:", "newsletter"], ("tenant", ["etl", "vision"])),
    (["GPU-ADMINS", "Tenant:vision"], (None, [])),  # group names compare exactly
    ([], (None, [])),
])
def test_groups_map_to_one_role_or_tenant_memberships(groups, expected):
    assert federation.map_groups(groups, _settings()) == expected


@pytest.mark.parametrize("groups", [
    [" gpu-admins "], ["gpu-admins\u00a0"], ["\u3000gpu-admins"], ["gpu-admins\n"], ["\u200bgpu-admins"],
])
def test_group_names_match_exactly_with_no_normalisation(groups):
    settings = _settings()
    assert federation.map_groups(federation.groups_of({"groups": groups}, settings), settings) == (None, [])


def test_tenant_groups_match_exactly_and_only_known_tenants_count():
    settings = _settings()
    groups = federation.groups_of({"groups": ["tenant: vision", "tenant:vision ", "tenant:etl"]}, settings)
    assert federation.named_tenants(groups, settings) == [" vision", "etl", "vision "]
    assert federation.map_groups(groups, settings, {"vision", "etl"}) == ("tenant", ["etl"])
    assert federation.map_groups(["tenant:ghost"], settings, {"vision"}) == (None, [])


@pytest.mark.parametrize(("claim", "claims", "expected"), [
    ("realm_access.roles", {"realm_access": {"roles": ["gpu-ops", "offline_access"]}}, ["gpu-ops", "offline_access"]),
    ("groups", {"groups": ["gpu-ops"]}, ["gpu-ops"]),  # Azure AD, Okta
    ("https://portal.example.org/groups", {"https://portal.example.org/groups": ["gpu-ops"]}, ["gpu-ops"]),
    ("realm_access.roles", {"realm_access": ["not", "a", "mapping"]}, []),
    ("resource_access.portal.roles", {"resource_access": {"portal": {"roles": "gpu-ops"}}}, ["gpu-ops"]),
])
def test_the_groups_claim_is_a_name_or_a_dotted_path(claim, claims, expected):
    assert federation.groups_of(claims, _settings(oidc_groups_claim=claim)) == expected


def test_default_role_prefix_and_claim_shapes():
    settings = _settings(oidc_default_role="viewer", oidc_tenant_prefix="cb-tenant-", oidc_groups_claim="roles")
    assert federation.map_groups(["elsewhere"], settings) == ("viewer", [])
    assert federation.map_groups(["cb-tenant-search"], settings) == ("tenant", ["search"])
    assert federation.groups_of({"roles": "gpu-ops"}, settings) == ["gpu-ops"]
    assert federation.groups_of({"roles": ["b", "a", 7, " ", "a", ""]}, settings) == [" ", "a", "b"]
    assert federation.groups_of({"roles": {"not": "a list"}, "groups": ["gpu-ops"]}, settings) == []


def test_unknown_roles_in_the_map_are_refused_at_start():
    with pytest.raises(ValueError, match="unknown roles: superuser"):
        Settings(_env_file=None, oidc_role_map="gpu-root=superuser")
    with pytest.raises(ValueError, match="OIDC_DEFAULT_ROLE"):
        Settings(_env_file=None, oidc_default_role="tenant")


def test_racing_first_sign_ins_make_one_account_each(fresh_engine):
    """Two browsers finish the same person's first sign-in at once, and two people share a preferred_username."""
    settings = _settings()
    claims = [{"sub": "u-1", "preferred_username": "sam", "groups": ["gpu-staff"]}] * 2 + [
        {"sub": "u-2", "preferred_username": "sam", "groups": ["gpu-staff"]}]
    barrier = threading.Barrier(len(claims))
    errors: list[BaseException] = []

    def sign_in(one: dict) -> None:
        try:
            barrier.wait(timeout=30)
            with unit_of_work(fresh_engine) as session:
                federation.sign_in(session=session, issuer=ISSUER, claims=one, settings=settings, known_tenants=set())
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=sign_in, args=(one,)) for one in claims]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors, errors
    with Session(fresh_engine) as session:
        identities = {i.subject: i.user_id for i in session.exec(select(OidcIdentity))}
        names = {u.id: u.name for u in session.exec(select(User))}
    assert sorted(identities) == ["u-1", "u-2"]
    assert sorted(names[i] for i in identities.values()) == ["sam", "sam-2"]
