"""Read a period's hourly rollups into `RatingHour`s, a day at a time (memory stays flat over a month)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from datetime import datetime, timedelta

from sqlalchemy import select
from sqlmodel import Session

from app.billing.types import RatingHour
from app.core.errors import NotFound
from app.core.timeutil import aware, epoch
from app.metrics.models import BreachMinuteRollup, BreachShare, PoolHourModel, PoolHourRollup, UsageRollup
from app.metrics.types import BreachMinute, ModelEnergy, UsageRow
from app.policy.document import PolicyDocument
from app.policy.models import PolicyVersion

CHUNK = timedelta(days=1)


class DocumentCache:
    """Policy documents by version id, parsed once per rating run."""

    def __init__(self, session: Session):
        self.session = session
        self.docs: dict[int, PolicyDocument] = {}

    def get(self, version_id: int) -> PolicyDocument:
        doc = self.docs.get(version_id)
        if doc is None:
            from app.policy.service import load_document

            version = self.session.get(PolicyVersion, version_id)
            if version is None:
                raise NotFound(f"policy version {version_id} referenced by a rollup does not exist")
            doc = self.docs[version_id] = load_document(version)
        return doc


def load_hours(
    *, session: Session, start: datetime, end: datetime, docs: DocumentCache | None = None
) -> Iterator[RatingHour]:
    """Yield one RatingHour per stored (hour, pool) with start <= hour < end, in (hour, pool) order."""
    docs = docs or DocumentCache(session)
    chunk_start = aware(start)
    end = aware(end)
    while chunk_start < end:
        chunk_end = min(chunk_start + CHUNK, end)
        yield from _load_chunk(session, chunk_start, chunk_end, docs)
        chunk_start = chunk_end


def _load_chunk(session: Session, start: datetime, end: datetime, docs: DocumentCache) -> Iterator[RatingHour]:
    models: dict[tuple[int, str], list[ModelEnergy]] = defaultdict(list)
    rows = session.execute(
        select(
            PoolHourModel.hour, PoolHourModel.pool, PoolHourModel.model, PoolHourModel.gpus,
            PoolHourModel.measured_gpus, PoolHourModel.measured_kwh,
        ).where(PoolHourModel.hour >= start, PoolHourModel.hour < end)
    )
    for hour, pool, model, gpus, measured_gpus, kwh in rows:
        models[(epoch(hour), pool)].append(ModelEnergy(model=model, gpus=gpus, measured_gpus=measured_gpus, measured_kwh=kwh))

    usage: dict[tuple[int, str], list[UsageRow]] = defaultdict(list)
    rows = session.execute(
        select(
            UsageRollup.hour, UsageRollup.pool, UsageRollup.tenant, UsageRollup.klass, UsageRollup.dark,
            UsageRollup.gpu_seconds, UsageRollup.activity_sum, UsageRollup.activity_samples,
        ).where(UsageRollup.hour >= start, UsageRollup.hour < end)
    )
    for hour, pool, tenant, klass, dark, gpu_seconds, activity_sum, samples in rows:
        usage[(epoch(hour), pool)].append(
            UsageRow(pool=pool, tenant=tenant, klass=klass, dark=dark, gpu_seconds=gpu_seconds,
                     activity_sum=activity_sum, activity_samples=samples)
        )

    breaches = _breaches(session, start, end)

    pool_hours = session.execute(
        select(
            PoolHourRollup.hour, PoolHourRollup.pool, PoolHourRollup.gpus,
            PoolHourRollup.capacity_gpu_seconds, PoolHourRollup.policy_version_id,
        )
        .where(PoolHourRollup.hour >= start, PoolHourRollup.hour < end)
        .order_by(PoolHourRollup.hour, PoolHourRollup.pool)
    ).all()
    for hour, pool, gpus, capacity, version_id in pool_hours:
        key = (epoch(hour), pool)
        yield RatingHour(
            hour=key[0],
            pool=pool,
            policy_version=version_id,
            policy=docs.get(version_id),
            gpus=gpus,
            capacity_gpu_seconds=capacity,
            models=tuple(sorted(models.get(key, ()), key=lambda m: m.model)),
            usage=tuple(sorted(usage.get(key, ()), key=lambda u: (u.tenant, u.klass, u.dark))),
            breaches=tuple(breaches.get(key, ())),
        )


def _breaches(session: Session, start: datetime, end: datetime) -> dict[tuple[int, str], list[BreachMinute]]:
    rows = session.execute(
        select(
            BreachMinuteRollup.id, BreachMinuteRollup.hour, BreachMinuteRollup.service,
            BreachMinuteRollup.service_tenant, BreachMinuteRollup.pool, BreachMinuteRollup.minute_end,
            BreachMinuteRollup.p99_ms, BreachShare.tenant, BreachShare.gpu_seconds,
        )
        .outerjoin(BreachShare, BreachShare.breach_id == BreachMinuteRollup.id)
        .where(BreachMinuteRollup.hour >= start, BreachMinuteRollup.hour < end)
    )
    heads: dict[int, tuple] = {}
    shares: dict[int, list[tuple[str, object]]] = defaultdict(list)
    for bid, hour, service, service_tenant, pool, minute_end, p99, tenant, gpu_seconds in rows:
        heads[bid] = (hour, service, service_tenant, pool, minute_end, p99)
        if tenant is not None:
            shares[bid].append((tenant, gpu_seconds))
    out: dict[tuple[int, str], list[BreachMinute]] = defaultdict(list)
    for bid, (hour, service, service_tenant, pool, minute_end, p99) in heads.items():
        out[(epoch(hour), pool)].append(
            BreachMinute(service=service, service_tenant=service_tenant, pool=pool, minute_end=epoch(minute_end),
                         p99_ms=p99, colocated=tuple(sorted(shares.get(bid, ()))))
        )
    for minutes in out.values():
        minutes.sort(key=lambda b: (b.service, b.minute_end))
    return out
