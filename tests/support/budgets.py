"""Builders for budget and forecast tests: the SPEC example hour in every hour of chosen months, or up to now.

Every hour is the SPEC section 5 worked example (2 A100s at 1.30 per GPU-hour): search pays 0.78 reserved fee
an hour, vision 0.91 busy + 0.39 dark = 1.30, etl 0.13. Since every hour is alike, a month's forecast is exactly
that many hours of them: a figure checkable by hand.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

from sqlmodel import Session

from app.core.timeutil import floor_hour, utcnow
from app.policy.document import PolicyDocument
from tests.support.billing import fill_month, month_hours, store_policy

PER_HOUR = {"search": Decimal("0.78"), "vision": Decimal("1.30"), "etl": Decimal("0.13")}


def steady(session: Session, months=("2026-09", "2026-10")) -> None:
    """The policy (in effect from August 2026) and every hour of `months`."""
    version = store_policy(session, effective_from=datetime(2026, 8, 1, tzinfo=UTC))
    for month in months:
        fill_month(session, month, version.id)


def seed_to_now(session: Session, doc: PolicyDocument | None = None) -> tuple[str, int, int]:
    """Every hour of last month and of this month before now (pages use the real clock), under `doc` (default: the
    SPEC example); returns (this month, hours known, hours in the month)."""
    now = floor_hour(utcnow())
    this = f"{now:%Y-%m}"
    last = f"{(now.replace(day=1) - timedelta(days=1)):%Y-%m}"
    version = store_policy(session, doc, effective_from=now.replace(day=1) - timedelta(days=40))
    fill_month(session, last, version.id)
    hours = month_hours(this)
    known = sum(1 for h in hours if h < now)
    fill_month(session, this, version.id, skip={i for i, h in enumerate(hours) if h >= now})
    return this, known, len(hours)
