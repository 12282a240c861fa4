"""The budget table: a monthly budget per tenant or department, with the thresholds that raise alerts.

Budgets are operational data, like billing contacts: finance sets and moves them during a month, and
a new figure should not wait for a four-eyes policy release. So they live here, edited by finance and
admins, not in the reviewed, versioned policy document (which decides money and safety).
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from enum import StrEnum

from sqlalchemy import Column, Numeric, UniqueConstraint
from sqlmodel import Field, SQLModel

import app.core.models  # noqa: F401  (naming convention)


class BudgetScope(StrEnum):
    TENANT = "tenant"
    DEPARTMENT = "department"


class Budget(SQLModel, table=True):
    """One monthly budget: `amount` in `currency` (the policy's when it was set), thresholds in percent."""

    __tablename__ = "budget"
    __table_args__ = (UniqueConstraint("scope", "name", name="uq_budget_scope_name"),)

    id: int | None = Field(default=None, primary_key=True)
    scope: str  # a BudgetScope
    name: str = Field(max_length=200)  # the tenant or the department
    amount: Decimal = Field(sa_column=Column(Numeric(18, 2), nullable=False))
    currency: str = Field(max_length=3)
    thresholds: str  # ascending whole percents, comma-separated: "50,80,100"
    updated_at: datetime
    updated_by: str

    @property
    def threshold_list(self) -> list[int]:
        return [int(t) for t in self.thresholds.split(",") if t]
