"""Fleet cost and utilisation of a month, for the overview (the breach read side is app/metrics/breaches_read.py)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from sqlalchemy import func
from sqlmodel import Session, select

from app.billing.models import BillingPeriod, PeriodStatus, PoolCostRecord
from app.billing.pricing import PriceSheet
from app.core.errors import NotFound
from app.metrics.models import PoolHourModel, PoolHourRollup, UsageRollup
from app.metrics.types import ModelEnergy

ZERO = Decimal(0)


@dataclass
class MonthCost:
    month: str
    cost: Decimal | None  # C over the month's ingested hours
    source: str  # "rated" (stored pool costs) | "computed" (pricing over pool_hour_model) | "none"
    capacity_hours: Decimal
    used_hours: Decimal
    currency: str = "USD"

    @property
    def utilisation(self) -> Decimal | None:
        return None if not self.capacity_hours else self.used_hours / self.capacity_hours


def month_cost(*, session: Session, month: str, start: datetime, end: datetime, docs) -> MonthCost:
    """Fleet cost C and utilisation of one month: the rated period's pool costs, else priced from the rollups."""
    capacity = session.exec(
        select(func.sum(PoolHourRollup.capacity_gpu_seconds)).where(PoolHourRollup.hour >= start, PoolHourRollup.hour < end)
    ).one()
    used = session.exec(
        select(func.sum(UsageRollup.gpu_seconds)).where(UsageRollup.hour >= start, UsageRollup.hour < end)
    ).one()
    cap_h, used_h = Decimal(capacity or 0) / 3600, Decimal(used or 0) / 3600
    period = session.exec(select(BillingPeriod).where(BillingPeriod.month == month)).first()
    if period is not None and period.status != PeriodStatus.OPEN:
        total = session.exec(select(func.sum(PoolCostRecord.cost)).where(PoolCostRecord.period_id == period.id)).one()
        return MonthCost(month, Decimal(total or 0), "rated", cap_h, used_h, period.currency)
    rows = session.exec(
        select(PoolHourModel.model, PoolHourRollup.policy_version_id, func.sum(PoolHourModel.gpus),
               func.sum(PoolHourModel.measured_gpus), func.sum(PoolHourModel.measured_kwh))
        .join(PoolHourRollup, (PoolHourRollup.hour == PoolHourModel.hour) & (PoolHourRollup.pool == PoolHourModel.pool))
        .where(PoolHourModel.hour >= start, PoolHourModel.hour < end)
        .group_by(PoolHourModel.model, PoolHourRollup.policy_version_id)
    ).all()
    if not rows:
        return MonthCost(month, None, "none", cap_h, used_h)
    # Cost is linear in GPU-hours and kWh, so summing per (model, version) before pricing is exact.
    total = ZERO
    currency = "USD"
    sheets: dict[int, PriceSheet] = {}
    for model, version_id, gpus, measured, kwh in rows:
        try:
            doc = docs.get(version_id)
        except (ValueError, NotFound):  # an unreadable version: rating reports it; the overview shows what it can
            continue
        currency = doc.pricing.currency
        sheet = sheets.get(version_id) or sheets.setdefault(version_id, PriceSheet.of(doc.pricing))
        if model not in sheet.fixed:
            continue  # rating reports the missing price; the overview shows what it can
        total += sheet.model_cost(ModelEnergy(model=model, gpus=int(gpus), measured_gpus=int(measured),
                                              measured_kwh=Decimal(kwh or 0)))
    return MonthCost(month, total, "computed", cap_h, used_h, currency)
