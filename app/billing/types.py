"""Plain data that goes into and comes out of the pure rating functions (no ORM, no I/O)."""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from enum import StrEnum

from app.metrics.types import BreachMinute, ModelEnergy, UsageRow
from app.policy.document import PLATFORM as PLATFORM  # re-exported: the platform statement's account
from app.policy.document import PolicyDocument

QUANTITY = Decimal("0.000001")  # quantities and hours to six places: the stored Numeric(20, 6) scale


class LineKind(StrEnum):
    """Charge line kinds; the first four families are SPEC section 5 lines 1-4 and 6."""

    RESERVED_FEE = "reserved_fee"  # line 1
    INFERENCE_OVERAGE = "inference_overage"  # line 2
    USAGE_BUSY = "usage_busy"  # line 3, training/preprocessing while inference is busy
    USAGE_DARK = "usage_dark"  # line 3, at the dark-time multiplier
    SLA_PENALTY = "sla_penalty"  # line 4, paid by co-located training/preprocessing
    SLA_CREDIT = "sla_credit"  # line 4, received by the service's tenant (negative amount)
    UNALLOCATED = "unallocated_usage"  # line 6, billed to the platform
    # platform balance (line 5); these are not charges, they explain C - lines 1-3
    IDLE = "platform_idle"
    DARK_DISCOUNT = "platform_dark_discount"
    RESERVED_UNUSED = "platform_reserved_unused"  # negative: reserved fees above their use
    ROUNDING = "platform_rounding"


CHARGE_KINDS = (LineKind.RESERVED_FEE, LineKind.INFERENCE_OVERAGE, LineKind.USAGE_BUSY, LineKind.USAGE_DARK,
                LineKind.UNALLOCATED)
TRANSFER_KINDS = (LineKind.SLA_PENALTY, LineKind.SLA_CREDIT)
BALANCE_KINDS = (LineKind.IDLE, LineKind.DARK_DISCOUNT, LineKind.RESERVED_UNUSED, LineKind.ROUNDING)

# What people read for each kind (pages and PDFs; CSV and FOCUS keep the codes, which programs read)
LINE_NAMES = {
    LineKind.RESERVED_FEE: "Reserved fee",
    LineKind.INFERENCE_OVERAGE: "Inference beyond the reservation",
    LineKind.USAGE_BUSY: "Use while inference is busy",
    LineKind.USAGE_DARK: "Use in dark time",
    LineKind.SLA_PENALTY: "SLA penalty",
    LineKind.SLA_CREDIT: "SLA credit",
    LineKind.UNALLOCATED: "Use no tenant claims",
    LineKind.IDLE: "Idle capacity",
    LineKind.DARK_DISCOUNT: "Dark-time discount",
    LineKind.RESERVED_UNUSED: "Reserved and not used",
    LineKind.ROUNDING: "Rounding",
}


def line_name(kind: str) -> str:
    """A line kind as people read it ("Use in dark time", not "usage_dark")."""
    return LINE_NAMES.get(kind, kind.replace("_", " ").capitalize())


@dataclass(frozen=True)
class RatingHour:
    """Everything rating needs about one pool in one hour, with the policy version in effect then."""

    hour: int  # epoch seconds of the hour start
    pool: str
    policy_version: int
    policy: PolicyDocument
    gpus: int
    capacity_gpu_seconds: Decimal
    models: tuple[ModelEnergy, ...]
    usage: tuple[UsageRow, ...]  # rows of this pool only
    breaches: tuple[BreachMinute, ...] = ()  # breach minutes of this pool's services
    # The loader's form of `usage` (rated the same, may be given alongside it): MicroUsage tuples,
    # GPU-seconds as exact integer micro-GPU-seconds, so no object is built per row.
    micro_usage: tuple[MicroUsage, ...] = ()


# (hour, pool, tenant, klass, dark, micro-GPU-seconds, nano-activity, activity_samples): a UsageRow
# of one hour with `gpu_seconds x 1e6` and `round(activity_sum x 1e9)` as ints (integer sums do not
# depend on the order); a plain tuple because a month holds ~750k of them.
MicroUsage = tuple[int, str, str, str, bool, int, int, int]


@dataclass(frozen=True)
class ChargeLine:
    """One invoice or statement line, aggregated over the hours that share its key.

    Lines are split where the policy version (hence a price) changes: `charge_start`/`charge_end`
    (epoch seconds, end exclusive) bound the hours it covers.
    """

    account: str  # tenant name, or PLATFORM
    pool: str
    kind: str  # a LineKind value
    klass: str  # inference | training | preprocessing | unallocated | "" for balance lines
    policy_version: int
    charge_start: int
    charge_end: int
    quantity: Decimal  # GPU-hours, or breach minutes for SLA lines
    unit: str  # "GPU-hour" | "breach-minute"
    amount: Decimal  # rounded half-even to the currency's cents
    service: str = ""  # SLA lines: the service whose red line was crossed
    corrects: str = ""  # a correction line: the id of the finalized line it corrects


@dataclass(frozen=True)
class TenantUsage:
    """Reported, not billed: GPU-hours and efficiency per tenant, pool and class."""

    tenant: str
    pool: str
    klass: str
    busy_gpu_hours: Decimal
    dark_gpu_hours: Decimal
    efficiency: float | None  # mean engine activity over occupied samples, None when unmeasured
    activity_samples: int = 0  # the occupied samples `efficiency` is the mean over (its weight)


@dataclass(frozen=True)
class UnattributedBreach:
    service: str
    pool: str
    minute_end: int
    penalty: Decimal  # what it would have cost; nobody pays it


@dataclass(frozen=True)
class UnpooledUse:
    """GPU-hours a tenant used on nodes no pool names: shown, never priced (SPEC section 4)."""

    tenant: str
    klass: str
    gpu_hours: Decimal


@dataclass(frozen=True)
class Unpooled:
    """The period's GPUs on nodes no pool names: capacity and use, unpriced."""

    hours: int = 0  # pool-hours with unpooled GPUs
    max_gpus: int = 0
    capacity_gpu_hours: Decimal = Decimal(0)
    usage: tuple[UnpooledUse, ...] = ()


@dataclass
class RatingResult:
    currency: str
    lines: list[ChargeLine] = field(default_factory=list)
    usage: list[TenantUsage] = field(default_factory=list)
    unattributed: list[UnattributedBreach] = field(default_factory=list)
    cost_by_pool: dict[str, Decimal] = field(default_factory=dict)  # C per pool over the period, rounded
    unpooled: Unpooled = field(default_factory=Unpooled)
