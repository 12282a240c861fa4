"""Rating (SPEC section 5): hourly rollups + the policy in effect each hour -> charge lines. Pure, no I/O.

Every pool-hour is priced on its own (cost C, capacity S, rate C/S per GPU-second) and its amounts are
folded into lines keyed by (account, pool, kind, class, service, policy version); a line is rounded
once, half-even to the currency's cents, after the whole period is summed.

Exact, per SPEC 5.7: a line's amount is the exact rational sum of its hourly terms, rounded once,
half-even, to the cent (`round_half_even`), so a line worth exactly 204.085 is 204.08 and the result is
the same for any order of hours. Nothing is quantised before that: each pool-hour's C is an exact
rational (`PriceSheet.hour_cost`: capex over depreciation years x 8760, decimal prices, kWh), its rate
C / S per micro-GPU-second is the integer `rate` over the integer `den` (C's denominator x S in
micro-GPU-seconds, the same for every hour of a segment with one capacity), covers f x S x share are
integers over a per-pool scale (f's and the weights' decimals x the weights' sum), and each usage row's,
hour's or breach minute's amount is an integer numerator over such a denominator. A line keeps its sum
as numerators per denominator (`rating_sums.Rational`: adding is integer addition), so one `Fraction`
per line is built and rounded in `finish`; C is summed the same way, so tenants' lines + platform balance
= C to the cent with the ROUNDING line holding the cents lost to rounding. Only quantities (GPU-hours and
breach minutes, to 6 decimals) and the `exact` drill-down (1e-20) are rounded otherwise.

Because every per-row and per-hour amount is an integer over a denominator shared by many hours, the same
sums can be taken by a database, grouped by denominator: `hour_rates` stores each pool-hour's `price`,
`hour_amounts` and `hour_breaches` once, and `rating_sql` sums them for stored periods and folds the sums with `fold_hours`,
`fold_hour_amounts`, `fold_overage`, `fold_usage`, `fold_breaches` and `finish`, shared with this
reference path, and is tested equal to it (tests/billing/test_rating_sql.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from decimal import ROUND_HALF_EVEN, Context, Decimal, Inexact, InvalidOperation, localcontext
from fractions import Fraction

from app.billing.pricing import MissingPrice, PriceSheet, cents
from app.billing.rating_sums import Credit, LineSums, PoolCost, Rational, TenantUse, UnpooledSums, UsageSums
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

__all__ = ["CurrencyMismatch", "MissingPrice", "RatingInputError", "pool_costs", "rate_period", "round_half_even"]

PRECISION = 60
EXACT = Decimal("1e-20")
ZERO = Decimal(0)
ONE = Decimal(1)

EXACT_DIGITS = 20  # EXACT = 1e-EXACT_DIGITS: breach-minute shares, and the `exact` drill-down's amounts
MICRO = 10**6  # micro-GPU-seconds per GPU-second
# amounts are converted from integers exactly, or not at all
_EXACT = Context(prec=PRECISION, rounding=ROUND_HALF_EVEN, traps=[Inexact, InvalidOperation])


def _seconds(micro: int) -> Decimal:
    """Integer micro-GPU-seconds as exact Decimal GPU-seconds."""
    return Decimal(micro).scaleb(-6, _EXACT)


def from_exact(scaled: int) -> Decimal:
    """An integer in 1e-20 (breach minutes' shares, an unattributed minute's penalty) as an exact Decimal."""
    return Decimal(scaled).scaleb(-EXACT_DIGITS, _EXACT)


def round_half_even(value: Fraction, quantum: Decimal) -> Decimal:
    """An exact value rounded once, half-even, to `quantum` (a power of ten: 0.01, 1, 1e-20) (SPEC 5.7)."""
    exponent = quantum.as_tuple().exponent
    scaled = value * 10**-exponent if exponent <= 0 else value / 10**exponent
    q, r = divmod(scaled.numerator, scaled.denominator)
    twice = 2 * r - scaled.denominator
    if twice > 0 or (twice == 0 and q % 2):
        q += 1
    return Decimal(q).scaleb(exponent, _EXACT)


def _gpu_hours(seconds: Decimal | Fraction, quantum: Decimal) -> Decimal:
    """GPU-seconds (exact Decimal, or a Fraction for covers) as GPU-hours rounded half-even to `quantum`."""
    if isinstance(seconds, Fraction):
        return round_half_even(seconds / SECONDS_PER_HOUR, quantum)
    return (seconds / SECONDS_PER_HOUR).quantize(quantum)


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
    weights: dict[str, tuple[tuple[str, Decimal], ...]]  # pool -> positive reservation weights
    multiplier: tuple[int, int]  # dark_multiplier as (integer, scale): integer / scale, scale a power of ten
    discount: tuple[int, int]  # dark_discount likewise
    # covers f x S x share exactly: pool -> q, and (tenant, integer) with cover = S (micro-GPU-s) x integer / q
    cover_scale: dict[str, int]
    cover_weights: dict[str, tuple[tuple[str, int], ...]]
    penalty: dict[str, Decimal]  # service -> penalty per breach minute
    klass: dict[str, str]  # tenant -> class

    @classmethod
    def of(cls, number: int, policy: PolicyDocument) -> _Version:
        pricing: Pricing = policy.pricing
        weights, scale, cover_weights = {}, {}, {}
        for pool in policy.pools:
            for tenant, weight in pool.reservations.items():
                if weight < 0:
                    raise RatingInputError(f"pools.{pool.name}.reservations.{tenant}", f"negative reservation weight {weight} (policy version {number})")
            positive = sorted((t, w) for t, w in pool.reservations.items() if w > 0)
            weights[pool.name] = tuple(positive)
            fraction, f_scale = _scaled(pool.reserved_fraction)
            digits = max((_scaled(w)[1] for _, w in positive), default=0)
            ints = [(t, int(w.scaleb(digits, _EXACT))) for t, w in positive]
            whole = sum(n for _, n in ints)
            scale[pool.name] = f_scale * whole if fraction and whole else 1
            cover_weights[pool.name] = tuple((t, fraction * n) for t, n in ints) if fraction and whole else ()
        return cls(
            number=number,
            policy=policy,
            sheet=PriceSheet.of(pricing),
            currency=pricing.currency,
            dark_multiplier=pricing.dark_time_multiplier,
            dark_discount=ONE - pricing.dark_time_multiplier,
            reserved_fraction={p.name: p.reserved_fraction for p in policy.pools},
            weights=weights,
            multiplier=_scaled(pricing.dark_time_multiplier),
            discount=_scaled(ONE - pricing.dark_time_multiplier),
            cover_scale=scale,
            cover_weights=cover_weights,
            penalty={s.service: s.penalty_per_breach_minute for s in policy.sla},
            klass={t.name: t.klass for t in policy.tenants},
        )


def _scaled(d: Decimal) -> tuple[int, int]:
    """A finite Decimal as (integer, scale), d = integer / scale exactly, scale a power of ten."""
    digits = max(0, -d.as_tuple().exponent)
    return int(d.scaleb(digits, _EXACT)), 10**digits


def pool_costs(pool_hours: Iterable[tuple[str, PriceSheet, Iterable[ModelEnergy]]], *, currency: str) -> dict[str, Decimal]:
    """C per pool over (pool, price sheet, models) hours, priced and rounded as `rate_period`'s cost_by_pool."""
    sums: dict[str, Rational] = {}
    for pool, sheet, models in pool_hours:
        sums.setdefault(pool, Rational()).add(*sheet.hour_cost(models))
    cent = cents(currency)
    return {pool: round_half_even(cost.value(), cent) for pool, cost in sorted(sums.items())}


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
        self.cost = Rational()
        self.first = self.last = -1
        self.capacities: dict[Decimal, int] = {}

    def line(self, key: tuple[str, str, str, str], quantity: Decimal | Fraction, first: int, last: int | None = None) -> LineSums:
        """The line `key`, its quantity and span grown by hours first..last (default: the one hour); the caller adds
        the amount."""
        last = first if last is None else last
        a = self.lines.get(key)
        if a is None:
            a = self.lines[key] = LineSums(first, last, quantity)
            return a
        a.quantity += quantity
        a.cover(first, last)
        return a

    def add(self, key: tuple[str, str, str, str], quantity: Decimal | Fraction, numerator: int, denominator: int,
            first: int, last: int | None = None) -> None:
        """Fold an exact amount numerator / denominator covering hours first..last into a line."""
        self.line(key, quantity, first, last).amount.add(numerator, denominator)


_CLASSES = frozenset({INFERENCE, TRAINING, PREPROCESSING, UNALLOCATED})
CLASSES = _CLASSES  # the workload classes a usage row may carry

UNPOOLED_HOUR = object()  # `Rater.price`: GPUs on nodes no pool names, counted and not priced


@dataclass(frozen=True, slots=True)
class HourAmounts:
    """What one priced pool-hour bills by the hour (`Rater.hour_amounts`), in exact integers."""

    idle: int  # capacity not used, micro-GPU-seconds
    dark: int  # used in dark time by other classes than inference, micro-GPU-seconds
    unused: int  # reserve (covers) not used by its inference tenants, in micro-GPU-seconds / the pool's cover scale
    overage: tuple[tuple[str, int], ...]  # (inference tenant, use above its cover, in the same unit)


@dataclass(frozen=True, slots=True)
class HourBreaches:
    """One priced pool-hour's breach minutes as billed (`Rater.hour_breaches`)."""

    penalties: tuple[tuple[str, str, str, Decimal, Fraction], ...]  # (account, klass, service, breach minutes, amount)
    credits: tuple[tuple[str, str, int], ...]  # (service, its tenant, minutes credited)
    unattributed: tuple[UnattributedBreach, ...]


@dataclass(frozen=True, slots=True)
class Priced:
    """One pool-hour as priced: its version and segment, and C and the rates exactly, as integers over `den`
    (C's denominator x S in micro-GPU-seconds): what each usage row's micro-GPU-seconds are multiplied by."""

    hour: RatingHour
    version: _Version
    seg: _Segment
    cost: int  # C = cost / den
    capacity_micro: int  # S in micro-GPU-seconds
    rate: int  # per micro-GPU-second: rate / den
    den: int
    dark_rate: int  # in dark time: dark_rate / dark_den (rate x the dark-time multiplier)
    dark_den: int


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
        self.covers_of: dict[tuple[int, str, Decimal], dict[str, int]] = {}  # (version, pool, S) -> tenant -> cover x scale
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
        used, dark_used, inference = self._rows(h, priced.seg.rows, priced, where)
        amounts = self.hour_amounts(priced, used, dark_used, inference)
        for tenant, over in amounts.overage:
            self.fold_overage(h.pool, priced.version.number, tenant, h.hour, h.hour, over, over * priced.rate, priced.den)
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
        seg = self._segment(pool, v.number)
        micro = capacity.scaleb(6)
        if micro != micro.to_integral_value():
            raise RatingInputError(f"{where}.capacity_gpu_seconds", "capacity cannot be rated exactly: it carries more than 6 decimals")
        cost, cost_den = v.sheet.hour_cost(h.models)
        s_micro = int(micro)
        den = cost_den * s_micro  # C / S per micro-GPU-second = cost / den
        multiplier, scale = v.multiplier
        return Priced(h, v, seg, cost * s_micro, s_micro, cost, den, cost * multiplier, den * scale)

    def covers(self, v: _Version, pool: str, capacity: Decimal) -> dict[str, int]:
        """Reserved GPU-seconds f x S x share per tenant of a pool-hour of capacity S, exactly, in micro-GPU-seconds
        / the pool's `cover_scale` (cached: the same every hour of a stable pool)."""
        covered = self.covers_of.get((v.number, pool, capacity))
        if covered is None:
            s_micro = int(capacity.scaleb(6))
            covered = self.covers_of[v.number, pool, capacity] = {tenant: s_micro * n for tenant, n in v.cover_weights[pool]}
        return covered

    def hour_amounts(self, p: Priced, used_micro: int, dark_micro: int, inference: dict[str, int]) -> HourAmounts:
        """What one priced pool-hour bills by the hour, from its GPU-seconds used (micro-GPU-seconds) in all, in
        dark time by other classes than inference, and per inference tenant: each inference tenant's use
        above its cover (line 2), the idle capacity and dark-time use (line 5), the reserve left unused."""
        covers = self.covers(p.version, p.hour.pool, p.hour.capacity_gpu_seconds)
        scale = p.version.cover_scale[p.hour.pool]
        covered = 0
        overage = []
        for tenant, micro in inference.items():
            gs = micro * scale
            within = min(covers.get(tenant, 0), gs)
            covered += within
            overage.append((tenant, gs - within))
        return HourAmounts(idle=p.capacity_micro - used_micro, dark=dark_micro, unused=sum(covers.values()) - covered,
                           overage=tuple(overage))

    def hour_lines(self, p: Priced, amounts: HourAmounts) -> None:
        """Lines 1 and 5 of one priced pool-hour from its `hour_amounts` (lines 2, 3, 4 and 6 are folded by the
        caller). Every amount is an exact product, rounded once per line in `finish`."""
        h, rate = p.hour, p.rate
        self.fold_hours(h.pool, p.version, h.capacity_gpu_seconds, 1, p.cost, p.den, h.hour, h.hour)
        self.fold_hour_amounts(
            h.pool, p.version.number, p.den,
            idle=(amounts.idle, amounts.idle * rate, h.hour, h.hour) if amounts.idle else None,
            dark=(amounts.dark, amounts.dark * rate, h.hour, h.hour) if amounts.dark else None,
            unused=(amounts.unused, amounts.unused * rate, h.hour, h.hour) if amounts.unused else None,
        )

    def _segment(self, pool: str, version: int) -> _Segment:
        seg = self.segments.get((pool, version))
        if seg is None:
            seg = self.segments[(pool, version)] = _Segment()
        return seg

    def fold_hours(self, pool: str, v: _Version, capacity: Decimal, hours: int, cost: int, den: int, first: int, last: int) -> None:
        """`hours` priced hours of one segment with capacity S, spanning first..last, their C summed (cost / den):
        the pool's C (and the version of its last hour, the rounding line's) and what line 1 (f x C x share over
        the segment, in `finish`) needs."""
        c = self.cost.get(pool)
        if c is None:
            c = self.cost[pool] = PoolCost(first, last, version=v.number)
        else:
            if first < c.first:
                c.first = first
            if last > c.last:
                c.last, c.version = last, v.number
        c.cost.add(cost, den)
        seg = self._segment(pool, v.number)
        seg.cost.add(cost, den)
        seg.capacities[capacity] = seg.capacities.get(capacity, 0) + hours
        if seg.first < 0 or first < seg.first:
            seg.first = first
        if last > seg.last:
            seg.last = last

    def fold_hour_amounts(self, pool: str, version: int, den: int, *, idle: tuple | None, dark: tuple | None,
                          unused: tuple | None) -> None:
        """Line 5's parts over a segment's hours of one rate denominator `den`, each (quantity, quantity x the hours'
        integer rates, first hour, last hour) or None when no hour had any: idle capacity (micro-GPU-seconds),
        dark-time use by other classes than inference (micro-GPU-seconds, discounted), and reserve left unused
        (micro-GPU-seconds / the pool's cover scale, credited back)."""
        v, seg = self.versions[version], self.segments[(pool, version)]
        if idle:
            seg.add((PLATFORM, LineKind.IDLE, "", ""), _seconds(idle[0]), idle[1], den, idle[2], idle[3])
        if dark:
            discount, scale = v.discount
            seg.add((PLATFORM, LineKind.DARK_DISCOUNT, "", ""), _seconds(dark[0]), dark[1] * discount, den * scale, dark[2], dark[3])
        if unused:
            scale = v.cover_scale[pool]
            seg.add((PLATFORM, LineKind.RESERVED_UNUSED, "", ""), Fraction(unused[0], scale * MICRO), -unused[1], den * scale,
                    unused[2], unused[3])

    def breaches(self, v: _Version, seg: _Segment, hour: int, pool: str, breaches: Iterable) -> None:
        """Line 4 of one priced pool-hour: each breach minute's penalty split by co-located GPU-seconds."""
        self.fold_breaches(v, seg, hour, pool, self.hour_breaches(v, hour, pool, breaches))

    def hour_breaches(self, v: _Version, hour: int, pool: str, breaches: Iterable) -> HourBreaches:
        """One priced pool-hour's breach minutes: each penalty split by co-located GPU-seconds (summed per account,
        class and service, exactly; each minute's share of the breach minute, a quantity, to 1e-20), the minutes
        credited to each service's tenant, and the minutes nobody was co-located in."""
        where = f"hours[{hour}:{pool}]"
        penalties: dict[tuple[str, str, str], list] = {}  # -> [breach minutes (Decimal), amount (Fraction)]
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
            per_second = Fraction(penalty) / Fraction(total)
            for tenant, gs in shares.items():
                if tenant == UNALLOCATED:
                    account, klass = PLATFORM, UNALLOCATED  # the platform carries unallocated use, and so its penalties
                else:
                    account, klass = tenant, v.klass.get(tenant, "")
                    if not klass:
                        raise RatingInputError(f"{at}.colocated.{tenant}", f"tenant {tenant!r} is not in policy version {v.number}")
                acc = penalties.setdefault((account, klass, b.service), [ZERO, Fraction(0)])
                acc[0] += (gs / total).quantize(EXACT)
                acc[1] += per_second * Fraction(gs)
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
            seg.add((account, LineKind.SLA_PENALTY, klass, service), quantity, amount.numerator, amount.denominator, first, last)
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
        return self._rows(h, {}, p, f"hours[{h.hour}:{h.pool}]")

    def _rows(self, h: RatingHour, rows: dict, p: Priced, where: str) -> tuple[int, int, dict[str, int]]:
        """Fold one pool-hour's usage rows; returns micro-GPU-seconds used, used in dark time, and per inference tenant.

        The hot loop, in exact integers: micro-GPU-seconds x the rate's numerator, summed per the rate's
        denominator (one per hour, shared by the segment's hours of one capacity).
        """
        hour, pool = h.hour, h.pool
        rate, den, dark_rate, dark_den = p.rate, p.den, p.dark_rate, p.dark_den
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
                    amount = a.amount
                    amount[dark_den] = amount.get(dark_den, 0) + gs * dark_rate
                else:
                    amount = a.amount
                    amount[den] = amount.get(den, 0) + gs * rate
        return used, dark_used, inference

    def fold_usage(self, pool: str, version: int, tenant: str, klass: str, dark: bool, sums: UsageSums) -> None:
        """Usage rows summed elsewhere (the database) over the priced hours of one segment, or over the
        unpooled hours of a version: what `_rows` and `_unpooled_rows` fold row by row. `sums.amount` is
        micro-GPU-seconds x the rates `price` gave those hours, per denominator; the rows were checked by the caller."""
        seg = self.segments.get((pool, version))
        if seg is None:  # no priced hour of this pool and version: its hours were unpooled
            key = (tenant, klass)
            self.unpooled_use[key] = self.unpooled_use.get(key, 0) + sums.gpu_seconds
            return
        if klass == INFERENCE:
            sums.amount = Rational()  # billed per hour by `hour_lines`, as `_rows` does
        a = seg.rows.get((tenant, klass, dark))
        if a is None:
            seg.rows[(tenant, klass, dark)] = sums
            return
        a.cover(sums.first, sums.last)
        a.gpu_seconds += sums.gpu_seconds
        a.amount.merge(sums.amount)
        a.activity += sums.activity
        a.samples += sums.samples

    def fold_overage(self, pool: str, version: int, tenant: str, first: int, last: int, over: int, amount: int, den: int) -> None:
        """Line 2 of hours first..last of a segment, one hour or summed elsewhere over hours of one rate denominator
        `den`: use above the cover (micro-GPU-seconds / the pool's cover scale) and its amount, that x the hours'
        integer rates."""
        scale = self.versions[version].cover_scale[pool]
        self.segments[(pool, version)].add(
            (tenant, LineKind.INFERENCE_OVERAGE, INFERENCE, ""), Fraction(over, scale * MICRO), amount, den * scale, first, last)

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
        owed = Fraction(fraction) * seg.cost.value() / Fraction(total) if total else Fraction(0)
        scale = v.cover_scale[pool] * MICRO
        for tenant, weight in v.weights[pool]:
            covered = sum(n * self.covers(v, pool, capacity)[tenant] for capacity, n in seg.capacities.items())
            line = seg.lines[(tenant, LineKind.RESERVED_FEE, INFERENCE, "")] = LineSums(seg.first, seg.last, Fraction(covered, scale))
            line.amount.add_fraction(owed * Fraction(weight))

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
                    seg.line((PLATFORM, LineKind.UNALLOCATED, UNALLOCATED, ""), gs, first, last).amount.merge(row.amount)
                else:
                    key = (tenant, LineKind.USAGE_DARK if dark else LineKind.USAGE_BUSY, klass, "")
                    seg.lines[key] = LineSums(first, last, gs, row.amount)
            for (account, kind, klass, service), line in seg.lines.items():
                qty, first, last = line.quantity, line.first, line.last
                rounded = round_half_even(line.amount.value(), cent)  # once, from the exact sum (SPEC 5.7)
                if kind == LineKind.SLA_PENALTY:
                    quantity, unit = qty.quantize(qunit), BREACH_MINUTE
                    penalties[(pool, service, version)] = penalties.get((pool, service, version), ZERO) + rounded
                else:
                    quantity, unit = _gpu_hours(qty, qunit), GPU_HOUR
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
            total = cost_by_pool[pool] = round_half_even(cost.value(), cent)
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
