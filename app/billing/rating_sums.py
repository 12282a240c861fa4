"""Rating's named accumulators: what a pool-hour folds into, in exact integers, Decimals or rationals (no I/O)."""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from fractions import Fraction
from math import lcm

ZERO = Decimal(0)


class Rational(dict):
    """An exact sum of rationals held as {denominator: sum of numerators}: adding a term of a denominator seen
    before is one integer addition (the hours of a segment share a few), the one `Fraction` is built at the end."""

    __slots__ = ()

    def add(self, numerator: int, denominator: int) -> None:
        if numerator:
            self[denominator] = self.get(denominator, 0) + numerator

    def add_fraction(self, value: Fraction) -> None:
        self.add(value.numerator, value.denominator)

    def merge(self, other: Rational) -> None:
        for denominator, numerator in other.items():
            self.add(numerator, denominator)

    def value(self) -> Fraction:
        """The sum, over the denominators' lcm: one integer sum and one reduction, not one per term."""
        if not self:
            return Fraction(0)
        common = lcm(*self)
        return Fraction(sum(n * (common // d) for d, n in self.items()), common)


@dataclass(slots=True)
class Span:
    """The first and last hour an accumulator covers (epoch seconds of hour starts)."""

    first: int
    last: int

    def cover(self, first: int, last: int) -> None:
        if first < self.first:
            self.first = first
        if last > self.last:
            self.last = last


@dataclass(slots=True)
class UsageSums(Span):
    """One (tenant, class, busy|dark) of a segment, in exact integers."""

    gpu_seconds: int = 0  # micro-GPU-seconds
    amount: Rational = field(default_factory=Rational)  # micro-GPU-seconds x the hours' exact rates
    activity: int = 0  # engine activity x 1e9 (integers: order-free sums)
    samples: int = 0


@dataclass(slots=True)
class LineSums(Span):
    """One line of a segment before rounding."""

    quantity: Decimal | Fraction = ZERO  # GPU-seconds (exact: a Fraction for covers), or breach minutes for SLA lines
    amount: Rational = field(default_factory=Rational)  # the exact sum of its hourly amounts, rounded once in `finish`


@dataclass(slots=True)
class PoolCost(Span):
    cost: Rational = field(default_factory=Rational)  # C over the hours seen, exact
    version: int = 0  # the policy version of the last hour (the rounding line's)


@dataclass(slots=True)
class Credit(Span):
    tenant: str = ""  # the service's tenant, credited with the penalties
    minutes: int = 0  # attributed breach minutes


@dataclass(slots=True)
class UnpooledSums:
    hours: int = 0  # pool-hours with GPUs on nodes no pool names
    max_gpus: int = 0
    capacity: Decimal = ZERO  # GPU-seconds


@dataclass(slots=True)
class TenantUse:
    busy: Decimal = ZERO  # GPU-seconds
    dark: Decimal = ZERO
    activity: int = 0
    samples: int = 0
