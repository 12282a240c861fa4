"""Account services: users, login with throttling, sessions, API tokens. Services flush; callers commit."""

from __future__ import annotations

import hashlib
import logging
import re
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import delete, text, update
from sqlalchemy.engine import Connection
from sqlalchemy.exc import SQLAlchemyError
from sqlmodel import Session, col, select

from app.auth import passwords, tokens
from app.auth.models import ROLES, ApiToken, AuthSession, LoginAttempt, OidcIdentity, User, UserTenant
from app.auth.principal import Principal
from app.auth.sessions import SESSION_LIFETIME, new_session_id
from app.core import audit
from app.core.db import sqlite_write_lock
from app.core.errors import Conflict, FieldError, Invalid, NotFound
from app.core.settings import get_settings
from app.core.timeutil import aware, utcnow

log = logging.getLogger("app.auth")

MAX_FAILURES = 5
LOCKOUT = timedelta(minutes=15)
# Recording every use would write on every API call; a minute's precision is enough to spot stale tokens.
LAST_USED_PRECISION = timedelta(minutes=1)
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$")


# ---- users ------------------------------------------------------------------------------------


def _check_user_fields(*, name: str | None, role: str, tenants: list[str]) -> None:
    errors = []
    if name is not None and not _NAME.match(name):
        errors.append(FieldError("name", "use 1-64 letters, digits, '.', '_', '@' or '-', starting with a letter or digit"))
    if role not in ROLES:
        errors.append(FieldError("role", f"{role!r} is not one of {', '.join(ROLES)}"))
    if role == "tenant" and not tenants:
        errors.append(FieldError("tenants", "a tenant member must belong to at least one tenant"))
    if role != "tenant" and tenants:
        errors.append(FieldError("tenants", "only tenant members are bound to tenants (other roles see every tenant)"))
    for i, tenant in enumerate(tenants):
        if not tenant.strip():
            errors.append(FieldError(f"tenants.{i}", "must not be empty"))
    if errors:
        raise Invalid("The user is not valid", errors)


def create_user(
    *, session: Session, name: str, role: str, password: str | None, tenants: list[str] | None = None, actor: str
) -> User:
    """Create a user (password None: token-only account). Raises Conflict when the name is taken."""
    tenants = sorted({t.strip() for t in tenants or []})
    _check_user_fields(name=name, role=role, tenants=tenants)
    if password is not None:
        passwords.check_strength(password)
    if session.exec(select(User).where(User.name == name)).first():
        raise Conflict(f"A user named {name!r} already exists")
    user = User(
        name=name,
        role=role,
        password_hash=passwords.hash_password(password) if password is not None else "",
        created_at=utcnow(),
    )
    session.add(user)
    session.flush()
    for tenant in tenants:
        session.add(UserTenant(user_id=user.id, tenant=tenant))
    session.flush()
    audit.record(
        session=session, actor=actor, action="user.create", entity="user", entity_id=str(user.id),
        after={"name": name, "role": role, "tenants": tenants},
    )
    return user


def user_tenants(*, session: Session, user_id: int) -> list[str]:
    rows = session.exec(select(UserTenant.tenant).where(UserTenant.user_id == user_id).order_by(UserTenant.tenant))
    return list(rows)


def get_user(*, session: Session, user_id: int) -> User:
    user = session.get(User, user_id)
    if user is None:
        raise NotFound(f"No user {user_id}")
    return user


def get_user_by_name(*, session: Session, name: str) -> User:
    user = session.exec(select(User).where(User.name == name)).first()
    if user is None:
        raise NotFound(f"No user named {name!r}")
    return user


def list_users(*, session: Session) -> list[tuple[User, list[str]]]:
    """Every user with their tenants, by name."""
    users = session.exec(select(User).order_by(User.name)).all()
    memberships: dict[int, list[str]] = {}
    for row in session.exec(select(UserTenant).order_by(UserTenant.tenant)):
        memberships.setdefault(row.user_id, []).append(row.tenant)
    return [(u, memberships.get(u.id, [])) for u in users]


def update_user(
    *,
    session: Session,
    user_id: int,
    role: str,
    tenants: list[str],
    active: bool,
    password: str | None = None,
    actor: str,
) -> User:
    """Change a user's role, tenants, active flag and (optionally) password.

    Deactivation and a new password end the user's sessions and revoke their API tokens: reactivating
    the account later must not bring back credentials that were handed out before.
    """
    user = get_user(session=session, user_id=user_id)
    tenants = sorted({t.strip() for t in tenants})
    _check_user_fields(name=None, role=role, tenants=tenants)
    if password:
        passwords.check_strength(password)
    before = {"role": user.role, "tenants": user_tenants(session=session, user_id=user_id), "active": user.active}
    user.role, user.active = role, active
    if password:
        user.password_hash = passwords.hash_password(password)
    session.exec(delete(UserTenant).where(col(UserTenant.user_id) == user_id))
    for tenant in tenants:
        session.add(UserTenant(user_id=user_id, tenant=tenant))
    if not active or password:
        session.exec(delete(AuthSession).where(col(AuthSession.user_id) == user_id))
        session.execute(
            update(ApiToken).where(col(ApiToken.user_id) == user_id, col(ApiToken.revoked_at).is_(None))
            .values(revoked_at=utcnow()).execution_options(synchronize_session="fetch")
        )
    session.add(user)
    session.flush()
    after = {"role": role, "tenants": tenants, "active": active, "password_changed": bool(password)}
    audit.record(session=session, actor=actor, action="user.update", entity="user", entity_id=str(user_id),
                 before=before, after=after)
    return user


def principal_for(*, session: Session, user: User, via: str, scopes: frozenset[str] | None = None) -> Principal:
    """The Principal a user acts as (one role; tenant members carry their tenants)."""
    return Principal(
        name=user.name,
        roles=frozenset({user.role}),
        tenants=frozenset(user_tenants(session=session, user_id=user.id)),
        user_id=user.id,
        via=via,
        scopes=scopes if scopes is not None else frozenset({"read", "write"}),
    )


# ---- login ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LoginResult:
    user: User | None
    locked_until: datetime | None = None


def locked_until(*, session: Session, name: str, ip: str, now: datetime | None = None) -> datetime | None:
    """When the last MAX_FAILURES failures (since the last success) fall within LOCKOUT, the lock's end."""
    now = now or utcnow()
    last_ok = session.exec(
        select(LoginAttempt.at).where(LoginAttempt.username == name, LoginAttempt.ip == ip, LoginAttempt.ok)
        .order_by(col(LoginAttempt.at).desc()).limit(1)
    ).first()
    query = select(LoginAttempt.at).where(
        LoginAttempt.username == name, LoginAttempt.ip == ip, LoginAttempt.ok == False,  # noqa: E712
        LoginAttempt.at > now - LOCKOUT,
    )
    if last_ok is not None:
        query = query.where(LoginAttempt.at > last_ok)
    failures = [aware(at) for at in session.exec(query.order_by(col(LoginAttempt.at).desc()).limit(MAX_FAILURES))]
    if len(failures) < MAX_FAILURES:
        return None
    until = failures[0] + LOCKOUT
    return until if until > now else None


def address_locked_until(*, session: Session, ip: str, now: datetime | None = None) -> datetime | None:
    """When an address has failed `login_failures_per_address` times (any user names) within LOCKOUT, the lock's end."""
    now = now or utcnow()
    limit = get_settings().login_failures_per_address
    failures = [aware(at) for at in session.exec(
        select(LoginAttempt.at).where(LoginAttempt.ip == ip, LoginAttempt.ok == False,  # noqa: E712
                                      LoginAttempt.at > now - LOCKOUT)
        .order_by(col(LoginAttempt.at).desc()).limit(limit)
    )]
    if len(failures) < limit:
        return None
    until = failures[0] + LOCKOUT
    return until if until > now else None


def _one_attempt_at_a_time(session: Session, ip: str) -> None:
    """Serialize sign-ins from one address until the caller commits, so the failure count is read and grown atomically.

    PostgreSQL: a transaction-scoped advisory lock on the address (it covers every user name tried
    from there). SQLite: the write lock, taken at BEGIN (requests do: BEGIN IMMEDIATE for POSTs).
    """
    bind = session.get_bind()
    if bind.dialect.name == "postgresql":
        key = int.from_bytes(hashlib.sha256(f"login:{ip}".encode()).digest()[:8], "big", signed=True)
        session.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": key})
    else:
        sqlite_write_lock(session)


def authenticate(*, session: Session, name: str, password: str, ip: str) -> LoginResult:
    """Check a login. Refused while locked (no password check); every checked attempt is recorded.

    The lock check, the password check and the recorded attempt happen under one per-address lock,
    so N parallel guesses get at most the lockout's number of passwords checked.
    """
    _one_attempt_at_a_time(session, ip)
    now = utcnow()
    until = locked_until(session=session, name=name, ip=ip, now=now) or address_locked_until(
        session=session, ip=ip, now=now)
    if until is not None:
        log.warning("login refused while locked: user=%r ip=%s", name, ip)
        return LoginResult(user=None, locked_until=until)
    user = session.exec(select(User).where(User.name == name)).first()
    ok = passwords.verify_password(user.password_hash if user else "", password) and bool(user and user.active)
    session.add(LoginAttempt(username=name, ip=ip, at=now, ok=ok))
    if not ok:
        session.flush()
        log.info("login failed: user=%r ip=%s", name, ip)
        return LoginResult(user=None, locked_until=locked_until(session=session, name=name, ip=ip, now=now)
                           or address_locked_until(session=session, ip=ip, now=now))
    if passwords.needs_rehash(user.password_hash):
        user.password_hash = passwords.hash_password(password)
    user.last_login_at = now
    session.add(user)
    session.flush()
    log.info("login: user=%r ip=%s", name, ip)
    return LoginResult(user=user)


def start_session(*, session: Session, user: User) -> str:
    """Open a browser session for `user`; returns the raw session id (for the cookie only)."""
    session_id = new_session_id()
    now = utcnow()
    session.add(AuthSession(id_sha256=tokens.digest(session_id), user_id=user.id, created_at=now,
                            expires_at=now + SESSION_LIFETIME))
    # Expired sessions are dead weight; clearing them here keeps the table small without a cron job.
    session.exec(delete(AuthSession).where(col(AuthSession.expires_at) < now))
    session.flush()
    return session_id


def end_session(*, session: Session, session_id: str) -> None:
    session.exec(delete(AuthSession).where(col(AuthSession.id_sha256) == tokens.digest(session_id)))
    session.flush()


def local_credentials_allowed(*, session: Session, user: User, password_sign_in: bool = False) -> bool:
    """Whether `user`'s password (`password_sign_in`), sessions and API tokens count, given Settings.local_login_enabled.

    With local sign-in off, a local account (no provider identity) keeps working only when it is named in
    Settings.break_glass_users: otherwise a token minted before the switch would outlive the decision to
    sign everyone in through the provider. Provider accounts keep their sessions and tokens (their groups
    are checked at each sign-in) but never sign in with a password, whatever their name.
    """
    settings = get_settings()
    if settings.local_login_enabled:
        return True
    if session.exec(select(OidcIdentity.user_id).where(OidcIdentity.user_id == user.id)).first() is not None:
        return not password_sign_in
    return user.name in settings.break_glass()


def principal_for_session(*, session: Session, session_id: str) -> Principal | None:
    """The principal of a live session, or None (unknown, expired, its user deactivated or no longer allowed)."""
    row = session.get(AuthSession, tokens.digest(session_id))
    if row is None or aware(row.expires_at) <= utcnow():
        return None
    user = session.get(User, row.user_id)
    if user is None or not user.active or not local_credentials_allowed(session=session, user=user):
        return None
    return principal_for(session=session, user=user, via="session")


# ---- API tokens -------------------------------------------------------------------------------


def create_token(
    *, session: Session, user: User, scopes: str | list[str], lifetime: timedelta, label: str = "", actor: str
) -> tuple[ApiToken, str]:
    """Issue a token for `user`; returns the row and the raw token, which is never stored or shown again."""
    scope_list = tokens.parse_scopes(scopes)
    if lifetime <= timedelta(0) or lifetime > tokens.MAX_LIFETIME:
        raise Invalid("Bad token lifetime", [FieldError("expires", "must be more than 0 and at most 366d")])
    raw = tokens.new_token()
    now = utcnow()
    row = ApiToken(
        user_id=user.id, label=label.strip()[:100], prefix=tokens.display_prefix(raw),
        token_sha256=tokens.digest(raw), scopes=" ".join(scope_list), created_at=now, expires_at=now + lifetime,
    )
    session.add(row)
    session.flush()
    audit.record(
        session=session, actor=actor, action="token.create", entity="api_token", entity_id=str(row.id),
        after={"user": user.name, "scopes": scope_list, "expires_at": row.expires_at, "prefix": row.prefix},
    )
    return row, raw


def revoke_token(*, session: Session, token_id: int, actor: str, owner_id: int | None = None) -> ApiToken:
    """Revoke a token (idempotent). With `owner_id`, only that user's token may be revoked (else 404)."""
    row = session.get(ApiToken, token_id)
    if row is None or (owner_id is not None and row.user_id != owner_id):
        raise NotFound(f"No token {token_id}")
    if row.revoked_at is None:
        row.revoked_at = utcnow()
        session.add(row)
        session.flush()
        audit.record(session=session, actor=actor, action="token.revoke", entity="api_token", entity_id=str(row.id))
    return row


def tokens_query(*, user_id: int):
    """One user's tokens (for paginated listing; newest first by (created_at, id))."""
    return select(ApiToken).where(ApiToken.user_id == user_id)


def list_tokens(*, session: Session, user_id: int | None = None) -> list[tuple[ApiToken, str]]:
    """Tokens with their owner's name, newest first (one user's when `user_id` is given)."""
    query = select(ApiToken, User.name).join(User, col(User.id) == ApiToken.user_id)
    if user_id is not None:
        query = query.where(ApiToken.user_id == user_id)
    return list(session.exec(query.order_by(col(ApiToken.created_at).desc(), col(ApiToken.id).desc())))


def _record_use(session: Session, token_id: int, now: datetime, *, in_request: bool) -> None:
    """Best effort: note a token's use without ever failing, or waiting long in, the request it rides on.

    PostgreSQL: in the request's transaction, skipping a row another request has locked. SQLite
    reads: in a short transaction of its own that waits 50 ms at most for the write lock, so a GET
    never queues behind writers. SQLite writes (`in_request`) hold the write lock already: a second
    connection would only wait for it, and its commit would leave the request's snapshot stale. A
    session bound to a caller's connection (tests) has no other connection: it uses a savepoint.
    """
    unlocked = select(ApiToken.id).where(col(ApiToken.id) == token_id).with_for_update(skip_locked=True)
    stmt = update(ApiToken).where(col(ApiToken.id).in_(unlocked)).values(last_used_at=now)
    bind = session.get_bind()
    try:
        if in_request or isinstance(bind, Connection) or bind.dialect.name == "postgresql":
            with session.begin_nested():
                session.execute(stmt.execution_options(synchronize_session=False))
            return
        with bind.connect() as conn:
            raw = conn.connection.dbapi_connection
            raw.execute("PRAGMA busy_timeout = 50")  # on the driver, so that it opens no transaction of its own
            try:
                with conn.begin():
                    conn.execute(stmt)
            finally:
                raw.execute("PRAGMA busy_timeout = 30000")  # the engine's 30 s (app.core.db)
    except SQLAlchemyError as exc:  # locked, busy, or no pooled connection free: skip, the next use records it
        log.debug("token %s use not recorded: %s", token_id, exc)


def principal_for_token(*, session: Session, raw: str, write_request: bool = False) -> Principal | None:
    """The principal of a valid token (known, not revoked, not expired, user active and allowed), recording its use.

    `write_request`: the caller's transaction will write anyway, so the use is recorded in it.
    """
    if not raw.startswith(tokens.PREFIX):
        return None
    row = session.exec(select(ApiToken).where(ApiToken.token_sha256 == tokens.digest(raw))).first()
    now = utcnow()
    if row is None or row.revoked_at is not None or aware(row.expires_at) <= now:
        return None
    user = session.get(User, row.user_id)
    if user is None or not user.active or not local_credentials_allowed(session=session, user=user):
        return None
    if row.last_used_at is None or now - aware(row.last_used_at) >= LAST_USED_PRECISION:
        _record_use(session, row.id, now, in_request=write_request)
    return principal_for(session=session, user=user, via="token", scopes=frozenset(row.scopes.split()))
