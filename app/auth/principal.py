"""Who is asking: the principal a request or a CLI command acts as, and which tenants it may read."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Principal:
    name: str
    roles: frozenset[str]
    tenants: frozenset[str] = field(default_factory=frozenset)  # for tenant members
    user_id: int | None = None
    via: str = "session"  # session | token
    scopes: frozenset[str] = frozenset({"read", "write"})

    def can_see_tenant(self, tenant: str) -> bool:
        return bool(self.roles - {"tenant"}) or tenant in self.tenants

    def visible_tenants(self) -> frozenset[str] | None:
        """None means every tenant; otherwise the only tenants this principal may read."""
        return None if self.roles - {"tenant"} else self.tenants
