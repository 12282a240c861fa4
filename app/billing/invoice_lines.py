"""What an invoice line is made of (issue 12): its group, unit rate, dark-time discount and SLA evidence.

Pure functions over stored lines (nothing here re-rates). The rounding they make checkable:

- rating sums a line exactly over its hours and rounds it **once**, half-even, to the currency's cents;
  its quantity is rounded half-even to 6 decimals (GPU-hours, or breach-minute shares);
- the **unit rate** shown is amount / quantity rounded half-even to the fewest decimals (4 at least)
  at which `quantity x rate`, rounded half-even to the cent, gives the amount back. A GPU-hour line
  sums hours of different rates (C / S changes with each hour's energy), so its rate is that
  effective rate; the per-day drill-down (`line_days`) shows the days it is made of.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from decimal import ROUND_HALF_EVEN, Decimal
from zoneinfo import ZoneInfo

from app.billing.models import LineSource, PeriodStatus
from app.billing.pricing import cents
from app.billing.types import TRANSFER_KINDS, LineKind
from app.core.timeutil import aware

ZERO = Decimal(0)
MIN_RATE_DIGITS, MAX_RATE_DIGITS = 4, 18

# The order lines are read in: what the tenant pays for capacity, then for use, then transfers, then corrections.
GROUPS = ("reserved_fee", "inference_overage", "usage_busy", "usage_dark", "sla", "correction")
GROUP_LABELS = {
    "reserved_fee": "Reserved inference capacity",
    "inference_overage": "Inference use above the reserved share",
    "usage_busy": "GPU use while inference is busy",
    "usage_dark": "GPU use in dark time (discounted)",
    "sla": "SLA penalties and credits",
    "correction": "Corrections",
    "other": "Other",
}
# Lines whose amount sums hours of different rates: their rate is effective and they have a per-day drill-down.
HOURLY_KINDS = frozenset({LineKind.RESERVED_FEE, LineKind.INFERENCE_OVERAGE, LineKind.USAGE_BUSY, LineKind.USAGE_DARK,
                          LineKind.UNALLOCATED})


@dataclass(frozen=True)
class VersionTerms:
    """The prices of one policy version that an invoice line quotes."""

    dark_multiplier: Decimal
    penalties: dict[str, Decimal] = field(default_factory=dict)  # service -> penalty per breach minute
    clusters: dict[str, str] = field(default_factory=dict)  # pool -> the cluster its nodes are in


def group_of(line) -> str:
    """The invoice group of a stored line (see GROUPS)."""
    if line.source == LineSource.CORRECTION:
        return "correction"
    if line.kind in TRANSFER_KINDS:
        return "sla"
    return line.kind if line.kind in GROUPS else "other"


def order_key(line) -> tuple:
    """Invoice order: group, then pool, class, service, policy version, start."""
    group = group_of(line)
    rank = GROUPS.index(group) if group in GROUPS else len(GROUPS)
    return (rank, line.pool, line.kind, line.klass, line.service, line.policy_version, line.charge_start, line.line_id)


def unit_rate(quantity: Decimal, amount: Decimal, currency: str) -> Decimal | None:
    """amount / quantity with the fewest decimals (>= 4) at which quantity x rate rounds back to amount."""
    if not quantity:
        return None
    exact = Decimal(amount) / Decimal(quantity)
    for digits in range(MIN_RATE_DIGITS, MAX_RATE_DIGITS + 1):
        rate = exact.quantize(Decimal(1).scaleb(-digits), ROUND_HALF_EVEN)
        if reproduces(quantity, rate, amount, currency):
            return rate
    return exact  # only for quantities far beyond a month of a fleet


def reproduces(quantity: Decimal, rate: Decimal, amount: Decimal, currency: str) -> bool:
    """quantity x rate, rounded half-even to the cent, equals amount."""
    return (Decimal(quantity) * rate).quantize(cents(currency), ROUND_HALF_EVEN) == Decimal(amount)


def explain(line, terms: VersionTerms | None, currency: str) -> dict:
    """The derivation of one stored line: group, unit rate, its basis, and for dark time the discount."""
    group = group_of(line)
    out: dict = {
        "group": group, "unit_rate": unit_rate(line.quantity, line.amount, currency), "rate_basis": "",
        "policy_rate": None, "undiscounted_amount": None, "undiscounted_rate": None, "dark_multiplier": None,
        "discount": None,
        "drilldown": line.source == LineSource.RATING and line.kind in HOURLY_KINDS and bool(line.quantity),
        "evidence": line.kind == LineKind.SLA_PENALTY and line.source == LineSource.RATING,
    }
    kind = line.kind
    if line.source == LineSource.CORRECTION:
        out["rate_basis"] = "correction of a finalized line"
    elif kind == LineKind.RESERVED_FEE:
        out["rate_basis"] = "reserved fraction x pool cost C, per covered GPU-hour (C / S changes hour by hour)"
    elif kind in (LineKind.INFERENCE_OVERAGE, LineKind.USAGE_BUSY, LineKind.UNALLOCATED):
        out["rate_basis"] = "pool cost C / capacity S per GPU-hour, hour by hour"
    elif kind == LineKind.USAGE_DARK:
        out["rate_basis"] = "C / S per GPU-hour x the dark-time multiplier, hour by hour"
        if terms is not None and terms.dark_multiplier:
            m = terms.dark_multiplier
            undiscounted = (Decimal(line.amount) / m).quantize(cents(currency), ROUND_HALF_EVEN)
            out.update(dark_multiplier=m, undiscounted_amount=undiscounted, discount=undiscounted - line.amount,
                       undiscounted_rate=unit_rate(line.quantity, undiscounted, currency))
    elif kind in TRANSFER_KINDS:
        penalty = terms.penalties.get(line.service) if terms is not None else None
        out["policy_rate"] = penalty
        out["rate_basis"] = (
            "penalty per breach minute x your share of the co-located GPU-seconds in each minute"
            if kind == LineKind.SLA_PENALTY else "penalty per breach minute, for each attributed breach minute")
        if penalty is not None:  # the policy's own rate, where it reproduces the amount (it does but at ties)
            signed = penalty if kind == LineKind.SLA_PENALTY else -penalty
            if reproduces(line.quantity, signed, line.amount, currency):
                out["unit_rate"] = signed
    return out


def coverage(period) -> dict:
    """Hours of the month measured (ingested without a gap) against the hours in the month."""
    expected, ok = int(period.hours_expected or 0), int(period.hours_ok or 0)
    return {
        "hours_measured": ok,
        "hours_in_month": expected,
        "fraction": (Decimal(ok) / Decimal(expected)).quantize(Decimal("0.0001")) if expected else ZERO,
        "complete": bool(expected) and ok >= expected,
    }


def billing_dates(period, tz: ZoneInfo) -> dict:
    """The period's bounds (UTC instants, and as local times of the billing timezone; end exclusive), its first and last day."""
    start, end = aware(period.starts_at), aware(period.ends_at)
    local_start, local_end = start.astimezone(tz), end.astimezone(tz)
    return {"start": start, "end": end, "timezone": tz.key,
            "start_local": local_start.isoformat(timespec="minutes"), "end_local": local_end.isoformat(timespec="minutes"),
            "first_day": local_start.date().isoformat(),
            "last_day": (local_end - timedelta(microseconds=1)).date().isoformat()}


def status_of(period) -> dict:
    """Draft or finalized, and the words the total goes by."""
    final = period.status == PeriodStatus.FINALIZED
    return {"final": final, "status_label": "finalized" if final else "draft",
            "total_label": "Total due" if final else "Draft total, not yet due"}


INVOICE_PREFIX = "CB"


def invoice_number(month: str, tenant: str) -> str:
    """The invoice's number, derived from its period and tenant: one per pair, the same on every render."""
    return f"{INVOICE_PREFIX}-{month}-{tenant}"


def invoice_dates(period, tz: ZoneInfo) -> dict:
    """Issue date (the day the period was finalized, in the billing timezone), payment terms and due date, all from
    what the period stored, never the clock, so an issued invoice renders to the same bytes. None for a draft; the
    due date is None for a period finalized before its terms were stored."""
    if period.status != PeriodStatus.FINALIZED or period.finalized_at is None:
        return {"issue_date": None, "payment_terms_days": None, "due_date": None}
    issued = aware(period.finalized_at).astimezone(tz).date()
    terms = period.payment_terms_days
    return {"issue_date": issued.isoformat(), "payment_terms_days": terms,
            "due_date": None if terms is None else (issued + timedelta(days=terms)).isoformat()}
