"""Read a period's hourly rollups into `RatingHour`s, a day at a time (memory stays flat over a month).

Rating is keyed by pool-hour. Pool names are unique across clusters but for `unpooled`, which each
cluster has of its own: the clusters' rows of one (hour, pool) are read as one pool-hour (GPUs,
capacity, energy per model and usage add up), so the fleet's unpooled GPUs are one figure per hour.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from datetime import datetime, timedelta
from decimal import Decimal
from itertools import groupby

from sqlalchemy import BigInteger, cast, func, select
from sqlmodel import Session

from app.billing.types import RatingHour
from app.core.errors import Conflict, NotFound
from app.core.timeutil import aware
from app.metrics.models import BreachMinuteRollup, BreachShare, PoolHourModel, PoolHourRollup, UsageRollup
from app.metrics.types import BreachMinute, ModelEnergy
from app.policy.document import PolicyDocument
from app.policy.models import PolicyVersion

CHUNK = timedelta(days=1)


def epoch_column(session: Session, column):
    """The column as epoch seconds computed by the database: converting a datetime per row in Python
    costs more than the rest of loading."""
    if session.get_bind().dialect.name == "postgresql":
        return cast(func.extract("epoch", column), BigInteger)
    return cast(func.strftime("%s", column), BigInteger)


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
    *, session: Session, start: datetime, end: datetime, docs: DocumentCache | None = None, cluster: str | None = None,
) -> Iterator[RatingHour]:
    """Yield one RatingHour per stored (hour, pool) with start <= hour < end, in (hour, pool) order.

    `cluster`: that cluster's rows alone (`hour_rates` stores each cluster's pool-hours on their own).
    """
    docs = docs or DocumentCache(session)
    chunk_start = aware(start)
    end = aware(end)
    while chunk_start < end:
        chunk_end = min(chunk_start + CHUNK, end)
        yield from _load_chunk(session, chunk_start, chunk_end, docs, cluster)
        chunk_start = chunk_end


def _load_chunk(session: Session, start: datetime, end: datetime, docs: DocumentCache, cluster: str | None) -> Iterator[RatingHour]:
    conn = session.connection()  # Core rows: ORM result processing would double the cost per row

    def rows_of(table):
        """The chunk's rows of a rollup table (of one cluster, if given)."""
        return (table.hour >= start, table.hour < end, *((table.cluster == cluster,) if cluster is not None else ()))

    models: dict[tuple[int, str], list[ModelEnergy]] = defaultdict(list)
    rows = conn.execute(
        select(
            epoch_column(session, PoolHourModel.hour), PoolHourModel.pool, PoolHourModel.model, PoolHourModel.gpus,
            PoolHourModel.measured_gpus, PoolHourModel.measured_kwh,
        ).where(*rows_of(PoolHourModel))
    ).all()
    for hour, pool, model, gpus, measured_gpus, kwh in rows:
        models[(hour, pool)].append(ModelEnergy(model=model, gpus=gpus, measured_gpus=measured_gpus, measured_kwh=kwh))
    for key, energy in models.items():
        if len({m.model for m in energy}) < len(energy):  # one model in several clusters' rows of the pool-hour
            models[key] = _summed(energy)

    usage = _usage(session, start, end, cluster)

    breaches = breach_minutes(session, start, end, cluster)

    pool_hours = conn.execute(
        select(
            epoch_column(session, PoolHourRollup.hour), PoolHourRollup.pool, PoolHourRollup.gpus,
            PoolHourRollup.capacity_gpu_seconds, PoolHourRollup.policy_version_id, PoolHourRollup.cluster,
        )
        .where(*rows_of(PoolHourRollup))
        .order_by(PoolHourRollup.hour, PoolHourRollup.pool, PoolHourRollup.cluster)
    ).all()
    for key, group in groupby(pool_hours, key=lambda r: (r[0], r[1])):
        parts = list(group)
        hour, pool = key
        versions = {r[4] for r in parts}
        if len(versions) > 1:
            raise Conflict(f"pool {pool!r} hour {hour} was ingested by clusters {', '.join(r[5] for r in parts)} under "
                           f"different policy versions: ingest that hour again (chargeback ingest --cluster ...)")
        version_id = parts[0][4]
        gpus = sum(r[2] for r in parts)
        capacity = sum((r[3] for r in parts), Decimal(0)) if len(parts) > 1 else parts[0][3]
        yield RatingHour(
            hour=hour,
            pool=pool,
            policy_version=version_id,
            policy=docs.get(version_id),
            gpus=gpus,
            capacity_gpu_seconds=capacity,
            models=tuple(sorted(models.get(key, ()), key=lambda m: m.model)),
            usage=(),
            micro_usage=tuple(usage.get(key, ())),
            breaches=tuple(breaches.get(key, ())),
        )


def _summed(energy: list[ModelEnergy]) -> list[ModelEnergy]:
    """Energy rows of one pool-hour with each model once (C is linear in GPUs and kWh, so sums price the same)."""
    out: dict[str, list] = {}
    for m in energy:
        acc = out.setdefault(m.model, [0, 0, Decimal(0)])
        acc[0] += m.gpus
        acc[1] += m.measured_gpus
        acc[2] += m.measured_kwh
    return [ModelEnergy(model=k, gpus=a[0], measured_gpus=a[1], measured_kwh=a[2]) for k, a in out.items()]


_USAGE_SQL = (
    "SELECT extract(epoch from hour)::bigint, pool, tenant, klass, dark, (gpu_seconds * 1000000)::bigint,"
    " CASE WHEN activity_samples <> 0 THEN round(activity_sum * 1e9::float8)::bigint ELSE 0 END, activity_samples"
    " FROM usage_rollup WHERE hour >= %(start)s AND hour < %(end)s"
)


def _usage(session: Session, start: datetime, end: datetime, cluster: str | None) -> dict[tuple[int, str], list[tuple]]:
    """Usage rows as `RatingHour.micro_usage` tuples, grouped by (hour, pool).

    The row tuples the driver returns are the plain data rating takes, so nothing is built per row
    but the tuple itself. On PostgreSQL the binary protocol and integer micro-GPU-seconds (the column
    holds 6 decimals, so the cast is exact) halve the decoding cost of text NUMERIC -> Decimal, and
    the activity is scaled to an integer there too (float8 x 1e9 rounded half-even by rint(), the
    same IEEE product and rounding as Python's `round(activity_sum * 1e9)`). No
    ORDER BY: rating does not depend on the order, and sorting by pool cost the server a third of
    the GROUP BY it is benchmarked against.
    """
    conn = session.connection()
    if conn.dialect.name == "postgresql" and conn.dialect.driver == "psycopg":
        with conn.connection.driver_connection.cursor(binary=True) as cur:
            sql = _USAGE_SQL + (" AND cluster = %(cluster)s" if cluster is not None else "")
            cur.execute(sql, {"start": start, "end": end, "cluster": cluster})
            rows = cur.fetchall()
    else:
        rows = [
            (hour, pool, tenant, klass, dark, int(gs.scaleb(6)), round(activity_sum * 1e9) if samples else 0, samples)
            for hour, pool, tenant, klass, dark, gs, activity_sum, samples in conn.execute(
                select(
                    epoch_column(session, UsageRollup.hour), UsageRollup.pool, UsageRollup.tenant, UsageRollup.klass,
                    UsageRollup.dark, UsageRollup.gpu_seconds, UsageRollup.activity_sum, UsageRollup.activity_samples,
                ).where(UsageRollup.hour >= start, UsageRollup.hour < end,
                        *((UsageRollup.cluster == cluster,) if cluster is not None else ()))
            )
        ]
    usage: dict[tuple[int, str], list[tuple]] = defaultdict(list)
    for row in rows:
        usage[row[0], row[1]].append(row)
    return usage


def breach_minutes(session: Session, start: datetime, end: datetime,
                   cluster: str | None = None) -> dict[tuple[int, str], list[BreachMinute]]:
    """The breach minutes of the hours [start, end) by (hour, pool), each with its co-located shares, sorted."""
    rows = session.connection().execute(
        select(
            BreachMinuteRollup.id, epoch_column(session, BreachMinuteRollup.hour), BreachMinuteRollup.service,
            BreachMinuteRollup.service_tenant, BreachMinuteRollup.pool, epoch_column(session, BreachMinuteRollup.minute_end),
            BreachMinuteRollup.p99_ms, BreachShare.tenant, BreachShare.gpu_seconds,
        )
        .outerjoin(BreachShare, BreachShare.breach_id == BreachMinuteRollup.id)
        .where(BreachMinuteRollup.hour >= start, BreachMinuteRollup.hour < end,
               *((BreachMinuteRollup.cluster == cluster,) if cluster is not None else ()))
    ).all()
    heads: dict[int, tuple] = {}
    shares: dict[int, list[tuple[str, object]]] = defaultdict(list)
    for bid, hour, service, service_tenant, pool, minute_end, p99, tenant, gpu_seconds in rows:
        heads[bid] = (hour, service, service_tenant, pool, minute_end, p99)
        if tenant is not None:
            shares[bid].append((tenant, gpu_seconds))
    out: dict[tuple[int, str], list[BreachMinute]] = defaultdict(list)
    for bid, (hour, service, service_tenant, pool, minute_end, p99) in heads.items():
        out[(hour, pool)].append(
            BreachMinute(service=service, service_tenant=service_tenant, pool=pool, minute_end=minute_end,
                         p99_ms=p99, colocated=tuple(sorted(shares.get(bid, ()))))
        )
    for minutes in out.values():
        minutes.sort(key=lambda b: (b.service, b.minute_end))
    return out
