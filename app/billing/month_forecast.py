"""The month-end forecast of every tenant and department: month-to-date cost, hourly history, `forecast_month`.

Month-to-date cost has one definition, the allocation explorer's (`allocation.allocation` over the
month's days so far: the open month's hours rated by `rating.rate_period`, the cost of a tenant's
row). The forecast learns each tenant's hourly pattern from the same rating applied to one hour at a
time (`hourly_costs`): rating prices every pool-hour on its own and a line is the sum of its hours,
so the hours of a span add up to that span's lines before their one rounding. Nothing here prices
anything itself.

The hours to come are priced under the policy in effect now: the pattern is learned from the history's usage
rated with the pricing of the version in effect at `as_of` (`priced_as`), so a price change (a new hosting
rate, energy price, dark-time multiplier) moves the forecast from the hour it takes effect. The month-to-date
cost and the chart's actual line stay what was billed, each hour at the prices of its own version. A history
hour the new pricing cannot price (a GPU model it no longer lists) keeps its billed cost.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from decimal import Decimal
from itertools import groupby

from sqlalchemy import select
from sqlmodel import Session

from app.billing.allocation import ALLOCATED, TENANT_COST_KINDS, allocation
from app.billing.forecast import HISTORY_DAYS, Forecast, forecast_month
from app.billing.loader import DocumentCache, load_hours
from app.billing.period import parse_period
from app.billing.pricing import MissingPrice, cents
from app.billing.rating import RatingInputError, rate_period
from app.core import generation
from app.core.cache import TtlCache
from app.core.errors import AppError
from app.core.settings import get_settings
from app.core.timeutil import SECONDS_PER_HOUR, aware, epoch, floor_hour, from_epoch
from app.metrics.date_ranges import DateRange
from app.metrics.models import IngestHour, IngestStatus, PoolHourRollup
from app.metrics.usage_read import departments_at
from app.policy.document import PLATFORM, UNALLOCATED, PolicyDocument
from app.policy.service import active_document, active_version, data_version, load_document

NOT_TENANTS = frozenset({PLATFORM, UNALLOCATED})
ZERO = Decimal(0)


@dataclass(frozen=True)
class HourlyCosts:
    """Each observed hour's cost per tenant (exact), and which hours were observed (ingested and priced)."""

    observed: frozenset[int]
    by_tenant: dict[str, dict[int, Decimal]]


# Each hour's costs are kept per process, keyed by (database, hour) and valid while the hour's ingest row says the
# same (ingested_at, attempts): only ingestion writes rollups, and it moves both whenever it replaces an hour. So an
# answer after a new hour was ingested rates that hour, not four weeks again. A session holding uncommitted writes
# neither reads nor fills it. Bounded: when full, it starts afresh (the TTL only bounds memory of dead databases).
HOURS_MAX = 24 * 62 * 4
_HOURS: TtlCache[tuple[tuple, dict[str, Decimal] | None]] = TtlCache(ttl_s=86400.0, max_entries=HOURS_MAX)


def _rate_hour(pools: list) -> dict[str, Decimal] | None:
    """Tenant -> cost of one hour (its pools rated together, exact); None when rating refuses it (no price)."""
    hour = pools[0].hour
    try:
        result = rate_period(pools, period_start=hour, period_end=hour + SECONDS_PER_HOUR, exact=True)
    except (MissingPrice, RatingInputError):
        return None
    costs: dict[str, Decimal] = {}
    for line in result.lines:
        if line.kind in TENANT_COST_KINDS and line.account not in NOT_TENANTS:
            costs[line.account] = costs.get(line.account, ZERO) + line.amount
    return costs


def _runs(hours: list[int]) -> list[tuple[int, int]]:
    """Consecutive hours as (first, last) runs."""
    runs: list[list[int]] = []
    for hour in hours:
        if runs and runs[-1][1] + SECONDS_PER_HOUR == hour:
            runs[-1][1] = hour
        else:
            runs.append([hour, hour])
    return [(a, b) for a, b in runs]


def hourly_costs(*, session: Session, start: datetime, end: datetime,
                 priced_as: tuple[int, PolicyDocument] | None = None) -> HourlyCosts:
    """Every ingested hour of [start, end) rated on its own; a tenant's cost is its allocated lines' amounts.

    An hour whose GPUs have no price (rating refuses it) is left out of `observed`: unknown, not zero.
    `priced_as`: (version id, document) whose pricing section replaces each hour's own (the rest of the hour's
    policy, its pools, tenants and reservations, stays as it was); None: each hour at its own version's prices.
    """
    url = str(session.get_bind().engine.url)
    shared = isinstance(generation.cache_key(session), int)  # object() while this session holds uncommitted writes
    # An hour's stamp holds every cluster's ingest of it: any cluster ingesting it again makes it new.
    stamped: dict[int, list[tuple]] = defaultdict(list)
    for hour, cluster, at, attempts in session.execute(
            select(IngestHour.hour, IngestHour.cluster, IngestHour.ingested_at, IngestHour.attempts)
            .where(IngestHour.hour >= start, IngestHour.hour < end, IngestHour.status == IngestStatus.OK)):
        stamped[epoch(hour)].append((cluster, at, attempts))
    stamps = {hour: tuple(sorted(rows)) for hour, rows in stamped.items()}
    found: dict[int, dict[str, Decimal] | None] = {}
    todo = []
    priced_key = None if priced_as is None else priced_as[0]
    for hour, stamp in stamps.items():
        fresh, hit = _HOURS.peek((url, hour, priced_key)) if shared else (False, None)
        if fresh and hit is not None and hit[0] == stamp:
            found[hour] = hit[1]
        else:
            todo.append(hour)
    docs = DocumentCache(session)
    for first, last in _runs(sorted(todo)):
        pools = load_hours(session=session, start=from_epoch(first), end=from_epoch(last + SECONDS_PER_HOUR), docs=docs)
        if priced_as is not None:
            pools = _repriced(pools, priced_as[1])
        for hour, group in groupby(pools, key=lambda h: h.hour):
            found[hour] = _rate_hour(list(group))
    for hour in todo:
        found.setdefault(hour, {})  # ingested, no GPU in any pool: nothing to pay
        if shared:
            _HOURS.put((url, hour, priced_key), (stamps[hour], found[hour]))
    by_tenant: dict[str, dict[int, Decimal]] = defaultdict(dict)
    for hour, costs in found.items():
        for tenant, cost in (costs or {}).items():
            by_tenant[tenant][hour] = cost
    observed = frozenset(h for h, costs in found.items() if costs is not None)
    return HourlyCosts(observed=observed, by_tenant=dict(by_tenant))


def _repriced(pools, pricing_of: PolicyDocument):
    """The pool-hours with `pricing_of`'s pricing section in their own policy documents (one copy per version)."""
    copies: dict[int, PolicyDocument] = {}
    for hour in pools:
        doc = copies.get(hour.policy_version)
        if doc is None:
            doc = hour.policy if hour.policy.pricing == pricing_of.pricing else \
                hour.policy.model_copy(update={"pricing": pricing_of.pricing})
            copies[hour.policy_version] = doc
        yield hour if doc is hour.policy else replace(hour, policy=doc)


def _merged(billed: HourlyCosts, priced: HourlyCosts) -> HourlyCosts:
    """`priced` where it could price an hour, else the billed cost; the hours observed are the billed ones."""
    by_tenant: dict[str, dict[int, Decimal]] = defaultdict(dict)
    for tenant, hours in billed.by_tenant.items():
        for hour, cost in hours.items():
            if hour not in priced.observed:
                by_tenant[tenant][hour] = cost
    for tenant, hours in priced.by_tenant.items():
        for hour, cost in hours.items():
            if hour in billed.observed:
                by_tenant[tenant][hour] = cost
    return HourlyCosts(observed=billed.observed, by_tenant=dict(by_tenant))


def _pricing_in_effect(session: Session, start: datetime, end: datetime,
                       at: datetime) -> tuple[int, PolicyDocument] | None:
    """(id, document) of the version in effect at `at` when an hour of [start, end) was priced otherwise; None when
    every hour's version has the same pricing (nothing to price again)."""
    version = active_version(session=session, at=at)
    if version is None:
        return None
    doc, docs = load_document(version), DocumentCache(session)
    used = session.execute(select(PoolHourRollup.policy_version_id).distinct()
                           .where(PoolHourRollup.hour >= start, PoolHourRollup.hour < end)).scalars()
    if all(docs.get(version_id).pricing == doc.pricing for version_id in used):
        return None
    return version.id, doc


@dataclass
class MonthForecasts:
    """One month's forecasts as of one hour: per tenant and per department, with the hourly costs behind them."""

    month: str
    start: datetime  # UTC, the month's first hour in the billing time zone
    end: datetime  # exclusive
    as_of: datetime  # hours before this were known
    currency: str
    tenants: dict[str, Forecast] = field(default_factory=dict)
    departments: dict[str, Forecast] = field(default_factory=dict)
    department_of: dict[str, str] = field(default_factory=dict)  # tenant -> department
    costs: HourlyCosts = field(default_factory=lambda: HourlyCosts(frozenset(), {}))  # as billed
    priced: HourlyCosts = field(default_factory=lambda: HourlyCosts(frozenset(), {}))  # at the prices in effect now
    error: str | None = None  # why there is no forecast (a GPU model without a price)

    def tenant_costs(self, tenant: str) -> dict[int, Decimal]:
        return self.costs.by_tenant.get(tenant, {})

    def department_costs(self, department: str, costs: HourlyCosts | None = None) -> dict[int, Decimal]:
        by_tenant = (costs or self.costs).by_tenant
        return _sum_series(by_tenant.get(t, {}) for t, d in self.department_of.items() if d == department)


def _sum_series(series) -> dict[int, Decimal]:
    out: dict[int, Decimal] = defaultdict(lambda: ZERO)
    for costs in series:
        for hour, cost in costs.items():
            out[hour] += cost
    return dict(out)


def current_month(now: datetime) -> str:
    """"YYYY-MM" of the billing month holding `now`."""
    local = aware(now).astimezone(get_settings().tz)
    return f"{local.year:04d}-{local.month:02d}"


# Answers are kept per (database, month, hour, data version) for ANSWER_TTL_S, as the allocation explorer's
# are: the data version changes with every ingested hour, rating and policy version, in any process.
ANSWER_TTL_S = 30.0
ANSWER_MAX = 16
_ANSWERS: TtlCache[MonthForecasts] = TtlCache(ttl_s=ANSWER_TTL_S, max_entries=ANSWER_MAX)


def month_forecasts(*, session: Session, as_of: datetime, month: str | None = None) -> MonthForecasts:
    """Every tenant's and department's month-end forecast of `month` (default: the month of `as_of`), as of the
    hour `as_of` falls in: hours before it are known, the rest of the month is forecast."""
    as_of = floor_hour(as_of)
    month = month or current_month(as_of)
    key = (str(session.get_bind().engine.url), month, as_of, data_version(session=session, at=as_of))
    return _ANSWERS.get(key, lambda: _month_forecasts(session=session, month=month, as_of=as_of))


def month_to_date(period, until: datetime) -> DateRange | None:
    """The days of `period` (a billing month) up to the hour `until`, as the allocation explorer reads them; None
    before the month starts."""
    if until <= period.start:
        return None
    tz = get_settings().tz
    return DateRange(start=period.start.astimezone(tz).date(), end=(until - timedelta(seconds=1)).astimezone(tz).date(),
                     tz=tz)


def _month_to_date(session: Session, window: DateRange | None, aggregate: str) -> tuple[str | None, dict[str, Decimal]]:
    """(currency, cost per tenant or department) over the month's days so far: the allocation's allocated rows."""
    if window is None:
        return None, {}
    answer = allocation(session=session, window=window, aggregate=aggregate, viewer=None)
    return answer.currency, {r.name: r.cost for r in answer.rows if r.kind == ALLOCATED}


def _month_forecasts(*, session: Session, month: str, as_of: datetime) -> MonthForecasts:
    tz = get_settings().tz
    period = parse_period(month)
    until = min(as_of, period.end)  # a month that has ended: every hour is known or missing
    window = month_to_date(period, until)
    answer = MonthForecasts(month=month, start=period.start, end=period.end, as_of=until, currency="USD")
    try:
        currency, tenant_mtd = _month_to_date(session, window, "tenant")
        _, department_mtd = _month_to_date(session, window, "department")
        departments = departments_at(session, period.end)
        history = dict(session=session, start=min(period.start, until - timedelta(days=HISTORY_DAYS)), end=until)
        costs = priced = hourly_costs(**history)
        in_effect = _pricing_in_effect(session, history["start"], until, until) if until < period.end else None
        if in_effect is not None:
            priced = _merged(costs, hourly_costs(**history, priced_as=in_effect))
    except AppError as exc:  # a GPU model without a price, two currencies in a month: rating refuses, so do we
        answer.error = exc.detail
        return answer
    except ValueError as exc:  # a stored policy document that no longer parses: pages must still render
        answer.error = f"the policy in effect cannot be read ({type(exc).__name__})"
        return answer
    answer.costs, answer.priced = costs, priced
    answer.currency = currency or _currency_of(session, until)
    answer.department_of = {t: d for t, d in departments.items() if t not in NOT_TENANTS}
    quantum = cents(answer.currency)
    common = dict(observed=costs.observed, month_start=epoch(period.start), month_end=epoch(period.end),
                  as_of=epoch(until), tz=tz, quantum=quantum)
    tenants = (set(answer.department_of) | set(tenant_mtd) | set(priced.by_tenant)) - NOT_TENANTS
    for tenant in sorted(tenants):
        answer.tenants[tenant] = forecast_month(costs=priced.by_tenant.get(tenant, {}),
                                                actual=tenant_mtd.get(tenant, ZERO), **common)
    for department in sorted(set(answer.department_of.values()) | set(department_mtd)):
        answer.departments[department] = forecast_month(costs=answer.department_costs(department, priced),
                                                        actual=department_mtd.get(department, ZERO), **common)
    return answer


def _currency_of(session: Session, at: datetime) -> str:
    doc = active_document(session=session, at=at)
    return doc.pricing.currency if doc is not None else "USD"


def window_remaining(*, session: Session, window: DateRange, aggregate: str, now: datetime,
                     visible: frozenset[str] | None = None) -> dict[str, Decimal]:
    """Per tenant (or department) the forecast cost of this month's hours not known yet, for an allocation window
    that runs through today; {} for any other window or aggregate (no forecast to add).

    `visible`: the tenants the caller may see (None: every tenant). A department's rest is then the sum of its
    visible tenants' rests only, as its row sums only their cost: a member never learns another tenant's forecast.
    """
    today = aware(now).astimezone(window.tz).date()
    if aggregate not in ("tenant", "department") or not window.start <= today <= window.end:
        return {}
    answer = month_forecasts(session=session, as_of=now)
    if answer.error:
        return {}
    return scoped_remaining(answer, aggregate=aggregate, visible=visible)


def scoped_remaining(answer: MonthForecasts, *, aggregate: str, visible: frozenset[str] | None) -> dict[str, Decimal]:
    """The forecast rest per tenant or department over the `visible` tenants only (None: all of them)."""
    if aggregate == "tenant":
        return {name: f.expected_remaining for name, f in answer.tenants.items() if visible is None or name in visible}
    if visible is None:
        return {name: f.expected_remaining for name, f in answer.departments.items()}
    out: dict[str, Decimal] = {}
    for tenant in sorted(visible & answer.tenants.keys()):
        department = answer.department_of.get(tenant, "unassigned")
        out[department] = out.get(department, ZERO) + answer.tenants[tenant].expected_remaining
    return out
