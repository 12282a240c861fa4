"""Who is asking, and what may they see. One dependency for HTML and JSON routes alike.

PROVISIONAL (replaced by the accounts work, issue 4): the interface below is what routes use.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated

from fastapi import Depends

ROLES = ("admin", "operator", "reviewer", "finance", "viewer", "tenant")


@dataclass(frozen=True)
class Principal:
    name: str
    roles: frozenset[str]
    tenants: frozenset[str] = field(default_factory=frozenset)  # for tenant members

    def can_see_tenant(self, tenant: str) -> bool:
        return bool(self.roles - {"tenant"}) or tenant in self.tenants

    def visible_tenants(self) -> frozenset[str] | None:
        """None means every tenant; otherwise the only tenants this principal may read."""
        return None if self.roles - {"tenant"} else self.tenants


def get_principal() -> Principal:
    return Principal(name="anonymous", roles=frozenset({"admin"}))


CurrentUser = Annotated[Principal, Depends(get_principal)]


def require_roles(*roles: str):
    """Dependency factory: the caller must hold one of `roles` (admin always passes)."""

    def _check(user: CurrentUser) -> Principal:
        from app.core.errors import AppError

        if "admin" in user.roles or user.roles & set(roles):
            return user
        raise AppError(detail="Your role does not allow this", status=403, title="Forbidden")

    return Depends(_check)
