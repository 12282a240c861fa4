"""Rating (SPEC section 5): hourly rollups + the policy in effect each hour -> charge lines. Pure, no I/O.

Every pool-hour is priced on its own (cost C, capacity S, rate C/S per GPU-second) and its amounts are
folded into lines keyed by (account, pool, kind, class, service, policy version); a line is rounded
once, half-even to the currency's cents, after the whole period is summed.

Why fixed-point quanta: adding numbers of ~50 significant digits is not associative, so a period
total could depend on the order hours arrive in. So every amount is exact: the rate is quantized to
1e-36 per GPU-second, and each usage row's `GPU-seconds x rate` (GPU-seconds carry 6 decimals), each
hour's idle, dark-discount, overage and unused-reserve `GPU-seconds x rate` (GPU-seconds above or
below a cover, which is quantized to 1e-20) are exact integer products, summed as Python integers
and rounded once per line (half-even to 1e-20, then to cents) in `finish`. Line 1 is f x C x share
with C summed exactly over the segment's hours (each C quantized to 1e-20), and SLA penalty shares
are quantized to 1e-20 per breach minute. Every sum is then exact, so the result is the same for any
order, and a line total is within 1e-20 of the exact SPEC value. The conservation identity holds to
~1e-18 before rounding, and the ROUNDING line absorbs the rest to the cent.

Because every per-row and per-hour amount is an exact sum of products, the same sums can be taken
by a database: `hour_rates` stores each pool-hour's `price`, `hour_amounts` and `hour_breaches` once,
and `rating_sql` sums them for stored periods and folds the sums with `fold_hours`,
`fold_hour_amounts`, `fold_overage`, `fold_usage`, `fold_breaches` and `finish`, shared with this
reference path, and is tested equal to it (tests/billing/test_rating_sql.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from decimal import ROUND_HALF_EVEN, Context, Decimal, Inexact, InvalidOperation, localcontext

from app.billing.pricing import MissingPrice, PriceSheet, cents
from app.billing.rating_sums import Credit, LineSums, PoolCost, TenantUse, UnpooledSums, UsageSums
from app.billing.types import (
    PLATFORM,
    QUANTITY,
    ChargeLine,
    LineKind,
    RatingHour,
    RatingResult,
    TenantUsage,
    UnattributedBreach,
    Unpooled,
    UnpooledUse,
)
from app.core.errors import FieldError, Invalid
from app.core.timeutil import SECONDS_PER_HOUR
from app.metrics.attribution import UNPOOLED
from app.metrics.types import ModelEnergy
from app.policy.document import UNALLOCATED, PolicyDocument, Pricing

__all__ = ["CurrencyMismatch", "MissingPrice", "RatingInputError", "pool_costs", "rate_period"]

PRECISION = 60
EXACT = Decimal("1e-20")
RATE = Decimal("1e-36")
ZERO = Decimal(0)
ONE = Decimal(1)

RATE_DIGITS = 36  # RATE = 1e-RATE_DIGITS
EXACT_DIGITS = 20  # EXACT = 1e-EXACT_DIGITS
ROW_DIGITS = 6 + RATE_DIGITS  # micro-GPU-seconds x a rate in 1e-36
COVER_DIGITS = EXACT_DIGITS + RATE_DIGITS  # GPU-seconds in 1e-20 (above or below a cover) x a rate
TO_COVER = 10 ** (EXACT_DIGITS - 6)  # micro-GPU-seconds -> 1e-20
# line totals are converted from integers exactly, or not at all
_EXACT = Context(prec=PRECISION, rounding=ROUND_HALF_EVEN, traps=[Inexact, InvalidOperation])


def _seconds(micro: int) -> Decimal:
    """Integer micro-GPU-seconds as exact Decimal GPU-seconds."""
    return Decimal(micro).scaleb(-6, _EXACT)


def from_exact(scaled: int) -> Decimal:
    """An integer in 1e-20 (GPU-seconds above or below a cover, C, an SLA share or penalty) as an exact Decimal."""
    return Decimal(scaled).scaleb(-EXACT_DIGITS, _EXACT)


INFERENCE, TRAINING, PREPROCESSING = "inference", "training", "preprocessing"
GPU_HOUR, BREACH_MINUTE = "GPU-hour", "breach-minute"


class RatingInputError(Invalid):
    """Rollups that cannot be rated as given (HTTP 422); nothing should be written."""

    def __init__(self, path: str, message: str):
        super().__init__(detail=f"cannot rate: {message}", errors=[FieldError(path=path, message=message)])


class CurrencyMismatch(RatingInputError):
    """The policy versions of one period price in different currencies."""


@dataclass(frozen=True)
class _Version:
    """What rating needs from one policy version, looked up once instead of per hour."""

    number: int
    policy: PolicyDocument
    sheet: PriceSheet
    currency: str
    dark_multiplier: Decimal
    dark_discount: Decimal  # 1 - dark_multiplier
    reserved_fraction: dict[str, Decimal]  # pool -> fraction
    shares: dict[str, tuple[tuple[str, Decimal], ...]]  # pool -> normalised reservation weights
    weights: dict[str, tuple[tuple[str, Decimal], ...]]  # pool -> positive reservation weights
    discount: tuple[int, int]  # dark_discount as (integer, digits): integer x 10^-digits
    penalty: dict[str, Decimal]  # service -> penalty per breach minute
    klass: dict[str, str]  # tenant -> class

    @classmethod
    def of(cls, number: int, policy: PolicyDocument) -> _Version:
        pricing: Pricing = policy.pricing
        shares, weights = {}, {}
        for pool in policy.pools:
            for tenant, weight in pool.reservations.items():
                if weight < 0:
                    raise RatingInputError(f"pools.{pool.name}.reservations.{tenant}", f"negative reservation weight {weight} (policy version {number})")
            positive = sorted((t, w) for t, w in pool.reservations.items() if w > 0)
            total = sum((w for _, w in positive), ZERO)
            shares[pool.name] = tuple((t, w / total) for t, w in positive)
            weights[pool.name] = tuple(positive)
        return cls(
            number=number,
            policy=policy,
            sheet=PriceSheet.of(pricing),
            currency=pricing.currency,
            dark_multiplier=pricing.dark_time_multiplier,
            dark_discount=ONE - pricing.dark_time_multiplier,
            reserved_fraction={p.name: p.reserved_fraction for p in policy.pools},
            shares=shares,
            weights=weights,
            discount=_scaled(ONE - pricing.dark_time_multiplier),
            penalty={s.service: s.penalty_per_breach_minute for s in policy.sla},
            klass={t.name: t.klass for t in policy.tenants},
        )


def _scaled(d: Decimal) -> tuple[int, int]:
    """A finite Decimal as (integer, digits), d = integer x 10^-digits, exactly."""
    digits = max(0, -d.as_tuple().exponent)
    return int(d.scaleb(digits, _EXACT)), digits


def _quantum(scaled: int, digits: int) -> Decimal:
    """An exact amount integer x 10^-digits, rounded half-even to 1e-20 (EXACT) as a Decimal."""
    q, r = divmod(scaled, 10 ** (digits - EXACT_DIGITS))
    twice = 2 * r - 10 ** (digits - EXACT_DIGITS)
    if twice > 0 or (twice == 0 and q % 2):
        q += 1
    return Decimal(q).scaleb(-EXACT_DIGITS, _EXACT)


def _hour_cost(sheet: PriceSheet, models: Iterable[ModelEnergy]) -> Decimal:
    """C of one pool-hour, exact at 1e-20 (so a period's sum does not depend on the order of hours)."""
    cost = ZERO
    for m in models:
        cost += sheet.model_cost(m)
    return cost.quantize(EXACT)


def pool_costs(pool_hours: Iterable[tuple[str, PriceSheet, Iterable[ModelEnergy]]], *, currency: str) -> dict[str, Decimal]:
    """C per pool over (pool, price sheet, models) hours, priced and rounded as `rate_period`'s cost_by_pool."""
    with rating_context():
        sums: dict[str, Decimal] = {}
        for pool, sheet, models in pool_hours:
            sums[pool] = sums.get(pool, ZERO) + _hour_cost(sheet, models)
        cent = cents(currency)
        return {pool: cost.quantize(cent) for pool, cost in sorted(sums.items())}


@contextmanager
def rating_context() -> Iterator[None]:
    """The Decimal context every rating step runs in: 60 digits, half-even."""
    with localcontext(prec=PRECISION, rounding=ROUND_HALF_EVEN):
        yield


def rate_period(hours: Iterable[RatingHour], *, period_start: int, period_end: int, exact: bool = False) -> RatingResult:
    """Rate the pool-hours of one period [period_start, period_end) into lines, usage and pool costs.

    `exact`: leave line amounts unrounded (at 1e-20), for the per-day drill-down of an invoice line,
    whose days are rounded together so that they add up to the line (`app.billing.line_days`).
    """
    with rating_context():
        rater = Rater(period_start, period_end)
        for hour in hours:
            rater.add(hour)
        return rater.finish(exact=exact)


class _Segment:
    """One pool under one policy version: the unit lines are keyed and split by."""

    __slots__ = ("rows", "lines", "cost", "first", "last", "capacities")

    def __init__(self) -> None:
        self.rows: dict[tuple[str, str, bool], UsageSums] = {}  # (tenant, klass, dark)
        self.lines: dict[tuple[str, str, str, str], LineSums] = {}  # (account, kind, klass, service)
        # its priced hours: C summed (line 1 is f x C x share), span, and how many hours had each capacity S
        self.cost = ZERO
        self.first = self.last = -1
        self.capacities: dict[Decimal, int] = {}

    def add(self, key: tuple[str, str, str, str], quantity: Decimal, amount: Decimal, first: int, last: int | None = None) -> None:
        """Fold an amount covering hours first..last (default: the one hour) into a line."""
        last = first if last is None else last
        a = self.lines.get(key)
        if a is None:
            self.lines[key] = LineSums(first, last, quantity, amount)
            return
        a.quantity += quantity
        a.amount += amount
        a.cover(first, last)

    def add_exact(self, key: tuple[str, str, str, str], quantity: Decimal, exact: int, digits: int, first: int, last: int | None = None) -> None:
        """Fold an exact amount (exact x 10^-digits, the same digits for every amount of the line) into a line."""
        last = first if last is None else last
        a = self.lines.get(key)
        if a is None:
            self.lines[key] = LineSums(first, last, quantity, ZERO, exact, digits)
            return
        a.quantity += quantity
        a.exact += exact
        a.cover(first, last)


_CLASSES = frozenset({INFERENCE, TRAINING, PREPROCESSING, UNALLOCATED})
CLASSES = _CLASSES  # the workload classes a usage row may carry

UNPOOLED_HOUR = object()  # `Rater.price`: GPUs on nodes no pool names, counted and not priced


@dataclass(frozen=True, slots=True)
class HourAmounts:
    """What one priced pool-hour bills by the hour (`Rater.hour_amounts`), in exact integers."""

    idle: int  # capacity not used, micro-GPU-seconds
    dark: int  # used in dark time by other classes than inference, micro-GPU-seconds
    unused: int  # reserve (covers) not used by its inference tenants, 1e-20 GPU-seconds
    overage: tuple[tuple[str, int], ...]  # (inference tenant, use above its cover in 1e-20)


@dataclass(frozen=True, slots=True)
class HourBreaches:
    """One priced pool-hour's breach minutes as billed (`Rater.hour_breaches`)."""

    penalties: tuple[tuple[str, str, str, Decimal, Decimal], ...]  # (account, klass, service, breach minutes, amount)
    credits: tuple[tuple[str, str, int], ...]  # (service, its tenant, minutes credited)
    unattributed: tuple[UnattributedBreach, ...]


@dataclass(frozen=True, slots=True)
class Priced:
    """One pool-hour as priced: its version and segment, C, and the rates per GPU-second (the last two
    as integers in 1e-36: what each usage row's micro-GPU-seconds are multiplied by)."""

    hour: RatingHour
    version: _Version
    seg: _Segment
    cost: Decimal
    capacity_micro: int  # S in micro-GPU-seconds
    rate_int: int
    dark_int: int


class Rater:
    """Streams pool-hours into per-segment accumulators; memory is O(lines), time O(rows)."""

    def __init__(self, period_start: int, period_end: int):
        self.period_start, self.period_end = period_start, period_end
        self.versions: dict[int, _Version] = {}
        self.currency: tuple[str, int] | None = None  # (currency, first version that used it)
        self.seen: set[tuple[int, str]] = set()
        self.segments: dict[tuple[str, int], _Segment] = {}  # (pool, version)
        self.cost: dict[str, PoolCost] = {}  # pool -> C
        self.credits: dict[tuple[str, str, int], Credit] = {}  # (pool, service, version)
        self.unattributed: list[UnattributedBreach] = []
        self.covers_of: dict[tuple[int, str, Decimal], dict[str, int]] = {}  # (version, pool, S) -> tenant -> cover (1e-20)
        self.missing: dict[str, list[int]] = {}
        self.missing_versions: dict[str, set[int]] = {}
        # nodes no pool names: capacity, and (tenant, klass) -> micro-GPU-s
        self.unpooled = UnpooledSums()
        self.unpooled_use: dict[tuple[str, str], int] = {}

    def _version(self, h: RatingHour) -> _Version:
        return self.version(h.policy_version, h.policy)

    def version(self, number: int, policy: PolicyDocument) -> _Version:
        """Policy version `number` as rating uses it; one period is rated in one currency."""
        v = self.versions.get(number)
        if v is None:
            v = self.versions[number] = _Version.of(number, policy)
            if self.currency is None:
                self.currency = (v.currency, v.number)
            elif self.currency[0] != v.currency:
                first, first_version = self.currency
                raise CurrencyMismatch(
                    "pricing.currency",
                    f"one period must be rated in one currency: policy version {first_version} prices in {first}, "
                    f"version {v.number} in {v.currency}",
                )
        elif v.policy is not policy and v.policy != policy:
            raise RatingInputError("policy", f"two different documents given for policy version {number}")
        return v

    def add(self, h: RatingHour) -> None:
        """Price one pool-hour and fold its amounts into the period's lines."""
        where = f"hours[{h.hour}:{h.pool}]"
        priced = self.price(h)
        if priced is None:
            return
        if priced is UNPOOLED_HOUR:
            self._unpooled_rows(h, where)
            return
        used, dark_used, inference = self._rows(h, priced.seg.rows, priced.rate_int, priced.dark_int, where)
        amounts = self.hour_amounts(priced, used, dark_used, inference)
        for tenant, over in amounts.overage:
            self.fold_overage(h.pool, priced.version.number, tenant, h.hour, h.hour, over, over * priced.rate_int)
        self.hour_lines(priced, amounts)
        self.breaches(priced.version, priced.seg, h.hour, h.pool, h.breaches)

    def price(self, h: RatingHour) -> Priced | object | None:
        """Check one pool-hour and price it: C, the rates, its segment. Its usage is folded by the caller.

        Returns None for an hour that is not rated (no GPUs, or a model without a price: recorded for
        `finish`), UNPOOLED_HOUR for GPUs on nodes no pool names (capacity counted, nothing priced).
        """
        hour, pool = h.hour, h.pool
        where = f"hours[{hour}:{pool}]"
        if not self.period_start <= hour < self.period_end:
            raise RatingInputError(f"{where}.hour", f"hour {hour} lies outside the period [{self.period_start}, {self.period_end})")
        if (hour, pool) in self.seen:
            raise RatingInputError(where, f"pool {pool!r} hour {hour} given twice")
        self.seen.add((hour, pool))
        if h.gpus == 0:
            return None
        v = self._version(h)
        if pool == UNPOOLED and pool not in v.reserved_fraction:
            self._unpooled_hour(h)
            return UNPOOLED_HOUR
        if pool not in v.reserved_fraction:
            raise RatingInputError(f"{where}.pool", f"pool {pool!r} is not in policy version {v.number}")
        capacity = h.capacity_gpu_seconds
        if capacity <= 0:
            raise RatingInputError(f"{where}.capacity_gpu_seconds", f"pool {pool!r} has {h.gpus} GPUs but capacity {capacity}")

        unpriced = [m.model for m in h.models if m.model not in v.sheet.fixed]
        if unpriced:
            # keep scanning the remaining hours so the error names every model and hour at once
            for model in unpriced:
                self.missing.setdefault(model, []).append(hour)
                self.missing_versions.setdefault(model, set()).add(v.number)
            return None
        cost = _hour_cost(v.sheet, h.models)
        seg = self._segment(pool, v.number)
        micro = capacity.scaleb(6)
        if micro != micro.to_integral_value():
            raise RatingInputError(f"{where}.capacity_gpu_seconds", "capacity cannot be rated exactly: it carries more than 6 decimals")
        rate = (cost / capacity).quantize(RATE)
        dark_rate = (rate * v.dark_multiplier).quantize(RATE)
        return Priced(h, v, seg, cost, int(micro), int(rate.scaleb(RATE_DIGITS)), int(dark_rate.scaleb(RATE_DIGITS)))

    def covers(self, v: _Version, pool: str, capacity: Decimal) -> dict[str, int]:
        """Reserved GPU-seconds f x S x share per tenant of a pool-hour of capacity S, in 1e-20 (cached: the
        same every hour of a stable pool)."""
        covered = self.covers_of.get((v.number, pool, capacity))
        if covered is None:
            fraction = v.reserved_fraction[pool]
            covered = self.covers_of[v.number, pool, capacity] = {
                tenant: int((fraction * capacity * share).quantize(EXACT).scaleb(EXACT_DIGITS)) for tenant, share in v.shares[pool]
            } if fraction else {}
        return covered

    def hour_amounts(self, p: Priced, used_micro: int, dark_micro: int, inference: dict[str, int]) -> HourAmounts:
        """What one priced pool-hour bills by the hour, from its GPU-seconds used (micro-GPU-seconds) in all, in
        dark time by other classes than inference, and per inference tenant: each inference tenant's use
        above its cover (line 2), the idle capacity and dark-time use (line 5), the reserve left unused."""
        covers = self.covers(p.version, p.hour.pool, p.hour.capacity_gpu_seconds)
        covered = 0
        overage = []
        for tenant, micro in inference.items():
            gs = micro * TO_COVER
            within = min(covers.get(tenant, 0), gs)
            covered += within
            overage.append((tenant, gs - within))
        return HourAmounts(idle=p.capacity_micro - used_micro, dark=dark_micro, unused=sum(covers.values()) - covered,
                           overage=tuple(overage))

    def hour_lines(self, p: Priced, amounts: HourAmounts) -> None:
        """Lines 1 and 5 of one priced pool-hour from its `hour_amounts` (lines 2, 3, 4 and 6 are folded by the
        caller). Every amount is an exact product, rounded once per line in `finish`."""
        h, rate = p.hour, p.rate_int
        self.fold_hours(h.pool, p.version, h.capacity_gpu_seconds, 1, p.cost, h.hour, h.hour)
        self.fold_hour_amounts(
            h.pool, p.version.number,
            idle=(amounts.idle, amounts.idle * rate, h.hour, h.hour) if amounts.idle else None,
            dark=(amounts.dark, amounts.dark * rate, h.hour, h.hour) if amounts.dark else None,
            unused=(amounts.unused, amounts.unused * rate, h.hour, h.hour) if amounts.unused else None,
        )

    def _segment(self, pool: str, version: int) -> _Segment:
        seg = self.segments.get((pool, version))
        if seg is None:
            seg = self.segments[(pool, version)] = _Segment()
        return seg

    def fold_hours(self, pool: str, v: _Version, capacity: Decimal, hours: int, cost: Decimal, first: int, last: int) -> None:
        """`hours` priced hours of one segment with capacity S, spanning first..last, their C summed: the pool's
        C (and the version of its last hour, the rounding line's) and what line 1 (f x C x share over the
        segment, in `finish`) needs."""
        c = self.cost.get(pool)
        if c is None:
            self.cost[pool] = PoolCost(first, last, cost, v.number)
        else:
            c.cost += cost
            if first < c.first:
                c.first = first
            if last > c.last:
                c.last, c.version = last, v.number
        seg = self._segment(pool, v.number)
        seg.cost += cost
        seg.capacities[capacity] = seg.capacities.get(capacity, 0) + hours
        if seg.first < 0 or first < seg.first:
            seg.first = first
        if last > seg.last:
            seg.last = last

    def fold_hour_amounts(self, pool: str, version: int, *, idle: tuple | None, dark: tuple | None, unused: tuple | None) -> None:
        """Line 5's parts over a segment's hours, each (quantity, quantity x the hours' integer rates, first hour,
        last hour) or None when no hour had any: idle capacity (micro-GPU-seconds), dark-time use by other
        classes than inference (micro-GPU-seconds, discounted), and reserve left unused (1e-20, credited back)."""
        v, seg = self.versions[version], self.segments[(pool, version)]
        if idle:
            seg.add_exact((PLATFORM, LineKind.IDLE, "", ""), _seconds(idle[0]), idle[1], ROW_DIGITS, idle[2], idle[3])
        if dark:
            discount, digits = v.discount
            seg.add_exact((PLATFORM, LineKind.DARK_DISCOUNT, "", ""), _seconds(dark[0]), dark[1] * discount, ROW_DIGITS + digits,
                          dark[2], dark[3])
        if unused:
            seg.add_exact((PLATFORM, LineKind.RESERVED_UNUSED, "", ""), from_exact(unused[0]), -unused[1], COVER_DIGITS,
                          unused[2], unused[3])

    def breaches(self, v: _Version, seg: _Segment, hour: int, pool: str, breaches: Iterable) -> None:
        """Line 4 of one priced pool-hour: each breach minute's penalty split by co-located GPU-seconds."""
        self.fold_breaches(v, seg, hour, pool, self.hour_breaches(v, hour, pool, breaches))

    def hour_breaches(self, v: _Version, hour: int, pool: str, breaches: Iterable) -> HourBreaches:
        """One priced pool-hour's breach minutes: each penalty split by co-located GPU-seconds (summed per account,
        class and service, each minute's share quantized to 1e-20), the minutes credited to each service's
        tenant, and the minutes nobody was co-located in."""
        where = f"hours[{hour}:{pool}]"
        penalties: dict[tuple[str, str, str], list[Decimal]] = {}
        credits: dict[str, list] = {}  # service -> [tenant, minutes]
        unattributed = []
        for i, b in enumerate(breaches):
            at = f"{where}.breaches[{i}]"
            if b.pool != pool:
                raise RatingInputError(f"{at}.pool", f"a breach of pool {b.pool!r} was given with pool {pool!r}")
            penalty = v.penalty.get(b.service)
            if penalty is None:
                raise RatingInputError(f"{at}.service", f"service {b.service!r} has no SLA in policy version {v.number}")
            shares: dict[str, Decimal] = {}
            for tenant, gs in b.colocated:
                if gs > 0:
                    shares[tenant] = shares.get(tenant, ZERO) + gs
            total = sum(shares.values(), ZERO)
            if not total:
                unattributed.append(UnattributedBreach(service=b.service, pool=pool, minute_end=b.minute_end, penalty=penalty))
                continue
            for tenant, gs in shares.items():
                if tenant == UNALLOCATED:
                    account, klass = PLATFORM, UNALLOCATED  # the platform carries unallocated use, and so its penalties
                else:
                    account, klass = tenant, v.klass.get(tenant, "")
                    if not klass:
                        raise RatingInputError(f"{at}.colocated.{tenant}", f"tenant {tenant!r} is not in policy version {v.number}")
                acc = penalties.setdefault((account, klass, b.service), [ZERO, ZERO])
                acc[0] += (gs / total).quantize(EXACT)
                acc[1] += (penalty * gs / total).quantize(EXACT)
            credit = credits.setdefault(b.service, [b.service_tenant, 0])
            if credit[0] != b.service_tenant:
                raise RatingInputError(f"{at}.service_tenant",
                                       f"service {b.service!r} is credited to both {credit[0]!r} and {b.service_tenant!r}")
            credit[1] += 1
        return HourBreaches(penalties=tuple((*key, q, a) for key, (q, a) in penalties.items()),
                            credits=tuple((service, tenant, n) for service, (tenant, n) in credits.items()),
                            unattributed=tuple(unattributed))

    def fold_breaches(self, v: _Version, seg: _Segment, first: int, pool: str, hb: HourBreaches, last: int | None = None) -> None:
        """`hour_breaches` of one pool-hour, or summed over a segment's hours first..last, into lines 4 and the credits."""
        last = first if last is None else last
        for account, klass, service, quantity, amount in hb.penalties:
            seg.add((account, LineKind.SLA_PENALTY, klass, service), quantity, amount, first, last)
        for service, tenant, minutes in hb.credits:
            ck = (pool, service, v.number)
            c = self.credits.get(ck)
            if c is None:
                self.credits[ck] = Credit(first, last, tenant, minutes)
                continue
            if c.tenant != tenant:
                raise RatingInputError(f"hours[{first}:{pool}].breaches.service_tenant",
                                       f"service {service!r} is credited to both {c.tenant!r} and {tenant!r}")
            c.minutes += minutes
            c.cover(first, last)
        self.unattributed.extend(hb.unattributed)

    def check_unpooled(self, h: RatingHour) -> None:
        """An unpooled hour's usage rows checked as `add` checks them (their use is summed elsewhere)."""
        self._unpooled_rows(h, f"hours[{h.hour}:{h.pool}]")

    def hour_use(self, p: Priced) -> tuple[int, int, dict[str, int]]:
        """A priced pool-hour's usage rows checked and summed (what `hour_amounts` takes), folded nowhere."""
        h = p.hour
        return self._rows(h, {}, p.rate_int, p.dark_int, f"hours[{h.hour}:{h.pool}]")

    def _rows(self, h: RatingHour, rows: dict, rate: int, dark_rate: int, where: str) -> tuple[int, int, dict[str, int]]:
        """Fold one pool-hour's usage rows; returns micro-GPU-seconds used, used in dark time, and per inference tenant.

        The hot loop, in exact integers: micro-GPU-seconds (1e-6) x the rate in 1e-36 per GPU-second
        is the amount in 1e-42, the same exact product the Decimal form would give, at a fraction
        of the cost. `rate`/`dark_rate` are those rates as integers.
        """
        hour, pool = h.hour, h.pool
        used = dark_used = 0
        inference: dict[str, int] = {}
        for usage in (self._micro(h, where), h.micro_usage) if h.usage else (h.micro_usage,):
            for row in usage:
                r_hour, r_pool, tenant, klass, dark, gs, activity, samples = row
                if r_pool != pool or r_hour != hour or gs < 0 or klass not in _CLASSES:
                    self._bad_row(where, h, row)
                key = (tenant, klass, dark)
                a = rows.get(key)
                if a is None:
                    a = rows[key] = UsageSums(hour, hour)
                elif hour > a.last:
                    a.last = hour
                elif hour < a.first:
                    a.first = hour
                a.gpu_seconds += gs
                used += gs
                a.activity += activity
                a.samples += samples
                if klass == INFERENCE:
                    inference[tenant] = inference.get(tenant, 0) + gs
                elif dark:
                    dark_used += gs
                    a.amount += gs * dark_rate
                else:
                    a.amount += gs * rate
        return used, dark_used, inference

    def fold_usage(self, pool: str, version: int, tenant: str, klass: str, dark: bool, sums: UsageSums) -> None:
        """Usage rows summed elsewhere (the database) over the priced hours of one segment, or over the
        unpooled hours of a version: what `_rows` and `_unpooled_rows` fold row by row. `sums.amount` is
        micro-GPU-seconds x the rates `price` gave those hours; the rows were checked by the caller."""
        seg = self.segments.get((pool, version))
        if seg is None:  # no priced hour of this pool and version: its hours were unpooled
            key = (tenant, klass)
            self.unpooled_use[key] = self.unpooled_use.get(key, 0) + sums.gpu_seconds
            return
        if klass == INFERENCE:
            sums.amount = 0  # billed per hour by `hour_lines`, as `_rows` does
        a = seg.rows.get((tenant, klass, dark))
        if a is None:
            seg.rows[(tenant, klass, dark)] = sums
            return
        a.cover(sums.first, sums.last)
        a.gpu_seconds += sums.gpu_seconds
        a.amount += sums.amount
        a.activity += sums.activity
        a.samples += sums.samples

    def fold_overage(self, pool: str, version: int, tenant: str, first: int, last: int, over: int, amount: int) -> None:
        """Line 2 summed elsewhere over a segment's hours: what `overage` folds hour by hour (use above the
        cover in 1e-20, and its amount: that x the hours' integer rates)."""
        self.segments[(pool, version)].add_exact(
            (tenant, LineKind.INFERENCE_OVERAGE, INFERENCE, ""), from_exact(over), amount, COVER_DIGITS, first, last)

    def _unpooled_hour(self, h: RatingHour) -> None:
        self.fold_unpooled_hour(h.gpus, h.capacity_gpu_seconds)

    def fold_unpooled_hour(self, gpus: int, capacity: Decimal) -> None:
        """GPUs on nodes the policy does not know: count capacity (and use, by the caller), price nothing, never refuse."""
        acc = self.unpooled
        acc.hours += 1
        acc.max_gpus = max(acc.max_gpus, gpus)
        acc.capacity += capacity

    def _unpooled_rows(self, h: RatingHour, where: str) -> None:
        for usage in (self._micro(h, where), h.micro_usage) if h.usage else (h.micro_usage,):
            for row in usage:
                r_hour, r_pool, tenant, klass, _dark, gs = row[:6]
                if r_pool != h.pool or r_hour != h.hour or gs < 0 or klass not in _CLASSES:
                    self._bad_row(where, h, row)
                self.unpooled_use[(tenant, klass)] = self.unpooled_use.get((tenant, klass), 0) + gs

    @staticmethod
    def _micro(h: RatingHour, where: str) -> list[tuple]:
        """`usage` rows as micro_usage tuples; GPU-seconds finer than 1e-6 cannot be rated exactly."""
        out = []
        for r in h.usage:
            micro = r.gpu_seconds.scaleb(6)
            if micro != micro.to_integral_value():
                raise RatingInputError(f"{where}.usage", "usage cannot be rated exactly: GPU-seconds carry too many digits (rollups hold 6 decimals)")
            activity = round(r.activity_sum * 1e9) if r.activity_samples else 0
            out.append((h.hour, r.pool, r.tenant, r.klass, r.dark, int(micro), activity, r.activity_samples))
        return out

    @staticmethod
    def _bad_row(where: str, h: RatingHour, row: tuple) -> None:
        r_hour, r_pool, tenant, klass, _dark, gs, _activity, _samples = row
        if r_pool != h.pool:
            raise RatingInputError(f"{where}.usage", f"a usage row of pool {r_pool!r} was given with pool {h.pool!r}")
        if r_hour != h.hour:
            raise RatingInputError(f"{where}.usage", f"a usage row of hour {r_hour} was given with hour {h.hour}")
        if gs < 0:
            raise RatingInputError(f"{where}.usage.{tenant}.gpu_seconds", f"negative GPU-seconds {_seconds(gs)}")
        raise RatingInputError(f"{where}.usage.{tenant}.klass", f"unknown workload class {klass!r}")

    def _fees(self, pool: str, version: int, seg: _Segment) -> None:
        """Line 1 of a segment: f x C x share over its hours (C summed exactly), for the covers f x S x share."""
        v = self.versions[version]
        fraction = v.reserved_fraction[pool]
        if not fraction or not seg.capacities:
            return
        total = sum((w for _, w in v.weights[pool]), ZERO)
        owed = fraction * seg.cost
        for tenant, weight in v.weights[pool]:
            covered = sum(n * self.covers(v, pool, capacity)[tenant] for capacity, n in seg.capacities.items())
            seg.lines[(tenant, LineKind.RESERVED_FEE, INFERENCE, "")] = LineSums(
                seg.first, seg.last, from_exact(covered), (owed * weight / total).quantize(EXACT))

    def finish(self, *, exact: bool = False) -> RatingResult:
        """Round each line once, add the credits and rounding lines, and sort deterministically."""
        if self.missing:
            raise MissingPrice(self.missing, self.missing_versions)
        currency = self.currency[0] if self.currency else Pricing.model_fields["currency"].default
        cent = EXACT if exact else cents(currency)
        qunit = EXACT if exact else QUANTITY
        lines: list[ChargeLine] = []
        charged: dict[str, Decimal] = {}  # pool -> sum of rounded charge and balance lines
        penalties: dict[tuple[str, str, int], Decimal] = {}  # (pool, service, version) -> sum of rounded penalties
        usage: dict[tuple[str, str, str], TenantUse] = {}  # (tenant, pool, klass)
        for (pool, version), seg in self.segments.items():
            self._fees(pool, version, seg)
            for (tenant, klass, dark), row in seg.rows.items():
                gs, first, last = _seconds(row.gpu_seconds), row.first, row.last
                u = usage.get((tenant, pool, klass))
                if u is None:
                    u = usage[(tenant, pool, klass)] = TenantUse()
                if dark:
                    u.dark += gs
                else:
                    u.busy += gs
                u.activity += row.activity
                u.samples += row.samples
                if klass == INFERENCE:
                    continue  # billed through lines 1 and 2, per hour
                if klass == UNALLOCATED:  # one platform line, whatever namespaces and busy/dark it came from
                    seg.add_exact((PLATFORM, LineKind.UNALLOCATED, UNALLOCATED, ""), gs, row.amount, ROW_DIGITS, first, last)
                else:
                    key = (tenant, LineKind.USAGE_DARK if dark else LineKind.USAGE_BUSY, klass, "")
                    seg.lines[key] = LineSums(first, last, gs, ZERO, row.amount, ROW_DIGITS)
            for (account, kind, klass, service), line in seg.lines.items():
                qty, amount, first, last = line.quantity, line.amount, line.first, line.last
                if line.digits:
                    amount += _quantum(line.exact, line.digits)
                rounded = amount.quantize(EXACT).quantize(cent)
                if kind == LineKind.SLA_PENALTY:
                    quantity, unit = qty.quantize(qunit), BREACH_MINUTE
                    penalties[(pool, service, version)] = penalties.get((pool, service, version), ZERO) + rounded
                else:
                    quantity, unit = (qty / SECONDS_PER_HOUR).quantize(qunit), GPU_HOUR
                    charged[pool] = charged.get(pool, ZERO) + rounded
                lines.append(ChargeLine(account, pool, kind, klass, version, first, last + SECONDS_PER_HOUR, quantity, unit, rounded, service))

        for (pool, service, version), credit in self.credits.items():
            tenant, minutes, first, last = credit.tenant, credit.minutes, credit.first, credit.last
            # the credit mirrors the rounded penalties exactly, so transfers net to zero to the cent
            amount = -penalties[(pool, service, version)]
            klass = self.versions[version].klass.get(tenant, INFERENCE)
            lines.append(ChargeLine(tenant, pool, LineKind.SLA_CREDIT, klass, version, first, last + SECONDS_PER_HOUR, Decimal(minutes), BREACH_MINUTE, amount, service))

        # one rounding line per pool for the whole period (conservation is per pool-month), under the
        # version of the pool's last hour
        cost_by_pool: dict[str, Decimal] = {}
        for pool, c in sorted(self.cost.items()):
            cost, first, last, version = c.cost, c.first, c.last, c.version
            total = cost_by_pool[pool] = cost.quantize(cent)
            residue = total - charged.get(pool, ZERO)
            lines.append(ChargeLine(PLATFORM, pool, LineKind.ROUNDING, "", version, first, last + SECONDS_PER_HOUR, ZERO.quantize(QUANTITY), GPU_HOUR, residue))

        lines.sort(key=lambda x: (x.account, x.pool, x.kind, x.klass, x.service, x.policy_version, x.charge_start))
        tenant_usage = [
            TenantUsage(
                tenant=tenant,
                pool=pool,
                klass=klass,
                busy_gpu_hours=(u.busy / SECONDS_PER_HOUR).quantize(QUANTITY),
                dark_gpu_hours=(u.dark / SECONDS_PER_HOUR).quantize(QUANTITY),
                efficiency=(u.activity / (u.samples * 1_000_000_000)) if u.samples else None,
                activity_samples=u.samples,
            )
            for (tenant, pool, klass), u in sorted(usage.items())
        ]
        unattributed = sorted(self.unattributed, key=lambda u: (u.pool, u.service, u.minute_end))
        hours, max_gpus, capacity = self.unpooled.hours, self.unpooled.max_gpus, self.unpooled.capacity
        unpooled = Unpooled(
            hours=hours, max_gpus=max_gpus, capacity_gpu_hours=(capacity / SECONDS_PER_HOUR).quantize(QUANTITY),
            usage=tuple(
                UnpooledUse(tenant, klass, (_seconds(gs) / SECONDS_PER_HOUR).quantize(QUANTITY))
                for (tenant, klass), gs in sorted(self.unpooled_use.items())
            ),
        )
        return RatingResult(currency=currency, lines=lines, usage=tenant_usage, unattributed=unattributed,
                            cost_by_pool=cost_by_pool, unpooled=unpooled)
