"""The allocation explorer's figures (Kubecost-style): a window's GPU-hours, efficiency and cost per group.

How a window is priced, one calendar month (billing time zone) at a time:
- a whole month whose period is finalized: its stored rating lines, exactly as the issued invoices and
  the platform statement show them (`invoice`); they never change, whatever is ingested later;
- anything else (an open month, a month rated only as a draft, a part of a month): the window's rollups
  as they are now, rated by `rating.rate_period` over exactly those hours, the same pure function a
  period is rated with (`estimate`). A draft's lines are a snapshot of the hours ingested when it was
  rated; the estimate includes every hour ingested since, so a month's figures are the budgets'
  month-to-date at every moment (`month_forecast` reads them from here).
A row's cost is the resource charges it caused: reserved fee, inference overage, busy and dark
usage (SPEC section 5 lines 1-3) for tenants; line 6 for `unallocated`; the `platform_idle` balance
for each pool's idle row; the rest of the platform balance (dark-time discount, reserved but unused,
rounding) as one `adjustment` row, so that the staff view's total is the fleet cost C. SLA penalties
and credits are transfers between tenants that net to zero and corrections adjust an earlier month:
invoices show both, allocations show neither (see README, "Allocation explorer").

By namespace, a line is split over the namespaces that caused it by their GPU-seconds (busy usage by
busy seconds, dark by dark, inference fees by all), to the cent with the largest remainders, so a
tenant's namespaces add up to its tenant row. Pure below `allocation()` (the one function with I/O).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import date, timedelta
from decimal import ROUND_FLOOR, Decimal
from zoneinfo import ZoneInfo

from sqlalchemy import select
from sqlmodel import Session

from app.billing.loader import load_hours
from app.billing.models import (
    BillingPeriod,
    ChargeLineRecord,
    LineSource,
    PeriodStatus,
    TenantUsageRecord,
    UnpooledUsageRecord,
)
from app.billing.period import MonthPart, get_period, month_parts, next_month
from app.billing.pricing import cents
from app.billing.rating import rate_period
from app.billing.readable import Viewer, readable_lines, readable_usage
from app.billing.types import QUANTITY, LineKind
from app.core.cache import TtlCache
from app.core.errors import FieldError, Invalid
from app.core.safe_text import csv_bytes
from app.core.settings import get_settings
from app.core.timeutil import SECONDS_PER_HOUR, epoch, utcnow
from app.metrics.cluster_hours import check_cluster, pool_clusters
from app.metrics.date_ranges import MAX_RANGE_DAYS, DateRange
from app.metrics.efficiency import mean_activity
from app.metrics.namespace_read import NamespaceCell, capacity_by_pool, namespace_cells
from app.metrics.usage_read import departments_at
from app.policy.document import UNALLOCATED, UNPOOLED
from app.policy.service import data_version

AGGREGATES = ("tenant", "department", "pool", "cluster", "class", "namespace")
ALLOCATED, UNALLOCATED_ROW, IDLE, ADJUSTMENT, TOTAL = "allocated", "unallocated", "idle", "adjustment", "total"
KIND_ORDER = {ALLOCATED: 0, UNALLOCATED_ROW: 1, IDLE: 2, ADJUSTMENT: 3}
NO_USAGE = "(no usage)"  # a fee owed without use (a reservation nobody used) has no namespace to go to
ADJUSTMENT_NAME = "platform balance (dark-time discount, reserved unused, rounding)"
ZERO = Decimal(0)
CSV_COLUMNS = ["kind", "name", "tenant", "busy_gpu_hours", "dark_gpu_hours", "gpu_hours", "efficiency", "cost", "currency"]
_MONTH = re.compile(r"^\d{4}-\d{2}$")
_DAYS = re.compile(r"^(\d{4}-\d{2}-\d{2}),(\d{4}-\d{2}-\d{2})$")
# rating line kind -> (row kind, which seconds a namespace split weighs by)
_LINE_ROWS = {
    LineKind.USAGE_BUSY: (ALLOCATED, "busy"),
    LineKind.USAGE_DARK: (ALLOCATED, "dark"),
    LineKind.RESERVED_FEE: (ALLOCATED, "all"),
    LineKind.INFERENCE_OVERAGE: (ALLOCATED, "all"),
    LineKind.UNALLOCATED: (UNALLOCATED_ROW, "all"),
    LineKind.IDLE: (IDLE, ""),
    LineKind.DARK_DISCOUNT: (ADJUSTMENT, ""),
    LineKind.RESERVED_UNUSED: (ADJUSTMENT, ""),
    LineKind.ROUNDING: (ADJUSTMENT, ""),
}
# The line kinds that make up a tenant's cost (its allocated row): what budgets and forecasts count too
TENANT_COST_KINDS = frozenset(kind for kind, (row, _) in _LINE_ROWS.items() if row == ALLOCATED)


# --- the window ------------------------------------------------------------------------------------------


def billing_today() -> tuple[date, ZoneInfo]:
    """Today in the billing time zone, and that zone (windows are whole days there)."""
    tz = get_settings().tz
    return utcnow().astimezone(tz).date(), tz


def parse_window(value: str | None, *, today: date, tz: ZoneInfo, path: str = "query.window") -> DateRange:
    """`""` (this month to date), `YYYY-MM` (a month) or `YYYY-MM-DD,YYYY-MM-DD` (whole days, both included)."""
    value = (value or "").strip()
    try:
        if not value:
            start, end = today.replace(day=1), today
        elif _MONTH.match(value):
            year, month = int(value[:4]), int(value[5:])
            start = date(year, month, 1)
            end = date(*next_month(year, month), 1) - timedelta(days=1)
        elif m := _DAYS.match(value):
            start, end = date.fromisoformat(m.group(1)), date.fromisoformat(m.group(2))
        else:
            raise ValueError("unrecognised form")
    except ValueError:
        raise Invalid(f"{value!r} is not a window", [FieldError(
            path, "expected YYYY-MM (a month) or YYYY-MM-DD,YYYY-MM-DD (whole days, both included); empty: this month to date")]) from None
    return window_of(start, end, tz=tz, path=path)


def window_of(start: date, end: date, *, tz: ZoneInfo, path: str = "query.window") -> DateRange:
    """Whole days [start, end]; errors name `path`."""
    if start > end:
        raise Invalid("The window is not valid", [FieldError(path, "the start must be on or before the end")])
    if (end - start).days + 1 > MAX_RANGE_DAYS:
        raise Invalid("The window is not valid", [FieldError(path, f"a window spans at most {MAX_RANGE_DAYS} days")])
    return DateRange(start=start, end=end, tz=tz)


def window_text(window: DateRange) -> str:
    """The API's `window` value for a range (what the page's CSV and API links carry)."""
    return f"{window.start.isoformat()},{window.end.isoformat()}"


def aggregates() -> tuple[str, ...]:
    """The aggregates on offer: by cluster only where there are several clusters."""
    several = len(get_settings().cluster_names()) > 1
    return tuple(a for a in AGGREGATES if several or a != "cluster")


def check_aggregate(value: str, *, path: str = "query.aggregate") -> str:
    allowed = aggregates()
    if value not in allowed:
        raise Invalid(f"{value[:50]!r} is not an aggregate", [FieldError(path, "one of: " + ", ".join(allowed))])
    return value


# --- the rows (pure) -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CostLine:
    """What the explorer needs of a charge line: whose, where, what kind, how much."""

    account: str
    pool: str
    kind: str
    klass: str
    amount: Decimal


@dataclass
class Row:
    kind: str  # allocated | unallocated | idle | adjustment | total
    name: str  # the group: a tenant, department, pool, class or namespace; the pool of an idle row
    tenant: str = ""  # by namespace: the namespace's tenant
    busy_seconds: Decimal = ZERO
    dark_seconds: Decimal = ZERO
    idle_seconds: Decimal = ZERO
    activity_sum: float = 0.0
    activity_samples: int = 0
    cost: Decimal = ZERO

    @property
    def busy_gpu_hours(self) -> Decimal:
        return (self.busy_seconds / SECONDS_PER_HOUR).quantize(QUANTITY)

    @property
    def dark_gpu_hours(self) -> Decimal:
        return (self.dark_seconds / SECONDS_PER_HOUR).quantize(QUANTITY)

    @property
    def gpu_hours(self) -> Decimal:
        return ((self.busy_seconds + self.dark_seconds + self.idle_seconds) / SECONDS_PER_HOUR).quantize(QUANTITY)

    @property
    def efficiency(self) -> float | None:
        return mean_activity(self.activity_sum, self.activity_samples)


def split_cents(amount: Decimal, weights: dict[tuple, Decimal], quantum: Decimal) -> dict[tuple, Decimal]:
    """`amount` split by `weights` to `quantum`, adding up exactly: floors, then the largest remainders get a quantum."""
    total = sum(weights.values(), ZERO)
    if not weights or total <= 0:
        return {}
    keys = sorted(weights)
    exact = {k: amount * weights[k] / total for k in keys}
    floors = {k: exact[k].quantize(quantum, ROUND_FLOOR) for k in keys}
    left = int(((amount - sum(floors.values(), ZERO)) / quantum).to_integral_value())
    for k in sorted(keys, key=lambda k: (-(exact[k] - floors[k]), k))[:left]:
        floors[k] += quantum
    return floors


def _group(aggregate: str, cell_tenant: str, pool: str, klass: str, namespace: str,
           departments: dict[str, str], cluster: str = "") -> tuple[str, str]:
    """(name, tenant) of the row a (tenant, pool, class, namespace) of `cluster` belongs to."""
    if aggregate == "namespace":
        return namespace, cell_tenant
    if aggregate == "pool":
        return pool, ""
    if aggregate == "cluster":
        return cluster, ""
    if aggregate == "class":
        return klass, ""
    if aggregate == "department":
        return departments.get(cell_tenant, "unassigned"), ""
    return cell_tenant, ""


def build_rows(*, aggregate: str, cells: Iterable[NamespaceCell], lines: Iterable[CostLine],
               capacity: dict[str, Decimal] | None, departments: dict[str, str], quantum: Decimal,
               clusters: dict[str, str] | None = None) -> list[Row]:
    """Rows of the explorer, in display order: allocated by cost, unallocated, idle per pool, the adjustment.

    `capacity` None (a tenant member's view): no idle or adjustment row, and `lines`/`cells` are theirs only.
    `clusters`: pool -> cluster, for the cluster aggregate (a cell read per cluster carries its own).
    """
    clusters = clusters or {}
    rows: dict[tuple[str, str, str], Row] = {}

    def row(kind: str, name: str, tenant: str = "") -> Row:
        key = (kind, name, tenant)
        found = rows.get(key)
        if found is None:
            found = rows[key] = Row(kind=kind, name=name, tenant=tenant)
        return found

    cells = list(cells)
    used_by_pool: dict[str, Decimal] = defaultdict(lambda: ZERO)
    # (tenant, pool, class) -> namespace -> seconds by basis, for splitting lines by namespace
    weights: dict[tuple[str, str, str], dict[str, dict[tuple, Decimal]]] = defaultdict(
        lambda: {"busy": defaultdict(lambda: ZERO), "dark": defaultdict(lambda: ZERO), "all": defaultdict(lambda: ZERO)})
    for c in cells:
        kind = UNALLOCATED_ROW if c.tenant == UNALLOCATED else ALLOCATED
        name, tenant = _group(aggregate, c.tenant, c.pool, c.klass, c.namespace, departments,
                              c.cluster or clusters.get(c.pool, ""))
        if kind == UNALLOCATED_ROW and aggregate != "namespace":
            name, tenant = UNALLOCATED, ""
        r = row(kind, name, tenant)
        if c.dark:
            r.dark_seconds += c.gpu_seconds
        else:
            r.busy_seconds += c.gpu_seconds
        r.activity_sum += c.activity_sum
        r.activity_samples += c.activity_samples
        used_by_pool[c.pool] += c.gpu_seconds
        w = weights[(c.tenant, c.pool, c.klass)]
        w["dark" if c.dark else "busy"][(c.namespace,)] += c.gpu_seconds
        w["all"][(c.namespace,)] += c.gpu_seconds

    for line in lines:
        kind, basis = _LINE_ROWS.get(line.kind, ("", ""))
        if not kind or (capacity is None and kind in (IDLE, ADJUSTMENT)):
            continue  # SLA transfers and corrections are not allocations; platform rows are staff-only
        if kind == IDLE:
            row(IDLE, line.pool).cost += line.amount
            continue
        if kind == ADJUSTMENT:
            row(ADJUSTMENT, ADJUSTMENT_NAME).cost += line.amount
            continue
        tenant = UNALLOCATED if kind == UNALLOCATED_ROW else line.account
        if aggregate != "namespace":
            name, _ = _group(aggregate, tenant, line.pool, line.klass, "", departments, clusters.get(line.pool, ""))
            row(kind, UNALLOCATED if kind == UNALLOCATED_ROW else name).cost += line.amount
            continue
        split = split_cents(line.amount, weights[(tenant, line.pool, line.klass)][basis], quantum)
        for (namespace,), amount in split.items() or {(NO_USAGE,): line.amount}.items():
            row(kind, namespace, tenant).cost += amount

    if capacity is not None:
        for pool, seconds in capacity.items():
            idle = seconds - used_by_pool.get(pool, ZERO)
            if idle > 0:
                row(IDLE, pool).idle_seconds += idle
    return sorted(rows.values(), key=lambda r: (KIND_ORDER[r.kind], -r.cost if r.kind != IDLE else ZERO, r.name, r.tenant))


def totals(rows: Iterable[Row]) -> Row:
    """The totals row: every figure summed over the rows shown (efficiency over their occupied samples)."""
    t = Row(kind=TOTAL, name="total")
    for r in rows:
        t.busy_seconds += r.busy_seconds
        t.dark_seconds += r.dark_seconds
        t.idle_seconds += r.idle_seconds
        t.activity_sum += r.activity_sum
        t.activity_samples += r.activity_samples
        t.cost += r.cost
    return t


# --- reading (the one function with I/O) ------------------------------------------------------------------


@dataclass(frozen=True)
class MonthPricing:
    month: str
    source: str  # invoice (a finalized period's lines) | estimate (rated now from the rollups)
    status: str  # the period's status: open | rated | finalized


@dataclass
class Allocation:
    window: DateRange
    aggregate: str
    tenant: str  # the tenant filter, "" for none
    currency: str
    months: list[MonthPricing]
    rows: list[Row]
    cluster: str = ""  # the cluster filter, "" for every cluster
    visible: frozenset[str] | None = None  # the tenants the rows cover (None: every tenant, a staff view)
    # The SLA transfers of the same hours per tenant, which no row holds (they move money between tenants, so C
    # is allocated without them): penalties paid (>= 0) and credits received (<= 0), as the invoice lines say.
    sla_penalties: dict[str, Decimal] = field(default_factory=dict)
    sla_credits: dict[str, Decimal] = field(default_factory=dict)
    total: Row = field(init=False)

    def __post_init__(self) -> None:
        self.total = totals(self.rows)

    @property
    def estimated(self) -> bool:
        return any(m.source == "estimate" for m in self.months)


def _stored_lines(session: Session, period: BillingPeriod, viewer: Viewer | None) -> list[CostLine]:
    stmt = readable_lines(
        select(ChargeLineRecord.account, ChargeLineRecord.pool, ChargeLineRecord.kind, ChargeLineRecord.klass,
               ChargeLineRecord.amount)
        .where(ChargeLineRecord.period_id == period.id, ChargeLineRecord.source == LineSource.RATING),
        viewer,
    )
    return [CostLine(a, p, k, c, Decimal(str(amount))) for a, p, k, c, amount in session.execute(stmt)]


# Rating a month so far costs about a second per 1,000 GPUs, and the explorer's default window is this
# month to date: an estimate is kept per (span, data version) for ESTIMATE_TTL_S, per process. The lines
# are everyone's; a viewer's are filtered from them. The data version changes with every ingested hour
# and every policy version, so a cached estimate is never older than the rollups it priced.
ESTIMATE_TTL_S = 30.0
ESTIMATE_MAX = 16
_ESTIMATES: TtlCache[tuple[str | None, list[CostLine]]] = TtlCache(ttl_s=ESTIMATE_TTL_S, max_entries=ESTIMATE_MAX)


def _stored_usage(session: Session, period: BillingPeriod, viewer: Viewer | None) -> list[NamespaceCell]:
    """A finalized period's usage as the invoices state it (per tenant, pool and class), as cells without a namespace.

    For whole finalized months this is what the invoice says, and ~25x fewer rows than re-summing the rollups.
    """
    cells = []
    stmt = readable_usage(
        select(TenantUsageRecord.tenant, TenantUsageRecord.pool, TenantUsageRecord.klass, TenantUsageRecord.busy_gpu_hours,
               TenantUsageRecord.dark_gpu_hours, TenantUsageRecord.efficiency, TenantUsageRecord.activity_samples)
        .where(TenantUsageRecord.period_id == period.id),
        viewer,
    )
    for tenant, pool, klass, busy, dark, efficiency, samples in session.execute(stmt):
        activity = (efficiency or 0.0) * (samples or 0)
        cells.append(NamespaceCell(tenant, pool, klass, False, "", Decimal(str(busy)) * SECONDS_PER_HOUR, activity, samples or 0))
        cells.append(NamespaceCell(tenant, pool, klass, True, "", Decimal(str(dark)) * SECONDS_PER_HOUR, 0.0, 0))
    unpooled = select(UnpooledUsageRecord.tenant, UnpooledUsageRecord.klass, UnpooledUsageRecord.gpu_hours).where(
        UnpooledUsageRecord.period_id == period.id)
    visible = None if viewer is None else viewer.visible_tenants()
    for tenant, klass, hours in session.execute(unpooled):
        if visible is None or tenant in visible:  # GPUs no pool names have no dark time
            cells.append(NamespaceCell(tenant, UNPOOLED, klass, False, "", Decimal(str(hours)) * SECONDS_PER_HOUR, 0.0, 0))
    return cells


def _estimated_lines(session: Session, part: MonthPart, visible: frozenset[str] | None) -> tuple[str | None, list[CostLine]]:
    key = (str(session.get_bind().engine.url), part.start, part.end, data_version(session=session))

    def estimate() -> tuple[str | None, list[CostLine]]:
        result = rate_period(load_hours(session=session, start=part.start, end=part.end),
                             period_start=epoch(part.start), period_end=epoch(part.end))
        lines = [CostLine(line.account, line.pool, line.kind, line.klass, line.amount) for line in result.lines]
        return result.currency if result.lines else None, lines

    currency, lines = _ESTIMATES.get(key, estimate)
    return currency, [line for line in lines if visible is None or line.account in visible]


class _Only:
    """A viewer narrowed to one tenant (the `tenant` filter): it reads as a member of that tenant would."""

    def __init__(self, viewer: Viewer | None, tenant: str):
        seen = None if viewer is None else viewer.visible_tenants()
        self.tenants = frozenset({tenant}) if seen is None or tenant in seen else frozenset()

    def visible_tenants(self) -> frozenset[str]:
        return self.tenants


# A month of hourly rows is summed per request (4-6 s for 8,192 GPUs under load): answers are kept per
# (database, window, aggregate, who sees what, data version) for ANSWER_TTL_S, as the overview's panels are.
# The data version (read from the database, so shared by every serve process) changes with every
# ingested hour, rating run, correction and policy version.
ANSWER_TTL_S = 30.0
ANSWER_MAX = 64
_ANSWERS: TtlCache[Allocation] = TtlCache(ttl_s=ANSWER_TTL_S, max_entries=ANSWER_MAX)


def allocation(*, session: Session, window: DateRange, aggregate: str, viewer: Viewer | None,
               tenant: str = "", cluster: str = "") -> Allocation:
    """The explorer's rows for `window` grouped by `aggregate`, as `viewer` may see them (only `tenant`'s when given,
    only `cluster`'s pools when given)."""
    check_aggregate(aggregate)
    cluster = check_cluster(cluster) or ""
    if tenant:
        viewer = _Only(viewer, tenant)
    visible = None if viewer is None else viewer.visible_tenants()
    key = (str(session.get_bind().engine.url), window.start, window.end, str(window.tz), aggregate, visible, tenant,
           cluster, data_version(session=session))
    return _ANSWERS.get(key, lambda: _allocation(session=session, window=window, aggregate=aggregate, viewer=viewer,
                                                 visible=visible, tenant=tenant, cluster=cluster))


def _allocation(*, session: Session, window: DateRange, aggregate: str, viewer: Viewer | None,
                visible: frozenset[str] | None, tenant: str, cluster: str) -> Allocation:
    lines: list[CostLine] = []
    months: list[MonthPricing] = []
    finalized: list[BillingPeriod] = []
    currency = None
    for part in month_parts(window):
        period = get_period(session=session, month=part.month)
        status = period.status if period is not None else PeriodStatus.OPEN
        if part.whole and period is not None and period.status == PeriodStatus.FINALIZED:
            lines += _stored_lines(session, period, viewer)
            finalized.append(period)
            currency = currency or period.currency
            months.append(MonthPricing(part.month, "invoice", status))
        else:
            found, estimated = _estimated_lines(session, part, visible)
            lines += estimated
            currency = currency or found
            months.append(MonthPricing(part.month, "estimate", status))
    currency = currency or "USD"
    # Finalized months store lines, not cells per cluster: a cluster's view (or the cluster aggregate) reads the rollups.
    clusters = pool_clusters(session=session, start=window.start_utc, end=window.end_utc)
    per_cluster = bool(cluster) or aggregate == "cluster"
    if aggregate != "namespace" and not per_cluster and len(finalized) == len(months):  # whole finalized months: the invoices'
        cells = [c for period in finalized for c in _stored_usage(session, period, viewer)]
    else:
        cells = namespace_cells(session=session, start=window.start_utc, end=window.end_utc, tenants=visible,
                                cluster=cluster or None)
    if cluster:  # pool names are unique across clusters (but `unpooled`, whose cells are read per cluster above)
        lines = [line for line in lines if clusters.get(line.pool) == cluster]
    capacity = capacity_by_pool(session=session, start=window.start_utc, end=window.end_utc,
                                cluster=cluster or None) if visible is None else None
    departments = departments_at(session, window.end_utc) if aggregate == "department" else {}
    penalties: dict[str, Decimal] = defaultdict(lambda: ZERO)
    credits: dict[str, Decimal] = defaultdict(lambda: ZERO)
    for line in lines:
        if line.kind in (LineKind.SLA_PENALTY, LineKind.SLA_CREDIT):
            (penalties if line.kind == LineKind.SLA_PENALTY else credits)[line.account] += line.amount
    rows = build_rows(aggregate=aggregate, cells=cells, lines=lines, capacity=capacity, departments=departments,
                      quantum=cents(currency), clusters=clusters)
    return Allocation(window=window, aggregate=aggregate, tenant=tenant, currency=currency, months=months, rows=rows,
                      cluster=cluster, visible=visible, sla_penalties=dict(penalties), sla_credits=dict(credits))


# --- answers ---------------------------------------------------------------------------------------------


def row_json(r: Row, currency: str, remaining: Decimal | None = None) -> dict:
    """One row as the API sends it (exact figures); `remaining`: the rest of this month's forecast cost."""
    forecast = None if remaining is None else (r.cost + remaining).quantize(cents(currency))
    return {"kind": r.kind, "name": r.name, "tenant": r.tenant or None, "busy_gpu_hours": r.busy_gpu_hours,
            "dark_gpu_hours": r.dark_gpu_hours, "gpu_hours": r.gpu_hours, "efficiency": r.efficiency,
            "cost": r.cost, "forecast_cost": forecast, "currency": currency}


def as_json(a: Allocation, remaining: dict[str, Decimal] | None = None) -> dict:
    """The API's answer: the window, how each month was priced, the rows and the totals.

    `remaining`: per tenant (or department) the forecast cost of this month's hours not known yet, when the
    window runs through today (`month_forecast.window_remaining`); each allocated row then carries its forecast.
    """
    remaining = remaining or {}
    return {
        "window": window_text(a.window), "start": a.window.start, "end": a.window.end, "aggregate": a.aggregate,
        "tenant": a.tenant or None, "cluster": a.cluster or None, "currency": a.currency, "estimated": a.estimated,
        "months": [{"month": m.month, "source": m.source, "status": m.status} for m in a.months],
        "rows": [row_json(r, a.currency, remaining.get(r.name) if r.kind == ALLOCATED else None) for r in a.rows],
        "total": row_json(a.total, a.currency),
    }


def _cells(r: Row, currency: str) -> list[str]:
    eff = r.efficiency
    return [r.kind, r.name, r.tenant, format(r.busy_gpu_hours, "f"), format(r.dark_gpu_hours, "f"),
            format(r.gpu_hours, "f"), "" if eff is None else repr(eff), format(r.cost, "f"), currency]


def as_csv(a: Allocation) -> bytes:
    """Exactly the rows shown, in their order, with exact figures, and the totals row last."""
    return csv_bytes(CSV_COLUMNS, [_cells(r, a.currency) for r in a.rows] + [_cells(a.total, a.currency)])


def csv_filename(a: Allocation) -> str:
    """A download name that says what is inside (no user text: the tenant filter is left out)."""
    where = f"-{a.cluster}" if a.cluster else ""  # a configured cluster's name: [a-z0-9._-] only
    return f"allocation-{a.aggregate}{where}-{a.window.start.isoformat()}-{a.window.end.isoformat()}.csv"
