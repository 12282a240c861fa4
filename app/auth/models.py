"""Accounts: users, tenant membership, browser sessions, API tokens, login attempts.

Secrets are never stored: passwords as argon2 hashes, session ids and API tokens as SHA-256 digests.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Column, Index, Text
from sqlmodel import Field, SQLModel

import app.core.models  # noqa: F401  (naming convention)

ROLES = ("admin", "operator", "reviewer", "finance", "viewer", "tenant")
SCOPES = ("read", "write")


class User(SQLModel, table=True):
    __tablename__ = "app_user"

    id: int | None = Field(default=None, primary_key=True)
    name: str = Field(unique=True)
    role: str  # one of ROLES
    password_hash: str = ""  # empty: no browser login (token-only account)
    active: bool = True
    created_at: datetime
    last_login_at: datetime | None = None


class UserTenant(SQLModel, table=True):
    """Tenant membership: a `tenant` user reads only the tenants listed here."""

    __tablename__ = "user_tenant"

    user_id: int = Field(foreign_key="app_user.id", primary_key=True, ondelete="CASCADE")
    tenant: str = Field(primary_key=True)


class AuthSession(SQLModel, table=True):
    """A browser session; the cookie carries the (signed) id, the table only its digest."""

    __tablename__ = "auth_session"

    id_sha256: str = Field(primary_key=True)
    user_id: int = Field(foreign_key="app_user.id", index=True, ondelete="CASCADE")
    created_at: datetime
    expires_at: datetime


class ApiToken(SQLModel, table=True):
    __tablename__ = "api_token"

    id: int | None = Field(default=None, primary_key=True)
    user_id: int = Field(foreign_key="app_user.id", index=True, ondelete="CASCADE")
    label: str = ""
    prefix: str  # the first characters of the token, to recognise it in lists
    token_sha256: str = Field(unique=True)
    scopes: str  # space-separated subset of SCOPES
    created_at: datetime
    expires_at: datetime
    revoked_at: datetime | None = None
    last_used_at: datetime | None = None


class LoginAttempt(SQLModel, table=True):
    """One login try; failures since the last success, per user name and IP, drive the lockout."""

    __tablename__ = "login_attempt"
    __table_args__ = (Index("ix_login_attempt_who", "username", "ip", "at"),)

    id: int | None = Field(default=None, primary_key=True)
    username: str
    ip: str
    at: datetime
    ok: bool


class OidcIdentity(SQLModel, table=True):
    """A user signed in through OpenID Connect, known by the provider's (issuer, subject), never by name.

    `groups` is the groups claim of the last sign-in; `suspended` marks an account that sign-in itself
    deactivated (no group mapped any more), which a later sign-in with a mapped group reactivates. An
    account an admin deactivated stays deactivated.
    """

    __tablename__ = "oidc_identity"

    issuer: str = Field(primary_key=True)
    subject: str = Field(primary_key=True)
    user_id: int = Field(foreign_key="app_user.id", unique=True, ondelete="CASCADE")
    groups: str = Field(default="[]", sa_column=Column(Text, nullable=False))  # JSON list
    suspended: bool = False
    created_at: datetime
    last_login_at: datetime


class OidcFlow(SQLModel, table=True):
    """A single sign-on begun and not yet returned: kept from the redirect to the provider until the callback.

    The callback deletes its row (and is refused when there is none), so each flow signs in at most once
    whatever the provider does with its codes. Only digests are kept: the state and nonce stay in the browser.
    """

    __tablename__ = "oidc_flow"

    state_sha256: str = Field(primary_key=True)
    nonce_sha256: str
    created_at: datetime
    expires_at: datetime = Field(index=True)
