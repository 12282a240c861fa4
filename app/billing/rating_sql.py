"""Rate a stored period with the per-row sums done by the database (issue 15: rating at the database's speed).

`rating.rate_period` stays the reference. What it computes from each usage row (lines 3 and 6:
micro-GPU-seconds x the pool-hour's rate in 1e-36, summed per segment row; GPU-seconds, activity,
samples, first and last hour) depends on the pool-hour only through its rate, and the rate only on
the pool-hour's cost and capacity. So here:

1. the pool-hours are read without their usage and priced by the reference's own `Rater.price`
   (a month is 40 pools x 744 hours, whatever the number of tenants);
2. their integer rates are copied into a temporary table, and one GROUP BY over the usage rows
   joined to it sums, exactly (NUMERIC on PostgreSQL; on SQLite, Python integer aggregates
   registered on the connection), per segment row and per (pool-hour, inference tenant);
3. the per-hour sums feed the reference's own `Rater.hour_lines` (reserved fees, overage against
   the cover, idle, dark discount, unused reserve, SLA breaches), the segment sums `Rater.fold_usage`,
   and `Rater.finish` rounds as for the reference.

tests/billing/test_rating_sql.py proves the result equal to `rate_period` over the same rollups on
both databases. Anything the reference would refuse (a negative GPU-seconds row, an unknown class,
a policy it cannot rate with, a model without a price) makes this rate the period again by the
reference path, which raises its own error, named the same way.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from datetime import datetime
from decimal import Decimal

from sqlalchemy import (
    BigInteger,
    Column,
    DateTime,
    Integer,
    MetaData,
    Numeric,
    Table,
    Text,
    and_,
    case,
    cast,
    func,
    literal,
    literal_column,
    select,
    tuple_,
)
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError
from sqlmodel import Session

from app.billing.loader import DocumentCache, load_hours
from app.billing.rating import CLASSES, INFERENCE, TO_COVER, UNPOOLED_HOUR, Priced, Rater, rate_period, rating_context
from app.billing.rating_sums import UsageSums
from app.billing.types import RatingResult
from app.core.db import is_postgres
from app.core.errors import Invalid
from app.core.timeutil import from_epoch
from app.metrics.models import UsageRollup


class _Refused(Exception):
    """The rollups hold a row the reference refuses: let it say why."""


def rate_stored(*, session: Session, start: datetime, end: datetime, docs: DocumentCache | None = None) -> RatingResult:
    """`rate_period` over the stored hours [start, end), equal to it, with the usage rows summed in the database."""
    docs = docs or DocumentCache(session)
    span = {"period_start": int(start.timestamp()), "period_end": int(end.timestamp())}
    try:
        with rating_context():
            return _rate(session, start, end, docs, Rater(**span))
    except (Invalid, _Refused):
        return rate_period(load_hours(session=session, start=start, end=end, docs=docs), **span)


def _rate(session: Session, start: datetime, end: datetime, docs: DocumentCache, rater: Rater) -> RatingResult:
    priced: list[Priced] = []
    rates: list[tuple] = []  # (hour, pool, version, rate, dark rate, covers key): None but the first three for an unpooled hour
    covers: list[tuple] = []  # (covers key, tenant, cover in 1e-20)
    keys: dict[int, int] = {}  # id of a cached covers dict -> its key
    for h in load_hours(session=session, start=start, end=end, docs=docs, usage=False):
        p = rater.price(h)
        if p is None:
            continue
        if p is UNPOOLED_HOUR:
            rates.append((h.hour, h.pool, h.policy_version, None, None, None))
            continue
        priced.append(p)
        covered = rater.covers(p)
        key = keys.get(id(covered))
        if key is None:
            key = keys[id(covered)] = len(keys)
            covers.extend((key, tenant, cover) for tenant, cover in covered.items())
        rates.append((h.hour, h.pool, h.policy_version, p.rate_int, p.dark_int, key))
    if rater.missing:
        raise _Refused  # a model without a price: the reference names every one, after checking every row
    sums = _Sums(_Exact(is_postgres(session)))
    if rates:
        _sum_usage(session.connection(), start, end, rates, covers, sums)
    for pool, version, tenant, klass, dark, row, least in sums.segments:
        if klass not in CLASSES or least < 0:
            raise _Refused
        rater.fold_usage(pool, version, tenant, klass, dark, row)
    for pool, version, tenant, first, last, over, amount in sums.overage:
        rater.fold_overage(pool, version, tenant, first, last, over, amount)
    for p in priced:
        key = (p.hour.hour, p.hour.pool)
        rater.hour_lines(p, *sums.used.get(key, (0, 0, 0)))
    return rater.finish()


class _Sums:
    """What the database summed: per segment row, per (segment, inference tenant), per pool-hour."""

    def __init__(self, exact: _Exact) -> None:
        self.exact = exact
        self.segments: list[tuple] = []  # (pool, version, tenant, klass, dark, UsageSums, least GPU-seconds of a row)
        self.overage: list[tuple] = []  # (pool, version, tenant, first, last, over in 1e-20, over x rate)
        # micro-GPU-seconds used, in dark time by other classes than inference, and inference use within the covers (1e-20)
        self.used: dict[tuple[int, str], tuple[int, int, int]] = {}

    def segment(self, key, sums) -> None:
        pool, version, tenant, klass, dark = key
        gs, amount, activity, samples, first, last, least = sums
        micro = self.exact.micro
        self.segments.append((pool, version, tenant, klass, bool(dark),
                              UsageSums(int(first), int(last), micro(gs), micro(amount or 0), int(activity), int(samples)), least))

    def tenant(self, key, sums) -> None:
        if key[2] is not None:  # the other classes' row of each pool-hour
            over, amount, first, last = sums
            self.overage.append((*key, int(first), int(last), int(over), int(amount)))

    def hour(self, key, sums) -> None:
        gs, dark, covered = sums
        hour = (int(key[0]), key[1])
        used, dark_used, within = self.used.get(hour, (0, 0, 0))
        self.used[hour] = (used + self.exact.micro(gs), dark_used + self.exact.micro(dark), within + int(covered))


def _tables(dialect: str) -> tuple[Table, Table]:
    """The rates and covers of one rating run.

    SQLite: temporary tables, exact integers as text (for the functions below). PostgreSQL: UNLOGGED
    tables named for this run, created and dropped inside the caller's transaction (so a rollback takes
    them too, and concurrent runs do not meet): not temporary, because PostgreSQL never scans a temporary
    table in parallel workers, and the GROUP BY rating is measured against runs in parallel.
    """
    pg = dialect == "postgresql"
    big = Numeric() if pg else Text()
    meta = MetaData()
    suffix = f"_{secrets.token_hex(6)}" if pg else ""
    options = {"prefixes": ["UNLOGGED"]} if pg else {"prefixes": ["TEMPORARY"]}
    rate = Table(
        f"rating_rate{suffix}", meta,
        Column("hour", BigInteger, nullable=False), Column("pool", Text, nullable=False),
        Column("version", Integer, nullable=False), Column("rate", big), Column("dark_rate", big), Column("covers", Integer),
        *([Column("at", DateTime(timezone=True), nullable=False)] if pg else []),  # the hour as a timestamp
        **options,
    )
    cover = Table(
        f"rating_cover{suffix}", meta,
        Column("covers", Integer, nullable=False), Column("tenant", Text, nullable=False), Column("cover", big, nullable=False),
        **options,
    )
    return rate, cover


def _sum_usage(conn: Connection, start: datetime, end: datetime, rates: list[tuple], covers: list[tuple], out: _Sums) -> None:
    """The usage rows of the rated pool-hours, summed exactly with their rates and covers, into `out`."""
    dialect = conn.dialect.name
    tables = _tables(dialect)
    for table in tables:
        table.drop(conn, checkfirst=True)
        table.create(conn)
    try:
        if dialect == "postgresql":
            rate, cover = tables
            _copy(conn, f"{rate.name} (hour, pool, version, rate, dark_rate, covers, at)", [(*r, from_epoch(r[0])) for r in rates])
            _copy(conn, f"{cover.name} (covers, tenant, cover)", covers)
            conn.exec_driver_sql(f"ANALYZE {rate.name}")
            conn.exec_driver_sql(f"ANALYZE {cover.name}")
            with _settings(conn, work_mem="256MB", enable_nestloop="off"):
                _query(conn, *tables, start, end, out)
        else:
            _register_functions(conn)
            text_int = lambda n: None if n is None else str(n)  # noqa: E731
            conn.execute(tables[0].insert(), [
                {"hour": h, "pool": p, "version": v, "rate": text_int(r), "dark_rate": text_int(d), "covers": k}
                for h, p, v, r, d, k in rates
            ])
            if covers:
                conn.execute(tables[1].insert(), [{"covers": k, "tenant": t, "cover": str(c)} for k, t, c in covers])
            _query(conn, *tables, start, end, out)
    finally:
        with suppress(DBAPIError):  # after a failed statement PostgreSQL refuses it; the rollback takes the tables
            for table in tables:
                table.drop(conn)


@contextmanager
def _settings(conn: Connection, **values: str) -> Iterator[None]:
    """PostgreSQL settings for the two sums, put back afterwards: hash aggregates that fit in memory
    (a month's pool-hour x inference tenant groups spill to disk at the default 4 MB), and hash joins
    (the planner misjudges the temporary table and probes the usage index once per pool-hour)."""
    before = {name: conn.exec_driver_sql(f"SHOW {name}").scalar() for name in values}
    for name, value in values.items():
        conn.execute(select(func.set_config(name, value, True)))
    try:
        yield
    finally:
        for name, value in before.items():
            conn.execute(select(func.set_config(name, value, True)))


def _copy(conn: Connection, into: str, rows: list[tuple]) -> None:
    cursor = conn.connection.driver_connection.cursor()
    with cursor, cursor.copy(f"COPY {into} FROM STDIN") as cp:
        for row in rows:
            cp.write_row(row)


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
        return int(Decimal(value).scaleb(6)) if self.pg else int(value)

    def in_cover_units(self, gs):
        """A `gs` sum in 1e-20, the covers' unit."""
        return gs * literal_column(f"1{'0' * 20}") if self.pg else func.cb_mul(gs, literal(str(TO_COVER)))

    def nano(self, u):
        """round(activity_sum x 1e9) of an occupied row, as the loader reads it (float8 x 1e9 rounded half-even by rint())."""
        if self.pg:
            return case((u.activity_samples != 0, cast(func.round(u.activity_sum * literal_column("1e9::float8")), BigInteger)), else_=0)
        return func.cb_nano(u.activity_sum, u.activity_samples)

    def sum(self, x):
        return func.sum(x) if self.pg else func.cb_sum(x)

    def mul(self, a, b):
        return a * b if self.pg else func.cb_mul(a, b)

    def sub(self, a, b):
        return a - b if self.pg else func.cb_sub(a, b)

    def least(self, a, b):
        return func.least(a, b) if self.pg else func.cb_least(a, b)

    def same_hour(self, hour, rate):
        """An hour column equal to the rate table's hour (PostgreSQL: as timestamps, no per-row conversion)."""
        if self.pg:
            return hour == rate.c.at
        return cast(func.strftime("%s", hour), BigInteger) == rate.c.hour


def _query(conn: Connection, rate: Table, cover: Table, start: datetime, end: datetime, out: _Sums) -> None:
    x = out.exact
    pg = x.pg
    u, r, c = UsageRollup.__table__.c, rate.c, cover.c
    in_period = (u.hour >= start, u.hour < end)

    # 1. every usage row, for lines 3 and 6: one GROUP BY per segment row, joined to the pool-hour rates
    joined = UsageRollup.__table__.join(rate, and_(x.same_hour(u.hour, rate), u.pool == r.pool))
    gs = x.gs(u.gpu_seconds)
    segment_key = (r.pool, r.version, u.tenant, u.klass, u.dark)
    segment_sums = (x.sum(gs), x.sum(x.mul(gs, case((u.dark, r.dark_rate), else_=r.rate))), x.sum(x.nano(u)),
                    func.sum(u.activity_samples), func.min(r.hour), func.max(r.hour), func.min(u.gpu_seconds))
    _grouped(conn, pg, joined, in_period, (segment_key, segment_sums, out.segment))

    # 2. per pool-hour: use in all, in dark time by other classes than inference, and per inference tenant
    # against its cover (line 2 per segment, and the reserve left unused per pool-hour)
    tenant = case((u.klass == INFERENCE, u.tenant), else_=None)
    dark = case((and_(u.dark, u.klass != INFERENCE), gs), else_=0 if pg else "0")
    per_hour = (select(u.hour, u.pool, tenant.label("tenant"), x.sum(gs).label("gs"), x.sum(dark).label("dark"))
                .where(*in_period).group_by(u.hour, u.pool, tenant).cte("per_hour"))
    i = per_hour.c
    joined = per_hour.join(rate, and_(x.same_hour(i.hour, rate), i.pool == r.pool, r.rate.is_not(None))).outerjoin(
        cover, and_(c.covers == r.covers, c.tenant == i.tenant))
    units = x.in_cover_units(i.gs)
    covered = x.least(units, func.coalesce(c.cover, 0 if pg else "0"))
    over = x.sub(units, covered)
    tenants = ((r.pool, r.version, i.tenant), (x.sum(over), x.sum(x.mul(over, r.rate)), func.min(r.hour), func.max(r.hour)), out.tenant)
    hours = ((r.hour, r.pool), (x.sum(i.gs), x.sum(i.dark), x.sum(covered)), out.hour)
    _grouped(conn, pg, joined, (), tenants, hours)


def _grouped(conn: Connection, pg: bool, joined, where, *groupings) -> None:
    """Each (key, sums, sink) grouping of the joined rows into its sink: on PostgreSQL in one scan (GROUPING SETS)."""
    if not pg or len(groupings) == 1:
        for key, sums, sink in groupings:
            for row in conn.execute(select(*key, *sums).select_from(joined).where(*where).group_by(*key)):
                sink(row[:len(key)], row[len(key):])
        return
    columns, slices = [], []
    for key, sums, _sink in groupings:
        slices.append((len(columns), len(columns) + len(key), len(columns) + len(key) + len(sums)))
        columns.extend(key)
        columns.extend(sums)
    first_key = groupings[0][0]
    q = (select(func.grouping(*first_key), *columns).select_from(joined).where(*where)
         .group_by(func.grouping_sets(*(tuple_(*key) for key, _sums, _sink in groupings))))
    for row in conn.execute(q):
        which = 0 if row[0] == 0 else 1  # grouping() is 0 in the first set's rows, where all its key columns are grouped
        a, b, e = slices[which]
        groupings[which][2](row[1 + a:1 + b], row[1 + b:1 + e])


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


def _sub(a, b) -> str | None:
    return None if a is None or b is None else str(int(a) - int(b))


def _least(a, b) -> str | None:
    return None if a is None or b is None else str(min(int(a), int(b)))


def _nano(activity_sum, samples) -> int:
    return round(activity_sum * 1e9) if samples else 0


def _register_functions(conn: Connection) -> None:
    raw = conn.connection.driver_connection
    raw.create_function("cb_micro", 1, lambda v: None if v is None else str(_micro(v)), deterministic=True)
    raw.create_function("cb_nano", 2, _nano, deterministic=True)
    raw.create_function("cb_mul", 2, _mul, deterministic=True)
    raw.create_function("cb_sub", 2, _sub, deterministic=True)
    raw.create_function("cb_least", 2, _least, deterministic=True)
    raw.create_aggregate("cb_sum", 1, _Sum)
