"""The monthly report as PDF, drawn with the period PDF's primitives (app/billing/pdf.py): text, searchable.

Metadata come from the period (creation date = period end), so the same inputs give the same bytes.
"""

from __future__ import annotations

from decimal import Decimal

from app.billing.invoices import PeriodView
from app.billing.pdf import CARRIED, LABELS, _Doc, _document
from app.http.numbers import hours, money

BAR_RGB = (0, 114, 178)  # the pages' first chart colour (Okabe-Ito blue)


def _pct(value: Decimal | None) -> str:
    return "-" if value is None else f"{value * 100:.1f}%"


def _bars(doc: _Doc, values: list[tuple[str, Decimal | None]], height: float = 38) -> None:
    """A bar per (label, value), scaled to the largest; no bar for a missing value."""
    if doc.get_y() + height + 12 > doc.page_break_trigger:
        doc.add_page()
    left, top = doc.l_margin, doc.get_y()
    slot = (doc.w - doc.l_margin - doc.r_margin) / max(1, len(values))
    largest = max((v for _, v in values if v is not None), default=Decimal(0))
    doc.set_fill_color(*BAR_RGB)
    for i, (label, value) in enumerate(values):
        bar = 0.0 if not largest or value is None else float(value / largest) * height
        if bar > 0:
            doc.rect(left + i * slot + slot * 0.15, top + height - bar, slot * 0.7, bar, style="F")
        doc.set_xy(left + i * slot, top + height + 1)
        doc.cell(slot, 4, label, align="C")
    doc.set_xy(left, top + height + 7)


def render_report_pdf(view: PeriodView, report: dict) -> bytes:
    """The report of `view`'s period (as `assemble_report` made it), as PDF bytes."""
    cur = report["currency"]
    doc = _document(view, f"GPU chargeback report {report['period']}")
    doc.add_page()
    doc.heading(f"Monthly report - period {report['period']}", 16)
    doc.line_text(f"Status: {report['status']}    Currency: {cur}    Tenants invoiced: {report['tenant_count']}")
    doc.line_text(f"Invoiced to tenants: {money(report['invoiced_total'], cur)}    "
                  f"Fleet cost C: {money(report['cost_total'], cur)}")
    doc.ln(2)

    doc.heading("Cost per month (fleet cost C)", 12)
    _bars(doc, [(m["month"], m["cost"]) for m in report["trend"]])
    doc.table(
        [30, 40, 26, 32, 32, 26], ["Month", "Cost C", "Source", "Capacity GPU-h", "Used GPU-h", "Utilisation"],
        [[m["month"], "-" if m["cost"] is None else money(m["cost"], cur), m["cost_source"],
          hours(m["capacity_gpu_hours"]), hours(m["used_gpu_hours"]), _pct(m["utilisation"])] for m in report["trend"]],
        right={1, 3, 4, 5},
    )

    doc.heading("Top tenants by cost", 12)
    doc.table(
        [56, 46, 30, 34, 20], ["Tenant", "Department", "GPU-hours", "Total", "Share"],
        [[t["tenant"], t["department"], hours(t["gpu_hours"]), money(t["total"], cur), _pct(t["share"])]
         for t in report["top_tenants"]],
        right={2, 3, 4},
    )

    dark = report["dark_time"]
    doc.heading("Dark time", 12)
    doc.line_text(f"GPU-hours in dark time: {hours(dark['dark_gpu_hours'])} of {hours(dark['used_gpu_hours'])} used "
                  f"({_pct(dark['gpu_hours_share'])}); dark pool-minutes: {_pct(dark['pool_minutes_share'])}")
    doc.line_text(f"Charged at the dark-time price: {money(dark['dark_charges'], cur)} of {money(dark['charges'], cur)} "
                  f"({_pct(dark['cost_share'])}); dark-time discount: {money(dark['dark_discount'], cur)}")
    doc.ln(2)

    sla = report["sla"]
    doc.heading("SLA", 12)
    doc.line_text(f"Breach minutes: {sla['breach_minutes']}    Penalties paid: {money(sla['penalties_paid'], cur)}    "
                  f"Credits received: {money(sla['credits_received'], cur)}    "
                  f"Unattributed: {money(sla['unattributed_penalty'], cur)}")
    doc.table(
        [44, 30, 32, 22, 28, 30], ["Service", "Tenant", "Pool", "Minutes", "Penalties", "Credits"],
        [[s["service"], s["tenant"], s["pool"], str(s["breach_minutes"]), money(s["penalties"], cur),
          money(s["credits"], cur)] for s in sla["services"]],
        right={3, 4, 5},
    )

    statement = report["statement"]
    doc.heading("Platform statement", 12)
    doc.table(
        [120, 66], ["Balance line", "Amount"],
        [[LABELS[k], money(v, cur)] for k, v in statement["balance"].items()]
        + [["Use no tenant claims", money(statement["unallocated"]["amount"], cur)]],
        right={1},
        totals=[CARRIED, money(statement["carried_total"], cur)],
    )
    doc.line_text(f"Fleet cost C: {money(statement['cost_total'], cur)} = charged to tenants for capacity and use "
                  f"{money(statement['tenant_charges_total'], cur)} + carried by the platform "
                  f"{money(statement['carried_total'], cur)}")
    doc.line_text(f"Conservation (charges + balance = C per pool): {'holds' if statement['conserved'] else 'does not hold'}")
    doc.line_text(f"Hours ingested: {statement['hours_ok']} of {statement['hours_expected']}    "
                  f"Gap hours: {len(statement['gap_hours'])}    Hours not ingested: {len(statement['missing_hours'])}")
    return bytes(doc.output())
