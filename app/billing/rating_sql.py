"""Rate a stored period by summing its stored pool-hour rates (issue 15: rating at the database's speed).

`rating.rate_period` stays the reference. Everything it computes per pool-hour (C, the rates, idle
capacity, dark-time use, the reserve left unused, each inference tenant's use above its cover) is
stored once per pool-hour by `hour_rates` (the worker, after ingestion; here, for whatever of the
period is missing), computed by the reference's own `Rater` methods. Rating a period is then sums:

1. per (pool, version, capacity, rate denominator) over `pool_hour_rate`: hours, C, idle, dark-time use and
   the unused reserve with their amounts and spans, folded by `Rater.fold_hours` / `fold_hour_amounts` (lines 1, 5);
2. per (pool, version, inference tenant, denominator) over `inference_hour_rate`: line 2 (`Rater.fold_overage`);
3. one GROUP BY of the usage rows joined to their pool-hour's rates, per segment row and rate denominator:
   lines 3 and 6 and the usage figures (`Rater.fold_usage`), exact (NUMERIC on PostgreSQL; on SQLite, Python
   integer aggregates registered on the connection);
4. the GPUs on nodes no pool names, per hour; and over `sla_hour_rate` the breach minutes' penalty
   splits, credits and unattributed minutes (line 4, `Rater.fold_breaches`).

Every stored amount is an integer numerator over a stored denominator and is summed per denominator, so
the sums are exact rationals, as the reference's; a segment's hours of one capacity share a denominator,
so grouping by it adds few groups. `Rater.finish` then rounds each line once, as for the reference. tests/billing/test_rating_sql.py proves the result
equal to `rate_period` over the same rollups on both databases. Anything the reference would refuse
(a pool-hour it cannot price, a bad usage row or breach minute, one pool-hour in two clusters'
rows, a service credited to two tenants) makes this rate the
period again by the reference path, which raises its own error, named the same way.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from decimal import Context, Decimal, Inexact
from fractions import Fraction

from sqlalchemy import BigInteger, and_, case, cast, func, literal_column, or_, select
from sqlalchemy.engine import Connection
from sqlmodel import Session

from app.billing.hour_rates import store_missing
from app.billing.loader import DocumentCache, epoch_column, load_hours
from app.billing.models import InferenceHourRate, PoolHourRate, RateKind, SlaHourRate, SlaKind
from app.billing.rating import CLASSES, HourBreaches, Rater, from_exact, rate_period, rating_context
from app.billing.rating_sums import Rational, UsageSums
from app.billing.types import RatingResult, UnattributedBreach
from app.core.db import is_postgres
from app.core.errors import Invalid
from app.metrics.models import UsageRollup


class _Refused(Exception):
    """The stored rollups hold something the reference refuses, or rates differently: let it say why."""


def rate_stored(*, session: Session, start: datetime, end: datetime, docs: DocumentCache | None = None) -> RatingResult:
    """`rate_period` over the stored hours [start, end), equal to it, summed from the stored pool-hour rates."""
    docs = docs or DocumentCache(session)
    span = {"period_start": int(start.timestamp()), "period_end": int(end.timestamp())}
    try:
        with rating_context():
            return _rate(session, start, end, docs, Rater(**span))
    except (Invalid, _Refused):
        return rate_period(load_hours(session=session, start=start, end=end, docs=docs), **span)


def _rate(session: Session, start: datetime, end: datetime, docs: DocumentCache, rater: Rater) -> RatingResult:
    if store_missing(session, start=start, end=end, docs=docs).refused:
        raise _Refused  # a pool-hour the reference cannot price: it names every one
    conn = session.connection()
    x = _Exact(is_postgres(session))
    if not x.pg:
        _register_functions(conn)
    r = PoolHourRate
    period = (r.hour >= start, r.hour < end)
    for (version,) in conn.execute(select(r.policy_version_id).distinct().where(*period, r.kind != RateKind.EMPTY)):
        rater.version(version, docs.get(version))  # one currency for the period
    # Clusters' rows of one (hour, pool) are one pool-hour to the reference: only `unpooled` may have several,
    # under one version (the loader refuses two), and none without GPUs beside some with.
    a, b = PoolHourRate.__table__.alias("a"), PoolHourRate.__table__.alias("b")
    several = (select(a.c.hour).select_from(a.join(b, and_(b.c.hour == a.c.hour, b.c.pool == a.c.pool, b.c.cluster > a.c.cluster)))
               .where(a.c.hour >= start, a.c.hour < end, or_(a.c.kind != b.c.kind, a.c.policy_version_id != b.c.policy_version_id,
                                                             a.c.kind == RateKind.PRICED)))
    if conn.execute(several.limit(1)).first() is not None:
        raise _Refused
    with _settings(conn, x.pg):
        _hours(conn, x, session, period, rater)
        _overage(conn, x, session, start, end, rater)
        _unpooled(conn, session, period, rater)
        _usage(conn, x, session, start, end, rater)
        _breaches(conn, x, session, start, end, rater)
    return rater.finish()


@contextmanager
def _settings(conn: Connection, pg: bool) -> Iterator[None]:
    """PostgreSQL settings for the sums, put back afterwards: no JIT (compiling the usage sum's expressions
    costs more than it saves, every run); hash joins (with the stored rates' statistics not yet gathered
    the planner probes the usage index once per pool-hour, serially); and hash aggregates, which then run
    in each parallel worker. The planner estimates the month's groups as the product of its columns'
    distinct counts (120,000 for 1,000 real ones) and so sorts 744,000 rows (1.5-1.8 s, spilling to disk at
    the default 4 MB) or, given the memory, hashes them in one process (1.4-1.9 s); partial hash aggregates
    in the parallel workers took 0.63 s (EXPLAIN ANALYZE, benchmarks/RESULTS.md)."""
    values = {"jit": "off", "enable_nestloop": "off", "enable_sort": "off", "work_mem": "16MB"} if pg else {}
    before = {name: conn.exec_driver_sql(f"SHOW {name}").scalar() for name in values}
    for name, value in values.items():
        conn.execute(select(func.set_config(name, value, True)))
    try:
        yield
    finally:
        for name, value in before.items():
            conn.execute(select(func.set_config(name, value, True)))


def _hours(conn: Connection, x: _Exact, session: Session, period, rater: Rater) -> None:
    """Lines 1 and 5: the priced pool-hours per (pool, version, capacity)."""
    r = PoolHourRate
    at = epoch_column(session, r.hour)

    def part(quantity, amount):
        """A line-5 part: its quantity and amount summed, and the first and last hour that had any."""
        some = quantity != 0
        return (x.sum(quantity), x.sum(amount), func.min(case((some, at))), func.max(case((some, at))))

    q = (select(r.pool, r.policy_version_id, r.capacity_gpu_seconds, r.den, func.count(), x.sum(r.cost), func.min(at),
                func.max(at), *part(r.idle, r.idle_amount), *part(r.dark, r.dark_amount), *part(r.unused, r.unused_amount))
         .where(*period, r.kind == RateKind.PRICED).group_by(r.pool, r.policy_version_id, r.capacity_gpu_seconds, r.den))
    for pool, version, capacity, den, hours, cost, first, last, *parts in conn.execute(q):
        v = rater.versions[version]
        rater.fold_hours(pool, v, capacity, hours, int(cost), int(den), int(first), int(last))
        idle, dark, unused = ((int(a), int(b), int(f), int(la)) if f is not None else None
                              for a, b, f, la in (parts[0:4], parts[4:8], parts[8:12]))
        rater.fold_hour_amounts(pool, version, int(den), idle=idle, dark=dark, unused=unused)


def _overage(conn: Connection, x: _Exact, session: Session, start: datetime, end: datetime, rater: Rater) -> None:
    """Line 2: each inference tenant's use above its cover, per segment."""
    o = InferenceHourRate
    at = epoch_column(session, o.hour)
    q = (select(o.pool, o.policy_version_id, o.tenant, o.den, func.min(at), func.max(at), x.sum(o.over), x.sum(o.amount))
         .where(o.hour >= start, o.hour < end).group_by(o.pool, o.policy_version_id, o.tenant, o.den))
    for pool, version, tenant, den, first, last, over, amount in conn.execute(q):
        rater.fold_overage(pool, version, tenant, int(first), int(last), int(over), int(amount), int(den))


def _unpooled(conn: Connection, session: Session, period, rater: Rater) -> None:
    """GPUs on nodes no pool names, per hour (clusters' rows of one hour added up, as the loader does)."""
    r = PoolHourRate
    q = (select(func.sum(r.gpus), func.sum(r.capacity_gpu_seconds)).where(*period, r.kind == RateKind.UNPOOLED)
         .group_by(r.hour, r.pool))
    for gpus, capacity in conn.execute(q):
        rater.fold_unpooled_hour(int(gpus), Decimal(capacity))


def _usage(conn: Connection, x: _Exact, session: Session, start: datetime, end: datetime, rater: Rater) -> None:
    """Lines 3 and 6 and the usage figures: every usage row of a rated pool-hour, x its rate, per segment row and
    rate denominator (none for unpooled hours: they are not priced)."""
    u, r = UsageRollup.__table__.c, PoolHourRate.__table__.c
    joined = UsageRollup.__table__.join(PoolHourRate.__table__, and_(u.hour == r.hour, u.cluster == r.cluster, u.pool == r.pool))
    gs = x.gs(u.gpu_seconds)
    q = (select(r.pool, r.policy_version_id, u.tenant, u.klass, u.dark, r.den,
                x.sum(gs), x.sum(x.mul(gs, case((u.dark, r.dark_rate), else_=r.rate))), x.sum(x.nano(u)),
                func.sum(u.activity_samples), epoch_column(session, func.min(r.hour)), epoch_column(session, func.max(r.hour)))
         .select_from(joined)
         .where(u.hour >= start, u.hour < end, r.kind.in_((RateKind.PRICED, RateKind.UNPOOLED)))
         .group_by(r.pool, r.policy_version_id, u.tenant, u.klass, u.dark, r.den))
    for pool, version, tenant, klass, dark, den, gpu_seconds, amount, activity, samples, first, last in conn.execute(q):
        if klass not in CLASSES:  # checked when the hour was stored (`Rater.hour_use`, `check_unpooled`): never here
            raise _Refused
        exact = Rational()
        if den is not None and amount is not None:  # dark rows' rate is over den x the multiplier's power of ten
            exact.add(x.micro(amount), int(den) * (rater.versions[version].multiplier[1] if dark else 1))
        sums = UsageSums(int(first), int(last), x.micro(gpu_seconds), exact, int(activity), int(samples))
        rater.fold_usage(pool, version, tenant, klass, bool(dark), sums)


def _breaches(conn: Connection, x: _Exact, session: Session, start: datetime, end: datetime, rater: Rater) -> None:
    """Line 4 and the credits: the stored breach minutes of priced pool-hours, per segment (and each minute
    nobody was co-located in)."""
    b = SlaHourRate
    at = epoch_column(session, b.hour)
    q = (select(b.kind, b.pool, b.policy_version_id, b.service, b.account, b.klass, b.minute_end, b.den,
                x.sum(b.quantity), x.sum(b.amount), func.min(at), func.max(at))
         .where(b.hour >= start, b.hour < end)
         .group_by(b.kind, b.pool, b.policy_version_id, b.service, b.account, b.klass, b.minute_end, b.den))
    for kind, pool, version, service, account, klass, minute_end, den, quantity, amount, first, last in conn.execute(q):
        v, seg = rater.versions[version], rater.segments[(pool, version)]
        if kind == SlaKind.PENALTY:
            hb = HourBreaches(penalties=((account, klass, service, from_exact(int(quantity)), Fraction(int(amount), int(den))),),
                              credits=(), unattributed=())
        elif kind == SlaKind.CREDIT:
            hb = HourBreaches(penalties=(), credits=((service, account, int(quantity)),), unattributed=())
        else:
            hb = HourBreaches(penalties=(), credits=(), unattributed=(
                UnattributedBreach(service=service, pool=pool, minute_end=int(minute_end), penalty=from_exact(int(amount))),))
        rater.fold_breaches(v, seg, int(first), pool, hb, int(last))


_WIDE = Context(prec=1000, traps=[Inexact])  # sums of exact numerators: never rounded


class _Exact:
    """Exact integer arithmetic in SQL: NUMERIC on PostgreSQL; on SQLite, integers as text through the
    Python functions registered by `_register_functions` (its own integers stop at 64 bits)."""

    def __init__(self, pg: bool):
        self.pg = pg

    def gs(self, gpu_seconds):
        """A GPU-seconds column to sum: NUMERIC with 6 decimals as stored, or micro-GPU-seconds (SQLite)."""
        return gpu_seconds if self.pg else func.cb_micro(gpu_seconds)

    def micro(self, value) -> int:
        """A sum of `gs` (or of `gs` x integer rates) as an integer in micro-units."""
        return int(Decimal(value).scaleb(6, _WIDE)) if self.pg else int(value)

    def nano(self, u):
        """round(activity_sum x 1e9) of an occupied row, as the loader reads it (float8 x 1e9 rounded half-even by rint())."""
        if self.pg:
            return case((u.activity_samples != 0, cast(func.round(u.activity_sum * literal_column("1e9::float8")), BigInteger)), else_=0)
        return func.cb_nano(u.activity_sum, u.activity_samples)

    def sum(self, x):
        return func.sum(x) if self.pg else func.cb_sum(x)

    def mul(self, a, b):
        return a * b if self.pg else func.cb_mul(a, b)



# SQLite: exact sums of numbers too large for its 64-bit integers, as Python aggregates (returned as text)


def _micro(value) -> int:
    """A stored GPU-seconds value as micro-GPU-seconds, read as the loader reads it (SQLAlchemy's
    Numeric(20, 6) on SQLite: the stored number formatted to 6 decimals)."""
    return int(Decimal(f"{value:.6f}").scaleb(6))


class _Sum:
    def __init__(self) -> None:
        self.total = 0

    def step(self, value) -> None:
        if value is not None:
            self.total += int(value)

    def finalize(self) -> str:
        return str(self.total)


def _mul(a, b) -> str | None:
    return None if a is None or b is None else str(int(a) * int(b))


def _nano(activity_sum, samples) -> int:
    return round(activity_sum * 1e9) if samples else 0


def _register_functions(conn: Connection) -> None:
    raw = conn.connection.driver_connection
    raw.create_function("cb_micro", 1, lambda v: None if v is None else str(_micro(v)), deterministic=True)
    raw.create_function("cb_nano", 2, _nano, deterministic=True)
    raw.create_function("cb_mul", 2, _mul, deterministic=True)
    raw.create_aggregate("cb_sum", 1, _Sum)
