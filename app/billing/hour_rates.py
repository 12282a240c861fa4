"""Each pool-hour rated once: its rate and per-hour amounts stored, so a month's rating is sums (issue 15).

What `rating.Rater` computes per pool-hour (C, the rates, idle capacity, dark-time use, the reserve left
unused, each inference tenant's use above its cover) depends only on that pool-hour's rollup rows and
its policy version, which never changes once stored. So it is computed once, by the reference's own
`Rater.price`, `hour_use` and `hour_amounts`, and stored in `pool_hour_rate` / `inference_hour_rate` / `sla_hour_rate`
(exact integers: numerators over a stored denominator `den`, migration 0028). Triggers (migration 0024) delete a
pool-hour's stored rows whenever its rollup rows are written, by ingestion or anyone else; `store_missing` then
stores them again:

- the worker's `hour_rates_task` after each ingestion round (the hours just ingested), and
- `rating_sql.rate_stored` for whatever of its period is still missing (history from before 0024, rows
  written by hand), in the rating's own transaction.

A pool-hour the reference would refuse (a model without a price, a pool the policy does not know, a
bad usage row) is not stored: the rating that needs it finds it missing and lets the reference say why.

Concurrency: on PostgreSQL the pool-hour rows being rated are read `FOR SHARE`, so a re-ingestion of
the same hour waits for the stored rates to commit, then deletes them through its triggers; on SQLite
one writer at a time does the same. Workers fill under one advisory lock (the others skip the round),
and every insert is `ON CONFLICT DO NOTHING` against a rating doing the same.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from sqlalchemy import and_, func, select
from sqlalchemy.dialects import sqlite
from sqlalchemy.engine import Engine
from sqlmodel import Session

from app.billing.loader import DocumentCache, load_hours
from app.billing.models import InferenceHourRate, PoolHourRate, RateKind, SlaHourRate, SlaKind
from app.billing.rating import EXACT_DIGITS, UNPOOLED_HOUR, Rater, rating_context
from app.core.db import is_postgres, unit_of_work
from app.core.errors import Invalid
from app.core.timeutil import HOUR, aware, epoch, from_epoch, utcnow
from app.metrics.models import PoolHourRollup

ADVISORY_LOCK = 0x6362_7261_7465  # "cbrate": one filling worker at a time
TASK_WINDOW = timedelta(days=62)
BATCH = 2_000  # pool-hours per insert
PARAMETERS = 30_000  # bound parameters per statement (SQLite allows 32,766, PostgreSQL 65,535)  # the worker's task looks this far back; ratings fill anything older


@dataclass(frozen=True)
class Stored:
    """What one `store_missing` did: pool-hours stored, and those the reference would refuse (left missing)."""

    stored: int = 0
    refused: int = 0


def missing(session: Session, start: datetime | None = None, end: datetime | None = None) -> dict[str, list[datetime]]:
    """Per cluster, the hours in [start, end) with a pool-hour that has no stored rate, in order."""
    p, r = PoolHourRollup, PoolHourRate
    q = (select(p.cluster, p.hour).distinct()
         .outerjoin(r, and_(r.hour == p.hour, r.cluster == p.cluster, r.pool == p.pool))
         .where(r.hour.is_(None)))
    if start is not None:
        q = q.where(p.hour >= start)
    if end is not None:
        q = q.where(p.hour < end)
    out: dict[str, list[datetime]] = defaultdict(list)
    for cluster, hour in session.connection().execute(q.order_by(p.cluster, p.hour)):
        out[cluster].append(aware(hour))
    return out


def store_missing(session: Session, *, start: datetime | None = None, end: datetime | None = None,
                  docs: DocumentCache | None = None) -> Stored:
    """Rate and store every pool-hour in [start, end) (all of history by default) that has no stored rate.

    Flushes only: the caller commits (or rolls back, and the rates with it)."""
    docs = docs or DocumentCache(session)
    stored = refused = 0
    for cluster, hours in missing(session, start, end).items():
        for first, last in _runs(hours):
            s, r = _store_run(session, docs, cluster, first, last + HOUR)
            stored, refused = stored + s, refused + r
    return Stored(stored, refused)


def _runs(hours: list[datetime]) -> list[tuple[datetime, datetime]]:
    """Consecutive hours as (first, last) runs."""
    runs: list[list[datetime]] = []
    for hour in hours:
        if runs and hour == runs[-1][1] + HOUR:
            runs[-1][1] = hour
        else:
            runs.append([hour, hour])
    return [(a, b) for a, b in runs]


def _store_run(session: Session, docs: DocumentCache, cluster: str, start: datetime, end: datetime) -> tuple[int, int]:
    conn = session.connection()
    p = PoolHourRollup
    if is_postgres(session):  # a re-ingestion of these hours waits until their rates are committed
        conn.execute(select(p.hour).where(p.cluster == cluster, p.hour >= start, p.hour < end).with_for_update(read=True))
    have = {(epoch(aware(h)), pool) for h, pool in conn.execute(
        select(PoolHourRate.hour, PoolHourRate.pool).where(PoolHourRate.cluster == cluster, PoolHourRate.hour >= start,
                                                           PoolHourRate.hour < end))}
    rates, overage, sla, stored, refused = [], [], [], 0, 0
    rater = Rater(epoch(start), epoch(end))  # one per run: each policy version is read once
    with rating_context():
        for h in load_hours(session=session, start=start, end=end, docs=docs, cluster=cluster):
            if (h.hour, h.pool) in have:
                continue
            rated = _rate_hour(rater, h, cluster)
            if rated is None:
                refused += 1
                continue
            rates.append(rated[0])
            overage.extend(rated[1])
            sla.extend(rated[2])
            if len(rates) >= BATCH:
                stored += _flush(session, rates, overage, sla)
    return stored + _flush(session, rates, overage, sla), refused


def _flush(session: Session, rates: list[dict], overage: list[dict], sla: list[dict]) -> int:
    """Insert and empty the batch; returns the pool-hours it held."""
    n = len(rates)
    for model, rows in ((PoolHourRate, rates), (InferenceHourRate, overage), (SlaHourRate, sla)):
        _insert(session, model, rows)
        rows.clear()
    return n


def _rate_hour(rater: Rater, h, cluster: str) -> tuple[dict, list[dict], list[dict]] | None:
    """One cluster's pool-hour as the reference prices it: its `pool_hour_rate` row, `inference_hour_rate` and
    `sla_hour_rate` rows, or None when the reference would refuse it."""
    try:
        return _rated(rater, h, cluster)
    except Invalid:
        return None


def _rated(rater: Rater, h, cluster: str) -> tuple[dict, list[dict], list[dict]] | None:
    key = {"hour": from_epoch(h.hour), "cluster": cluster, "pool": h.pool, "policy_version_id": h.policy_version}
    row = {**key, "gpus": h.gpus, "capacity_gpu_seconds": h.capacity_gpu_seconds}
    p = rater.price(h)
    if p is None:
        return ({**row, "kind": RateKind.EMPTY.value}, [], []) if h.gpus == 0 else None  # else a model without a price
    if p is UNPOOLED_HOUR:
        rater.check_unpooled(h)
        return {**row, "kind": RateKind.UNPOOLED.value}, [], []
    a = rater.hour_amounts(p, *rater.hour_use(p))
    b = rater.hour_breaches(p.version, h.hour, h.pool, h.breaches)
    rate, den = p.rate, p.den
    row.update(kind=RateKind.PRICED.value, cost=p.cost, rate=rate, dark_rate=p.dark_rate, den=den,
               idle=a.idle, idle_amount=a.idle * rate, dark=a.dark, dark_amount=a.dark * rate,
               unused=a.unused, unused_amount=a.unused * rate)
    over = [{**key, "tenant": tenant, "over": o, "amount": o * rate, "den": den} for tenant, o in a.overage]
    sla = [{**key, "kind": SlaKind.PENALTY.value, "service": service, "account": account, "klass": klass, "minute_end": 0,
            "quantity": _to_exact(q), "amount": amount.numerator, "den": amount.denominator}
           for account, klass, service, q, amount in b.penalties]
    sla += [{**key, "kind": SlaKind.CREDIT.value, "service": service, "account": tenant, "klass": "", "minute_end": 0,
             "quantity": minutes, "amount": 0, "den": 1} for service, tenant, minutes in b.credits]
    sla += [{**key, "kind": SlaKind.UNATTRIBUTED.value, "service": u.service, "account": "", "klass": "",
             "minute_end": u.minute_end, "quantity": 0, "amount": _to_exact(u.penalty), "den": 1} for u in b.unattributed]
    return row, over, sla


def _to_exact(d: Decimal) -> int:
    """A quantity (breach minutes' shares) or a policy's penalty exact at 1e-20 as an integer in 1e-20 (refuses one
    finer: it would not be stored exactly)."""
    scaled = d.scaleb(EXACT_DIGITS)
    if scaled != scaled.to_integral_value():
        raise Invalid(detail=f"an SLA amount finer than 1e-20: {d}")
    return int(scaled)


def _insert(session: Session, model, rows: list[dict]) -> None:
    """Insert rows, leaving any that another transaction stored meanwhile (the same figures, from the same
    inputs). PostgreSQL: COPY into a temporary table, then one INSERT ... SELECT ... ON CONFLICT DO NOTHING
    (an executemany costs ~80 us a row, a pool-hour's rows then cost more than pricing it)."""
    if not rows:
        return
    columns = [c.name for c in model.__table__.columns]  # a row leaves out what its kind does not have
    if not is_postgres(session):
        session.execute(sqlite.insert(model).on_conflict_do_nothing(), [{c: row.get(c) for c in columns} for row in rows])
        return
    table, names = model.__tablename__, ", ".join(columns)
    conn = session.connection()
    conn.exec_driver_sql(f"CREATE TEMPORARY TABLE IF NOT EXISTS new_{table} (LIKE {table}) ON COMMIT DROP")
    cursor = conn.connection.driver_connection.cursor()
    with cursor, cursor.copy(f"COPY new_{table} ({names}) FROM STDIN") as copy:
        for row in rows:
            copy.write_row([row.get(c) for c in columns])
    conn.exec_driver_sql(f"INSERT INTO {table} ({names}) SELECT {names} FROM new_{table} ON CONFLICT DO NOTHING")
    conn.exec_driver_sql(f"TRUNCATE new_{table}")


def hour_rates_task(engine: Engine, clock: Callable[[], datetime] = utcnow) -> Stored:
    """The worker task: store the rates of the pool-hours ingested (or re-ingested) lately, by one worker at a
    time (on PostgreSQL the others skip the round: the rates they would store are being stored)."""
    with unit_of_work(engine) as session:
        if is_postgres(session) and not session.execute(select(func.pg_try_advisory_xact_lock(ADVISORY_LOCK))).scalar():
            return Stored()
        return store_missing(session, start=aware(clock()) - TASK_WINDOW)
