"""Period exports: CSV (one row per line), FOCUS 1.2 CSV and PDF. Bytes depend only on stored lines.

Nothing here reads the clock or row ids, so re-rating unchanged inputs gives byte-identical files.
The issuing step after close stores what these render (app/billing/issued.py); a finalized period is
served from there.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from decimal import Decimal
from functools import partial
from types import SimpleNamespace

from sqlmodel import Session

from app.billing.invoices import PeriodView, load_view
from app.billing.models import BillingPeriod, ChargeLineRecord, DocumentKind, LineSource
from app.billing.types import CHARGE_KINDS, PLATFORM, QUANTITY, LineKind
from app.core.errors import FieldError, Invalid, NotFound
from app.core.safe_text import csv_bytes

FORMATS = {
    "csv": ("text/csv; charset=utf-8", "csv"),
    "focus": ("text/csv; charset=utf-8", "focus.csv"),
    "pdf": ("application/pdf", "pdf"),
}
ISSUER = "GPU Platform"  # the internal provider: invoice issuer, provider and publisher
SERVICE_NAME = "GPU Co-location"
SERVICE_CATEGORY = "AI and Machine Learning"  # FOCUS 1.2 allowed value
SERVICE_SUBCATEGORY = "Machine Learning"

DESCRIPTIONS = {
    LineKind.RESERVED_FEE: "Reserved inference capacity",
    LineKind.INFERENCE_OVERAGE: "Inference use above the reserved share",
    LineKind.USAGE_BUSY: "GPU use while inference is busy",
    LineKind.USAGE_DARK: "GPU use in dark time (discounted)",
    LineKind.SLA_PENALTY: "SLA penalty for co-location during breach minutes",
    LineKind.SLA_CREDIT: "SLA credit for breach minutes",
    LineKind.UNALLOCATED: "Unallocated GPU use (unclaimed namespaces)",
    LineKind.IDLE: "Idle capacity",
    LineKind.DARK_DISCOUNT: "Dark-time discount",
    LineKind.RESERVED_UNUSED: "Reserved but unused capacity (paid by reservations)",
    LineKind.ROUNDING: "Rounding",
}


def media_type(fmt: str) -> str:
    return FORMATS[fmt][0]


def filename(month: str, fmt: str) -> str:
    return f"chargeback-{month}.{FORMATS[fmt][1]}"


def check_format(fmt: str) -> str:
    if fmt not in FORMATS:
        raise Invalid(
            f"Unknown export format {fmt!r}", [FieldError("format", "one of: " + ", ".join(sorted(FORMATS)))]
        )
    return fmt


def _detached(record) -> SimpleNamespace:
    """A plain copy of an ORM row's fields (see _detached_view)."""
    return SimpleNamespace(**{name: getattr(record, name) for name in type(record).model_fields})


def _detached_view(view: PeriodView) -> PeriodView:
    """The view with its rows copied out of the ORM: renderers read every line once per tenant
    (500 tenants x 2,500 lines), and an instrumented attribute costs ~20x a plain one."""
    return replace(
        view,
        lines=[_detached(l) for l in view.lines],
        usage=[_detached(u) for u in view.usage],
        unattributed=[_detached(u) for u in view.unattributed],
    )


def render(*, session: Session, period: BillingPeriod, fmt: str) -> bytes:
    """The export of `period` in `fmt` (csv | focus | pdf)."""
    view = _detached_view(load_view(session=session, period=period))
    return _RENDERERS[check_format(fmt)](view)


def render_invoice(*, session: Session, period: BillingPeriod, tenant: str) -> bytes:
    """One tenant's invoice as PDF; 404 when the period holds nothing for that tenant."""
    view = _detached_view(load_view(session=session, period=period))
    if tenant not in view.tenants:
        raise NotFound(f"No invoice for tenant {tenant!r} in {period.month}")
    from app.billing import pdf  # fpdf2 and fontTools on first use: see render_pdf

    return pdf.render_invoice_pdf(view, tenant)


def period_documents(*, session: Session, period: BillingPeriod) -> list[tuple[tuple[str, str], Callable[[], bytes]]]:
    """Every export format and each tenant's invoice PDF, keyed (kind, tenant), each a render to call,
    all from one read of the lines.

    What the issuing step stores (app/billing/issued.py); tenant is "" for the period-wide formats.
    """
    from app.billing import pdf  # fpdf2 and fontTools on first use: see render_pdf

    view = _detached_view(load_view(session=session, period=period))
    plan: list[tuple[tuple[str, str], Callable[[], bytes]]] = [
        ((fmt, ""), partial(fn, view)) for fmt, fn in _RENDERERS.items()]
    plan += [((DocumentKind.INVOICE_PDF.value, tenant), partial(pdf.render_invoice_pdf, view, tenant))
             for tenant in view.tenants]
    return plan


def render_period(*, session: Session, period: BillingPeriod) -> dict[tuple[str, str], bytes]:
    """Every export format and each tenant's invoice PDF, rendered, keyed (kind, tenant)."""
    return {key: render() for key, render in period_documents(session=session, period=period)}


def _iso(dt: datetime) -> str:
    return dt.strftime("%Y-%m-%dT%H:%M:%SZ")


def _qty(value: Decimal) -> str:
    return format(Decimal(value).quantize(QUANTITY), "f")


def _money(value: Decimal) -> str:
    return format(Decimal(value), "f")


CSV_COLUMNS = [
    "period", "line_id", "account", "department", "pool", "kind", "class", "service", "policy_version",
    "charge_start", "charge_end", "quantity", "unit", "amount", "currency", "correction", "corrects", "reason",
]


def render_csv(view: PeriodView) -> bytes:
    """One row per stored line, ordered by line id; with several clusters a last column names each line's cluster
    (a single-cluster period's export keeps its columns, and its bytes)."""
    p = view.period
    several = view.several_clusters
    rows = [
        [
            p.month, l.line_id, l.account, l.department, l.pool, l.kind, l.klass, l.service, str(l.policy_version),
            _iso(l.charge_start), _iso(l.charge_end), _qty(l.quantity), l.unit, _money(l.amount), p.currency,
            "true" if l.source == LineSource.CORRECTION else "false", l.corrects, l.reason,
            *([view.cluster_of(l.pool, l.policy_version)] if several else []),
        ]
        for l in view.lines
    ]
    return csv_bytes(CSV_COLUMNS + (["cluster"] if several else []), rows)


# FOCUS 1.2: the 21 mandatory columns first (alphabetical, as the spec lists them), then the
# conditional/recommended ones we can fill, then x_ custom columns.
FOCUS_MANDATORY = [
    "BilledCost", "BillingAccountId", "BillingAccountName", "BillingCurrency", "BillingPeriodEnd",
    "BillingPeriodStart", "ChargeCategory", "ChargeClass", "ChargeDescription", "ChargePeriodEnd",
    "ChargePeriodStart", "ContractedCost", "EffectiveCost", "InvoiceIssuerName", "ListCost", "PricingQuantity",
    "PricingUnit", "ProviderName", "PublisherName", "ServiceCategory", "ServiceName",
]
FOCUS_OPTIONAL = [
    "BillingAccountType", "ChargeFrequency", "ConsumedQuantity", "ConsumedUnit", "InvoiceId", "PricingCategory",
    "ResourceId", "ResourceName", "ResourceType", "ServiceSubcategory", "SubAccountId", "SubAccountName",
    "SubAccountType", "Tags",
]
FOCUS_CUSTOM = ["x_LineId", "x_Corrects", "x_PolicyVersion"]
FOCUS_COLUMNS = FOCUS_MANDATORY + FOCUS_OPTIONAL + FOCUS_CUSTOM

_UNITS = {"GPU-hour": "GPU-Hours", "breach-minute": "Breach-Minutes"}


def charge_category(kind: str) -> str:
    """FOCUS ChargeCategory: consumption is Usage, SLA credits are Credit, the rest Adjustment."""
    if kind == LineKind.SLA_CREDIT:
        return "Credit"
    if kind in CHARGE_KINDS:
        return "Usage"
    return "Adjustment"


def _list_cost(line: ChargeLineRecord, multipliers: dict[int, Decimal]) -> Decimal:
    """Dark use is billed at the dark-time multiplier; its list cost is the undiscounted price."""
    multiplier = multipliers.get(line.policy_version)
    if line.kind == LineKind.USAGE_DARK and multiplier:
        return (line.amount / multiplier).quantize(Decimal("0.01"))
    return line.amount


# Tags-C-012-M: every tag here is provider-defined (the portal sets it, no user can), so every key
# carries this provider's one tag key prefix (published in README, Tags-C-013-M).
TAG_PREFIX = "x_"


def focus_tags(**tags: str) -> str:
    """The Tags cell: a JSON object (KeyValueFormat) of the non-empty tags, keys prefixed `x_`."""
    return json.dumps({TAG_PREFIX + k: v for k, v in tags.items() if v}, sort_keys=True, separators=(",", ":"))


def render_focus(view: PeriodView) -> bytes:
    """FOCUS 1.2 cost and usage rows: one per tenant x pool x charge line."""
    p = view.period
    multipliers = _dark_multipliers(view)
    # InvoiceId-C-004-C/-005-C: a tenant's rows are on its invoice of the month; platform balance
    # and unallocated rows are on no invoice, so their InvoiceId is null (an empty cell).
    invoiced = set(view.tenants)
    # A Kubernetes cluster is neither a FOCUS region (RegionId: a geographic area) nor an availability zone
    # (a fault-isolated area within a region): it is a provider-defined tag, set when there are several.
    several = view.several_clusters
    rows = []
    for l in view.lines:
        category = charge_category(l.kind)
        unit = _UNITS.get(l.unit, l.unit)
        department = l.department or ("platform" if l.account == PLATFORM else "unassigned")
        description = f"{DESCRIPTIONS.get(l.kind, l.kind)}, pool {l.pool}"
        if l.service:
            description += f", service {l.service}"
        if l.source == LineSource.CORRECTION:
            description = f"Correction of {l.corrects}: {l.reason}"
        values = {
            "BilledCost": _money(l.amount),
            "BillingAccountId": department,
            "BillingAccountName": department,
            "BillingCurrency": p.currency,
            "BillingPeriodEnd": _iso(p.ends_at),
            "BillingPeriodStart": _iso(p.starts_at),
            "ChargeCategory": category,
            # Only corrections of a previously invoiced period carry a ChargeClass.
            "ChargeClass": "Correction" if l.source == LineSource.CORRECTION else "",
            "ChargeDescription": description,
            "ChargePeriodEnd": _iso(l.charge_end),
            "ChargePeriodStart": _iso(l.charge_start),
            "ContractedCost": _money(l.amount),
            "EffectiveCost": _money(l.amount),
            "InvoiceIssuerName": ISSUER,
            "ListCost": _money(_list_cost(l, multipliers)),
            "PricingQuantity": _qty(l.quantity),
            "PricingUnit": unit,
            "ProviderName": ISSUER,
            "PublisherName": ISSUER,
            "ServiceCategory": SERVICE_CATEGORY,
            "ServiceName": SERVICE_NAME,
            "BillingAccountType": "Department",
            "ChargeFrequency": "Recurring" if l.kind == LineKind.RESERVED_FEE else "Usage-Based",
            # FOCUS: ConsumedQuantity/Unit only on Usage rows.
            "ConsumedQuantity": _qty(l.quantity) if category == "Usage" else "",
            "ConsumedUnit": unit if category == "Usage" else "",
            "InvoiceId": f"{p.month}/{l.account}" if l.account in invoiced else "",
            "PricingCategory": "Standard" if category == "Usage" and l.source != LineSource.CORRECTION else "",
            "ResourceId": l.pool,
            "ResourceName": l.pool,
            "ResourceType": "GPU pool",
            "ServiceSubcategory": SERVICE_SUBCATEGORY,
            "SubAccountId": l.account,
            "SubAccountName": l.account,
            "SubAccountType": "Platform" if l.account == PLATFORM else "Tenant",
            "Tags": focus_tags(department=department, kind=l.kind, policy_version=str(l.policy_version),
                               pool=l.pool, **{"class": l.klass}, service=l.service,
                               cluster=view.cluster_of(l.pool, l.policy_version) if several else ""),
            "x_LineId": l.line_id,
            "x_Corrects": l.corrects,
            "x_PolicyVersion": str(l.policy_version),
        }
        rows.append([values[c] for c in FOCUS_COLUMNS])
    return csv_bytes(FOCUS_COLUMNS, rows)


def _dark_multipliers(view: PeriodView) -> dict[int, Decimal]:
    versions = {l.policy_version for l in view.lines if l.kind == LineKind.USAGE_DARK}
    if not versions:
        return {}
    from app.policy.models import PolicyVersion
    from app.policy.service import load_document

    session = Session.object_session(view.period)
    out = {}
    for version_id in sorted(versions):
        version = session.get(PolicyVersion, version_id) if session else None
        if version is not None:
            out[version_id] = load_document(version).pricing.dark_time_multiplier
    return out


def render_pdf(view: PeriodView) -> bytes:
    # Imported here, on the first PDF: fpdf2 and fontTools are ~0.4 s of every process's start otherwise (each
    # CLI command, worker and serve process imports this module; most of them never draw a PDF).
    from app.billing import pdf

    return pdf.render_pdf(view)


# Late-bound so a test can make one renderer fail mid-close.
_RENDERERS = {
    "csv": lambda view: render_csv(view),
    "focus": lambda view: render_focus(view),
    "pdf": lambda view: render_pdf(view),
}
