"""Fleet cost C of any month: the rated period's stored pool costs, else the rollups priced by rating's own pricing."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from enum import StrEnum

from sqlalchemy import func, select
from sqlmodel import Session

from app.billing.loader import DocumentCache
from app.billing.models import PeriodStatus, PoolCostRecord
from app.billing.period import get_period, month_parts
from app.billing.pricing import PriceSheet
from app.billing.rating import pool_costs
from app.core.errors import NotFound
from app.core.timeutil import SECONDS_PER_HOUR
from app.metrics.cluster_hours import pool_clusters
from app.metrics.date_ranges import DateRange
from app.metrics.models import PoolHourModel, PoolHourRollup, UsageRollup
from app.metrics.types import ModelEnergy

DEFAULT_CURRENCY = "USD"


class CostSource(StrEnum):
    """Where a month's fleet cost C came from."""

    RATED = "rated"  # the rated period's stored pool costs
    COMPUTED = "computed"  # the rollups priced, not rated yet
    UNPRICED = "unpriced"  # a GPU model without a price (or an unreadable version): no figure
    NONE = "none"  # nothing ingested


@dataclass(frozen=True)
class FleetCost:
    """C over a month's hours; `source` says where it came from."""

    cost: Decimal | None  # None: nothing ingested, or a GPU model without a price (rating would refuse too)
    source: CostSource
    currency: str = DEFAULT_CURRENCY


def fleet_cost(*, session: Session, month: str, start: datetime, end: datetime, docs: DocumentCache,
               whole_month: bool = True, cluster: str | None = None) -> FleetCost:
    """C of `month` over [start, end): what rating stored, else what rating would price (same pools, rounding).

    `whole_month=False` (a range that covers part of the month): always priced from the hours in it, since the
    rated period's stored pool costs are the whole month's. `cluster`: C of that cluster's pools only.
    """
    period = get_period(session=session, month=month) if whole_month else None
    if period is not None and period.status != PeriodStatus.OPEN:
        where = [PoolCostRecord.period_id == period.id]
        if cluster is not None:  # pool names are unique across clusters
            pools = [p for p, c in pool_clusters(session=session, start=start, end=end).items() if c == cluster]
            where.append(PoolCostRecord.pool.in_(pools))
        total = session.execute(select(func.sum(PoolCostRecord.cost)).where(*where)).scalar_one()
        return FleetCost(Decimal(str(total or 0)), CostSource.RATED, period.currency)
    rows = session.execute(
        select(PoolHourModel.hour, PoolHourModel.pool, PoolHourRollup.policy_version_id, PoolHourModel.model,
               PoolHourModel.gpus, PoolHourModel.measured_gpus, PoolHourModel.measured_kwh)
        .join(PoolHourRollup, (PoolHourRollup.hour == PoolHourModel.hour) & (PoolHourRollup.cluster == PoolHourModel.cluster)
              & (PoolHourRollup.pool == PoolHourModel.pool))
        .where(PoolHourModel.hour >= start, PoolHourModel.hour < end, PoolHourRollup.gpus > 0,
               *([] if cluster is None else [PoolHourRollup.cluster == cluster]))
    ).all()
    if not rows:
        return FleetCost(None, CostSource.NONE)
    hours: dict[tuple, list[ModelEnergy]] = defaultdict(list)
    for hour, pool, version_id, model, gpus, measured, kwh in rows:
        hours[(hour, pool, version_id)].append(
            ModelEnergy(model=model, gpus=gpus, measured_gpus=measured, measured_kwh=Decimal(str(kwh or 0)))
        )
    sheets: dict[int, PriceSheet] = {}
    priced = []
    currency = DEFAULT_CURRENCY
    for (_hour, pool, version_id), models in sorted(hours.items()):
        try:
            doc = docs.get(version_id)
        except (ValueError, NotFound):  # an unreadable version: rating reports it; nothing to sign here
            return FleetCost(None, CostSource.UNPRICED)
        if doc.pool(pool) is None:
            continue  # GPUs on nodes no pool names: shown, never priced (SPEC section 4)
        sheet = sheets.get(version_id) or sheets.setdefault(version_id, PriceSheet.of(doc.pricing))
        if any(m.model not in sheet.fixed for m in models):
            return FleetCost(None, CostSource.UNPRICED, doc.pricing.currency)  # rating refuses the month: so does C
        currency = doc.pricing.currency
        priced.append((pool, sheet, sorted(models, key=lambda m: m.model)))
    return FleetCost(sum(pool_costs(priced, currency=currency).values(), Decimal(0)), CostSource.COMPUTED, currency)


@dataclass
class MonthCost:
    """A month's fleet cost C beside its utilisation, for the overview."""

    month: str
    cost: Decimal | None  # C over the month's ingested hours
    source: CostSource
    capacity_hours: Decimal
    used_hours: Decimal
    currency: str = DEFAULT_CURRENCY

    @property
    def utilisation(self) -> Decimal | None:
        return None if not self.capacity_hours else self.used_hours / self.capacity_hours


def month_cost(*, session: Session, month: str, start: datetime, end: datetime, docs: DocumentCache,
               whole_month: bool = True, cluster: str | None = None) -> MonthCost:
    """Fleet cost C (the one definition above) and utilisation of one month (or the part [start, end) of it),
    of the fleet or of one cluster."""
    of_pool = [] if cluster is None else [PoolHourRollup.cluster == cluster]
    of_usage = [] if cluster is None else [UsageRollup.cluster == cluster]
    capacity = session.execute(
        select(func.sum(PoolHourRollup.capacity_gpu_seconds)).where(PoolHourRollup.hour >= start, PoolHourRollup.hour < end,
                                                                    *of_pool)
    ).scalar_one()
    used = session.execute(
        select(func.sum(UsageRollup.gpu_seconds)).where(UsageRollup.hour >= start, UsageRollup.hour < end, *of_usage)
    ).scalar_one()
    c = fleet_cost(session=session, month=month, start=start, end=end, docs=docs, whole_month=whole_month,
                   cluster=cluster)
    return MonthCost(month, c.cost, c.source, Decimal(capacity or 0) / SECONDS_PER_HOUR,
                     Decimal(used or 0) / SECONDS_PER_HOUR, c.currency)


def range_cost(*, session: Session, window: DateRange, label: str, docs: DocumentCache,
               cluster: str | None = None) -> MonthCost:
    """Fleet cost C and utilisation over a range of days: each whole month as rated (or priced), each part of a
    month priced from its own hours; no figure when any part has none that can be signed (unpriced model)."""
    parts = [month_cost(session=session, month=p.month, start=p.start, end=p.end, docs=docs, whole_month=p.whole,
                        cluster=cluster)
             for p in month_parts(window)]
    capacity = sum((p.capacity_hours for p in parts), Decimal(0))
    used = sum((p.used_hours for p in parts), Decimal(0))
    if any(p.source == CostSource.UNPRICED for p in parts):
        return MonthCost(label, None, CostSource.UNPRICED, capacity, used, parts[0].currency)
    priced = [p for p in parts if p.cost is not None]
    if not priced:
        return MonthCost(label, None, CostSource.NONE, capacity, used)
    source = CostSource.RATED if all(p.source == CostSource.RATED for p in priced) else CostSource.COMPUTED
    return MonthCost(label, sum((p.cost for p in priced), Decimal(0)), source, capacity, used, priced[0].currency)
