"""Rating's named accumulators: what a pool-hour folds into, in exact integers or Decimals (no I/O)."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

ZERO = Decimal(0)


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
    amount: int = 0  # micro-GPU-seconds x rate in 1e-36: an amount in 1e-42
    activity: int = 0  # engine activity x 1e9 (integers: order-free sums)
    samples: int = 0


@dataclass(slots=True)
class LineSums(Span):
    """One line of a segment before rounding."""

    quantity: Decimal = ZERO  # GPU-seconds, or breach minutes for SLA lines
    amount: Decimal = ZERO  # amounts quantized to 1e-20
    exact: int = 0  # plus exact amounts: exact x 10^-digits, rounded once when the line is
    digits: int = 0


@dataclass(slots=True)
class PoolCost(Span):
    cost: Decimal = ZERO  # C over the hours seen
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
