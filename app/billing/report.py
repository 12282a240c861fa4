"""The monthly report for managers: trend, top tenants, dark time, SLA and the platform statement of a rated period.

Every figure comes from the read side that already defines it: the fleet cost C and utilisation of
each month (`fleet_cost.month_cost`), the invoices and the platform statement (`invoices`), the
dark-time share of GPU-hours (`metrics.usage_read.dark_share`) and the breach minutes per service
(`metrics.breaches_read.services`). `assemble_report` only arranges them (pure); `read_report` reads
the inputs.
"""

from __future__ import annotations

import calendar
from dataclasses import dataclass
from datetime import date
from decimal import Decimal

from sqlmodel import Session

from app.billing.fleet_cost import MonthCost, month_cost
from app.billing.invoices import PeriodView, invoice_summaries, load_view, platform_statement, tenant_invoice
from app.billing.loader import DocumentCache
from app.billing.models import BillingPeriod
from app.billing.period import month_name, parse_period
from app.billing.types import CHARGE_KINDS, QUANTITY, LineKind
from app.core.settings import get_settings
from app.metrics.breaches_read import ServiceSla, services
from app.metrics.date_ranges import DateRange
from app.metrics.usage_read import DarkShare, dark_share

ZERO = Decimal(0)
TREND_MONTHS = 12  # the period and up to 11 months before it that have ingested hours
TOP_TENANTS = 10


@dataclass(frozen=True)
class ReportInputs:
    """What the report is assembled from, read once."""

    view: PeriodView
    trend: list[MonthCost]  # oldest first, the report's period last
    dark: DarkShare
    sla: list[ServiceSla]


def _share(part: Decimal, whole: Decimal) -> Decimal | None:
    return None if not whole else (part / whole).quantize(QUANTITY)


def _trend_row(m: MonthCost) -> dict:
    return {
        "month": m.month, "cost": m.cost, "cost_source": m.source.value,
        "capacity_gpu_hours": m.capacity_hours.quantize(QUANTITY), "used_gpu_hours": m.used_hours.quantize(QUANTITY),
        "utilisation": None if m.utilisation is None else m.utilisation.quantize(QUANTITY),
    }


def assemble_report(inputs: ReportInputs, *, top: int = TOP_TENANTS) -> dict:
    """The report of one rated period from its inputs (pure: same inputs, same report)."""
    view = inputs.view
    summary = invoice_summaries(view, None)
    invoices = summary["invoices"]
    invoiced = sum((i["total"] for i in invoices), ZERO)
    ranked = sorted(invoices, key=lambda i: (-i["total"], i["tenant"]))[:top]
    statement = platform_statement(view)
    # Penalties and credits as each invoice states them, so the report adds up to the invoices.
    issued = [tenant_invoice(view, t) for t in view.tenants]
    per_service: dict[str, dict] = {}
    for s in inputs.sla:
        per_service[s.service] = {"service": s.service, "tenant": s.tenant, "pool": s.pool, "breach_minutes": s.minutes,
                                  "unresolved_minutes": s.unresolved, "penalties": ZERO, "credits": ZERO,
                                  "unattributed_penalty": ZERO}
    for line in view.lines:
        if line.kind in (LineKind.SLA_PENALTY, LineKind.SLA_CREDIT):
            row = per_service.setdefault(line.service, {
                "service": line.service, "tenant": "", "pool": line.pool, "breach_minutes": 0, "unresolved_minutes": 0,
                "penalties": ZERO, "credits": ZERO, "unattributed_penalty": ZERO})
            if line.kind == LineKind.SLA_PENALTY:
                row["penalties"] += line.amount
            else:
                row["credits"] -= line.amount
    for breach in statement["unattributed_breaches"]:
        if breach["service"] in per_service:
            per_service[breach["service"]]["unattributed_penalty"] += breach["penalty"]
    charges = [l for l in view.lines if l.kind in CHARGE_KINDS]
    charged = sum((l.amount for l in charges), ZERO)
    dark_charged = sum((l.amount for l in charges if l.kind == LineKind.USAGE_DARK), ZERO)
    dark = inputs.dark
    return {
        "period": view.period.month,
        "status": view.period.status,
        "currency": view.period.currency,
        "invoiced_total": invoiced,
        "cost_total": statement["cost_total"],
        "tenant_count": len(invoices),
        "trend": [_trend_row(m) for m in inputs.trend],
        "top_tenants": [{**i, "share": _share(i["total"], invoiced)} for i in ranked],
        "dark_time": {
            "used_gpu_hours": dark.used_hours.quantize(QUANTITY), "dark_gpu_hours": dark.dark_hours.quantize(QUANTITY),
            "gpu_hours_share": None if dark.hour_share is None else dark.hour_share.quantize(QUANTITY),
            "pool_minutes_share": None if dark.minute_share is None else dark.minute_share.quantize(QUANTITY),
            "charges": charged, "dark_charges": dark_charged, "cost_share": _share(dark_charged, charged),
            "dark_discount": statement["balance"][LineKind.DARK_DISCOUNT],
        },
        "sla": {
            "breach_minutes": sum(s.minutes for s in inputs.sla),
            "unresolved_minutes": sum(s.unresolved for s in inputs.sla),
            "penalties_paid": sum((i["penalties_paid"] for i in issued), ZERO),
            "credits_received": sum((i["credits_received"] for i in issued), ZERO),
            "unattributed_penalty": statement["unattributed_penalty_total"],
            "services": [per_service[k] for k in sorted(per_service)],
        },
        "statement": statement,
    }


def _month_range(month: str) -> DateRange:
    year, number = int(month[:4]), int(month[5:])
    return DateRange(date(year, number, 1), date(year, number, calendar.monthrange(year, number)[1]), get_settings().tz)


def _months_up_to(month: str, count: int) -> list[str]:
    year, number = int(month[:4]), int(month[5:])
    out = []
    for _ in range(count):
        out.append(month_name(year, number))
        year, number = (year - 1, 12) if number == 1 else (year, number - 1)
    return list(reversed(out))


def read_inputs(*, session: Session, period: BillingPeriod) -> ReportInputs:
    """The inputs of a rated period's report (the caller has checked it is rated): stored period and rollups."""
    docs = DocumentCache(session)
    trend = []
    for month in _months_up_to(period.month, TREND_MONTHS):
        bounds = parse_period(month)
        cost = month_cost(session=session, month=month, start=bounds.start, end=bounds.end, docs=docs)
        if month == period.month or cost.capacity_hours or cost.cost is not None:  # months before any data: left out
            trend.append(cost)
    span = _month_range(period.month)
    return ReportInputs(
        view=load_view(session=session, period=period),
        trend=trend,
        dark=dark_share(session=session, period=span, tenants=None),
        sla=services(session=session, period=span, doc=None, tenants=None),
    )


def read_report(*, session: Session, period: BillingPeriod) -> dict:
    """The report of a rated period."""
    return assemble_report(read_inputs(session=session, period=period))
