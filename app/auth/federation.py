"""Users who sign in through OpenID Connect: created at their first sign-in, re-mapped from their groups at every one.

The groups claim (Settings.oidc_groups_claim, a name or a dotted path; from the ID token, else from userinfo)
decides everything, every time. Group names match exactly as the provider sends them (normalisation: none:
" gpu-admins", "gpu-admins\u00a0" and "GPU-ADMINS" are other groups than "gpu-admins").
- a group in Settings.oidc_role_map gives that role; with several, the first in ROLES order wins
  (admin, operator, reviewer, finance, viewer);
- without a staff role, groups named <oidc_tenant_prefix><tenant> make the user a member of those tenants,
  for tenants the policy in effect defines: a group naming any other tenant gives nothing and is reported to
  admins (audit action "oidc.unknown_tenant", listed on /admin/users);
- with neither, Settings.oidc_default_role, or when that is empty the sign-in is refused and an existing
  account is suspended (deactivated: its sessions end and its API tokens are revoked).
Changes go through the user service, so each is audit-logged (actor "oidc"). Accounts are matched by
(issuer, subject) only, never by name or e-mail: a provider user cannot take over a local account, and never
gets a name listed in Settings.break_glass_users, created yet or not.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable

from sqlmodel import Session, col, select

from app.auth import service
from app.auth.flows import one_sign_in_at_a_time
from app.auth.models import ROLES, OidcIdentity, User
from app.auth.oidc import claim_at
from app.core.audit import AuditEntry, record
from app.core.settings import Settings
from app.core.timeutil import utcnow

log = logging.getLogger("app.auth.oidc")
ACTOR = "oidc"
UNKNOWN_TENANT = "oidc.unknown_tenant"
_NOT_NAME_CHARS = re.compile(r"[^A-Za-z0-9._@-]+")


class SignInRefused(Exception):
    """The provider vouched for the user, but the portal does not let them in; the message says why."""


def groups_of(claims: dict, settings: Settings) -> list[str]:
    """The groups claim as a list of strings, exactly as sent (a single string counts as one group; anything else as none)."""
    value = claim_at(claims, settings.oidc_groups_claim)
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        return []
    return sorted({g for g in value if isinstance(g, str) and g})


def named_tenants(groups: Iterable[str], settings: Settings) -> list[str]:
    """The tenants that `groups` name through the tenant prefix (exactly: "tenant: x" names " x")."""
    prefix = settings.oidc_tenant_prefix
    return sorted({g[len(prefix):] for g in groups if prefix and g.startswith(prefix)} - {""})


def map_groups(groups: Iterable[str], settings: Settings,
               known_tenants: set[str] | None = None) -> tuple[str | None, list[str]]:
    """(role, tenants) for a user in `groups`; role None: no access. With `known_tenants`, only those count."""
    groups = list(groups)
    by_group = settings.oidc_roles_by_group()
    roles = {by_group[g] for g in groups if g in by_group}
    for role in ROLES:
        if role in roles:
            return role, []
    tenants = named_tenants(groups, settings)
    if known_tenants is not None:
        tenants = [t for t in tenants if t in known_tenants]
    if tenants:
        return "tenant", tenants
    return (settings.oidc_default_role or None), []


def _name_for(session: Session, claims: dict, reserved: frozenset[str]) -> str:
    """A free user name from preferred_username, email or sub (display only: the account is keyed by issuer+subject).

    `reserved` (the break-glass names) is never given, even before its local account exists.
    """
    for source in (claims.get("preferred_username"), claims.get("email"), claims.get("sub")):
        if not isinstance(source, str):
            continue
        base = _NOT_NAME_CHARS.sub("-", source).lstrip("._@-")[:56]
        if not base:
            continue
        for n in range(1, 100):
            name = base if n == 1 else f"{base}-{n}"
            if name not in reserved and session.exec(select(User.id).where(User.name == name)).first() is None:
                return name
    raise SignInRefused("No user name could be derived from the identity provider's claims.")


def _report_unknown_tenants(session: Session, *, issuer: str, subject: str, claims: dict, unknown: list[str],
                            user: User | None) -> None:
    """An audit entry admins see on /admin/users: a provider group names a tenant the policy does not define."""
    log.warning("oidc sign-in names unknown tenants %s: sub=%r", unknown, subject)
    record(session=session, actor=ACTOR, action=UNKNOWN_TENANT, entity="oidc_identity", entity_id=subject,
           after={"issuer": issuer, "user": user.name if user else claims.get("preferred_username"),
                  "tenants": unknown})


def unknown_tenant_reports(*, session: Session, limit: int = 20) -> list[dict]:
    """The latest sign-ins whose groups named tenants that do not exist (newest first), for the admin page."""
    rows = session.exec(select(AuditEntry).where(AuditEntry.action == UNKNOWN_TENANT)
                        .order_by(col(AuditEntry.id).desc()).limit(limit))
    return [{"at": row.at, "subject": row.entity_id, **json.loads(row.after or "{}")} for row in rows]


def sign_in(*, session: Session, issuer: str, claims: dict, settings: Settings,
            known_tenants: set[str]) -> User:
    """The user for verified ID token `claims`: created, re-mapped, or refused (SignInRefused).

    `known_tenants`: the tenants of the policy in effect; a tenant group naming another gives nothing.
    """
    one_sign_in_at_a_time(session)
    subject = str(claims["sub"])
    groups = groups_of(claims, settings)
    role, tenants = map_groups(groups, settings, known_tenants)
    unknown = [t for t in named_tenants(groups, settings) if t not in known_tenants]
    now = utcnow()
    identity = session.get(OidcIdentity, (issuer, subject))
    if unknown:
        known_user = session.get(User, identity.user_id) if identity is not None else None
        _report_unknown_tenants(session, issuer=issuer, subject=subject, claims=claims, unknown=unknown,
                                user=known_user)
    if identity is None:
        if role is None:
            log.info("oidc sign-in refused, no mapped group: sub=%r groups=%r", subject, groups)
            if unknown:
                raise SignInRefused(f"Your groups name tenants this portal does not know ({', '.join(unknown)}); "
                                    "ask your administrator.")
            raise SignInRefused("Your account has no group that gives access to this portal; ask your administrator.")
        name = _name_for(session, claims, settings.break_glass())
        user = service.create_user(session=session, name=name, role=role, password=None,
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
