"""Tenant visibility for billing tables, applied once per table (as Polar's repositories do).

Every billing query that returns tenant rows goes through one of these, never a hand-written filter.
"""

from __future__ import annotations

from typing import Protocol

from sqlalchemy import Select

from app.billing.models import ChargeLineRecord, TenantUsageRecord


class Viewer(Protocol):
    """Who reads: the tenants it may see, or None for staff (everything)."""

    def visible_tenants(self) -> frozenset[str] | None: ...


def _visible(viewer: Viewer | None) -> list[str] | None:
    tenants = None if viewer is None else viewer.visible_tenants()
    return None if tenants is None else sorted(tenants)


def readable_lines(stmt: Select, viewer: Viewer | None) -> Select:
    """`stmt` over charge lines, limited to the accounts the viewer may see (None: the system itself)."""
    tenants = _visible(viewer)
    return stmt if tenants is None else stmt.where(ChargeLineRecord.account.in_(tenants))


def readable_usage(stmt: Select, viewer: Viewer | None) -> Select:
    """`stmt` over tenant usage records, limited to the tenants the viewer may see."""
    tenants = _visible(viewer)
    return stmt if tenants is None else stmt.where(TenantUsageRecord.tenant.in_(tenants))
