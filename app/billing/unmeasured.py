"""Unmeasured capacity (SPEC 5.8): what a period's gap hours would have cost, per cluster and pool.

A gap hour is not priced: the source could not say how many GPUs there were, let alone who used them.
The platform absorbs that capacity, and the statement says how much it was: for each run of gap hours of
a cluster, the GPUs each of its pools had in the last hour ingested before the run x the run's hours x
their cost per GPU-hour at the model's default power (nothing was measured), under the policy version of
that last hour. A pool never seen before the run has no GPUs to count: its gap hours are listed at zero.

The estimate is computed when the period is rated and stored with it, so an issued statement never
changes when the gap hours are ingested later.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from fractions import Fraction

from sqlalchemy import func, select
from sqlmodel import Session

from app.billing.loader import DocumentCache
from app.billing.pricing import PriceSheet, cents
from app.billing.rating import round_half_even
from app.core.timeutil import HOUR, aware
from app.metrics.cluster_hours import scope
from app.metrics.ingest import policy_at
from app.metrics.models import IngestHour, IngestStatus, PoolHourModel, PoolHourRollup
from app.metrics.types import ModelEnergy
from app.policy.document import UNPOOLED


@dataclass(frozen=True)
class Unmeasured:
    cluster: str
    pool: str
    gap_hours: int
    gpus: int  # the GPUs last seen before the gap (the largest, over several gap runs)
    gpu_hours: Decimal  # GPUs x gap hours, summed over the runs
    amount: Decimal  # rounded once, half-even, to the currency's cent


@dataclass(frozen=True)
class _Seen:
    """One pool's last ingested hour before a gap run: its GPUs per model and the policy version that priced it."""

    pool: str
    version: int
    models: tuple[tuple[str, int], ...]


def gap_runs(hours: list[datetime]) -> list[tuple[datetime, int]]:
    """Sorted hours as (first hour, length) runs of consecutive hours."""
    runs: list[tuple[datetime, int]] = []
    for hour in sorted(hours):
        if runs and runs[-1][0] + runs[-1][1] * HOUR == hour:
            runs[-1] = (runs[-1][0], runs[-1][1] + 1)
        else:
            runs.append((hour, 1))
    return runs


def price(seen: list[_Seen], hours: int, docs: DocumentCache) -> dict[str, tuple[int, Fraction]]:
    """Pool -> (GPUs, exact cost) of `hours` hours of the pools as seen, at default power (nothing measured)."""
    out = {}
    for s in seen:
        numerator, denominator = PriceSheet.of(docs.get(s.version).pricing).hour_cost(
            ModelEnergy(model=m, gpus=n, measured_gpus=0, measured_kwh=Decimal(0)) for m, n in s.models)
        out[s.pool] = (sum(n for _, n in s.models), Fraction(numerator * hours, denominator))
    return out


def _last_seen(session: Session, cluster: str, before: datetime) -> list[_Seen]:
    """The cluster's pools in its last ingested hour before `before` (none when it never had one)."""
    last = session.execute(
        select(func.max(PoolHourRollup.hour)).where(PoolHourRollup.cluster == cluster, PoolHourRollup.hour < before)
    ).scalar_one()
    if last is None:
        return []
    pools = session.execute(
        select(PoolHourRollup.pool, PoolHourRollup.policy_version_id)
        .where(PoolHourRollup.cluster == cluster, PoolHourRollup.hour == last, PoolHourRollup.pool != UNPOOLED)
    ).all()
    models: dict[str, list[tuple[str, int]]] = defaultdict(list)
    for pool, model, gpus in session.execute(
        select(PoolHourModel.pool, PoolHourModel.model, PoolHourModel.gpus)
        .where(PoolHourModel.cluster == cluster, PoolHourModel.hour == last).order_by(PoolHourModel.model)
    ):
        models[pool].append((model, gpus))
    return [_Seen(pool, version, tuple(models[pool])) for pool, version in sorted(pools)]


def unmeasured_capacity(*, session: Session, start: datetime, end: datetime, docs: DocumentCache,
                        currency: str) -> list[Unmeasured]:
    """Per (cluster, pool) the period's gap hours and the capacity they leave unmeasured, in (cluster, pool) order."""
    gaps: dict[str, list[datetime]] = defaultdict(list)
    for cluster, hour in session.execute(
        select(IngestHour.cluster, IngestHour.hour).where(
            IngestHour.hour >= aware(start), IngestHour.hour < aware(end), IngestHour.status == IngestStatus.GAP,
            IngestHour.cluster.in_(scope()))
    ):
        gaps[cluster].append(aware(hour))
    totals: dict[tuple[str, str], list] = {}
    for cluster in sorted(gaps):
        for first, hours in gap_runs(gaps[cluster]):
            seen = _last_seen(session, cluster, first)
            priced = price(seen, hours, docs)
            found = policy_at(session=session, hour=first)
            named = [p.name for p in found[1].pools if p.cluster == cluster] if found else []
            for pool in dict.fromkeys([*priced, *named]):
                gpus, cost = priced.get(pool, (0, Fraction(0)))
                total = totals.setdefault((cluster, pool), [0, 0, 0, Fraction(0)])
                total[0] += hours
                total[1] = max(total[1], gpus)
                total[2] += gpus * hours
                total[3] += cost
    cent = cents(currency)
    return [Unmeasured(cluster=c, pool=p, gap_hours=h, gpus=g, gpu_hours=Decimal(gh),
                       amount=round_half_even(cost, cent))
            for (c, p), (h, g, gh, cost) in sorted(totals.items())]
