"""Users who sign in through OpenID Connect: created at their first sign-in, re-mapped from their groups at every one.

The groups claim (Settings.oidc_groups_claim) decides everything, every time:
- a group in Settings.oidc_role_map gives that role; with several, the first in ROLES order wins
  (admin, operator, reviewer, finance, viewer);
- without a staff role, groups named <oidc_tenant_prefix><tenant> make the user a member of those tenants;
- with neither, Settings.oidc_default_role, or when that is empty the sign-in is refused and an existing
  account is suspended (deactivated: its sessions end and its API tokens are revoked).
Changes go through the user service, so each is audit-logged (actor "oidc"). Accounts are matched by
(issuer, subject) only, never by name or e-mail: a provider user cannot take over a local account.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Iterable

from sqlalchemy import text
from sqlalchemy.engine import Engine
from sqlmodel import Session, select

from app.auth import service
from app.auth.models import ROLES, OidcIdentity, User
from app.core.settings import Settings
from app.core.timeutil import utcnow

log = logging.getLogger("app.auth.oidc")
ACTOR = "oidc"
_LOCK_KEY = int.from_bytes(hashlib.sha256(b"oidc-sign-in").digest()[:8], "big", signed=True)
_NOT_NAME_CHARS = re.compile(r"[^A-Za-z0-9._@-]+")


class SignInRefused(Exception):
    """The provider vouched for the user, but the portal does not let them in; the message says why."""


def groups_of(claims: dict, settings: Settings) -> list[str]:
    """The groups claim as a list of strings (a single string counts as one group; anything else as none)."""
    value = claims.get(settings.oidc_groups_claim)
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        return []
    return sorted({g.strip() for g in value if isinstance(g, str) and g.strip()})


def map_groups(groups: Iterable[str], settings: Settings) -> tuple[str | None, list[str]]:
    """(role, tenants) for a user in `groups`; role None: no access."""
    groups = list(groups)
    by_group = settings.oidc_roles_by_group()
    roles = {by_group[g] for g in groups if g in by_group}
    for role in ROLES:
        if role in roles:
            return role, []
    prefix = settings.oidc_tenant_prefix
    tenants = sorted({g[len(prefix):].strip() for g in groups if prefix and g.startswith(prefix)} - {""})
    if tenants:
        return "tenant", tenants
    return (settings.oidc_default_role or None), []


def _name_for(session: Session, claims: dict) -> str:
    """A free user name from preferred_username, email or sub (display only: the account is keyed by issuer+subject)."""
    for source in (claims.get("preferred_username"), claims.get("email"), claims.get("sub")):
        if not isinstance(source, str):
            continue
        base = _NOT_NAME_CHARS.sub("-", source).lstrip("._@-")[:56]
        if not base:
            continue
        for n in range(1, 100):
            name = base if n == 1 else f"{base}-{n}"
            if session.exec(select(User.id).where(User.name == name)).first() is None:
                return name
    raise SignInRefused("No user name could be derived from the identity provider's claims.")


def _one_sign_in_at_a_time(session: Session) -> None:
    """Serialize single sign-ons until the caller commits: first sign-ins (one subject twice, one name) never race.

    PostgreSQL: a transaction-scoped advisory lock. SQLite: the write lock, taken at BEGIN (the callback is a
    GET, which the request unit of work would otherwise begin as a reader).
    """
    bind = session.get_bind()
    if bind.dialect.name == "postgresql":
        session.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _LOCK_KEY})
    elif isinstance(session.bind, Engine) and not session.in_transaction():
        session.connection(execution_options={"sqlite_immediate": True})


def sign_in(*, session: Session, issuer: str, claims: dict, settings: Settings) -> User:
    """The user for verified ID token `claims`: created, re-mapped, or refused (SignInRefused)."""
    _one_sign_in_at_a_time(session)
    subject = str(claims["sub"])
    groups = groups_of(claims, settings)
    role, tenants = map_groups(groups, settings)
    now = utcnow()
    identity = session.get(OidcIdentity, (issuer, subject))
    if identity is None:
        if role is None:
            log.info("oidc sign-in refused, no mapped group: sub=%r groups=%r", subject, groups)
            raise SignInRefused("Your account has no group that gives access to this portal; ask your administrator.")
        user = service.create_user(session=session, name=_name_for(session, claims), role=role, password=None,
                                   tenants=tenants, actor=ACTOR)
        identity = OidcIdentity(issuer=issuer, subject=subject, user_id=user.id, created_at=now, last_login_at=now)
    else:
        user = service.get_user(session=session, user_id=identity.user_id)
        if not user.active and not identity.suspended:
            raise SignInRefused("This account is deactivated in the portal; ask an administrator.")
        current = service.user_tenants(session=session, user_id=user.id)
        if role is None:
            if user.active:  # ends its sessions and revokes its API tokens
                service.update_user(session=session, user_id=user.id, role=user.role, tenants=current, active=False,
                                    actor=ACTOR)
            identity.suspended, identity.groups, identity.last_login_at = True, json.dumps(groups), now
            session.add(identity)
            session.flush()
            log.info("oidc sign-in refused, account suspended: user=%r groups=%r", user.name, groups)
            raise SignInRefused("Your account no longer has a group that gives access to this portal; "
                                "ask your administrator.")
        if (role, tenants, True) != (user.role, current, user.active):
            service.update_user(session=session, user_id=user.id, role=role, tenants=tenants, active=True,
                                actor=ACTOR)
    identity.suspended, identity.groups, identity.last_login_at = False, json.dumps(groups), now
    user.last_login_at = now
    session.add(identity)
    session.add(user)
    session.flush()
    log.info("oidc sign-in: user=%r role=%s tenants=%s", user.name, role, tenants)
    return user


def sso_user_ids(*, session: Session) -> set[int]:
    """The users who sign in through the provider (the admin page marks them: their groups decide role and tenants)."""
    return set(session.exec(select(OidcIdentity.user_id)))
