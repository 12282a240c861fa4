"""Tenant visibility over the metrics tables, applied in one place (as Polar's readable statements are).

Each table names the column that says whose a row is; every read of a tenant's data goes through
`readable`, so a tenant member's view cannot depend on a filter someone remembered to write.
"""

from __future__ import annotations

from sqlmodel import col

from app.metrics.models import BreachMinuteRollup, BreachShare, NamespaceUsage, SlaUnresolvedHour, UsageRollup

OWNER = {
    UsageRollup: UsageRollup.tenant,
    NamespaceUsage: NamespaceUsage.tenant,
    BreachMinuteRollup: BreachMinuteRollup.service_tenant,
    SlaUnresolvedHour: SlaUnresolvedHour.service_tenant,
    BreachShare: BreachShare.tenant,
}


def readable(statement, table, tenants: frozenset[str] | None):
    """`statement` limited to the rows of `table` the viewer may read: all (None) or those of `tenants`."""
    if tenants is None:
        return statement
    return statement.where(col(OWNER[table]).in_(sorted(tenants)))
