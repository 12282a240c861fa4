"""The period PDF: summary, platform statement, then one invoice page per tenant (text, searchable).

Metadata comes from the period (creation date = period end), never the clock, so the bytes
are reproducible and the stored hash stays valid.
"""

from __future__ import annotations

import atexit
import re
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from decimal import Decimal
from functools import cache
from pathlib import Path

from fontTools import subset as ftsubset
from fontTools import ttLib
from fpdf import FPDF
from fpdf.enums import TextEmphasis, XPos, YPos

from app.billing.invoices import PeriodView, invoice_summaries, platform_statement, tenant_invoice
from app.billing.types import LineKind, line_name
from app.http.numbers import exact_number, hours, money

CARRIED = "Carried by the platform"  # the statement's one figure: balance lines + unallocated use (page, API)
LABELS = {
    LineKind.IDLE: "Idle capacity",
    LineKind.DARK_DISCOUNT: "Dark-time discount",
    LineKind.RESERVED_UNUSED: "Reserved but unused",
    LineKind.ROUNDING: "Rounding",
}


# Embedded Unicode fonts (subsets), found by path: DejaVu Sans covers Latin, Greek, Cyrillic and
# Arabic; WenQuanYi Micro Hei (the smallest Debian font with Chinese) covers CJK. fpdf2 falls back
# per character run to the font that has the glyph. (family, style, Debian package, file names)
FONT_DIRS = (Path("/usr/share/fonts/truetype"), Path("/usr/local/share/fonts"))
TEXT_FONT = "DejaVu"
FONTS = (
    (TEXT_FONT, "", "fonts-dejavu-core", ("dejavu/DejaVuSans.ttf",)),
    (TEXT_FONT, "B", "fonts-dejavu-core", ("dejavu/DejaVuSans-Bold.ttf",)),
)
# Registered on a document's first glyph DejaVu lacks: parsing the 5 MB CJK font takes ~2 s.
FALLBACK_FONTS = (("WQYMicroHei", "", "fonts-wqy-microhei", ("wqy/wqy-microhei.ttc",)),)
# Scripts that need shaping and bidi (Arabic, Hebrew, Syriac, Thaana, N'Ko): HarfBuzz (uharfbuzz)
# runs only for text that has them, so Latin-only documents keep their bytes and speed.
_COMPLEX = re.compile("[\u0590-\u08ff\ufb1d-\ufdff\ufe70-\ufeff]")


class FontMissing(RuntimeError):
    """A PDF font file is not installed (the message names the Debian package that ships it)."""


@cache
def font_path(package: str, names: tuple[str, ...]) -> Path:
    """The first of `names` found under FONT_DIRS, or FontMissing naming the package to install."""
    for directory in FONT_DIRS:
        for name in names:
            if (directory / name).is_file():
                return directory / name
    tried = ", ".join(str(d / n) for d in FONT_DIRS for n in names)
    raise FontMissing(f"PDF font not found (tried {tried}): install the Debian package {package}")


def _register_fonts(doc: FPDF, fonts=FONTS) -> None:
    for family, style, package, names in fonts:
        doc.add_font(family, style, str(font_path(package, names)))


# Invoice PDFs of one issuing run (hundreds of them) embed a subset of DejaVu each, and fpdf2 parses
# the whole 6,000-glyph font for every document and subsets it again: two thirds of an invoice's
# CPU. Within `shared_fonts()` a document starts from DejaVu cut once (per process) to what invoices
# print: first Latin-1 with punctuation, currency and arrows (500 glyphs: tenant and pool names are
# DNS labels), then, for a department or service name beyond it, Latin, Greek and Cyrillic (1,600).
# Parsing and subsetting those is cheap, and the subset a document embeds is byte for byte the one
# the full font gives (same glyphs, names, hinting and metrics; bounding boxes kept from the full
# font). A document with a character beyond a cut is drawn again from the next one, and at last
# from the full fonts, so nothing it shows changes.
_PUNCTUATION = ((0x2000, 0x206F), (0x20A0, 0x20CF), (0x2190, 0x21FF))
SHARED_CUTS = (
    ((0x20, 0x7E), (0xA0, 0xFF), *_PUNCTUATION),
    ((0x20, 0x24F), (0x370, 0x3FF), (0x400, 0x4FF), *_PUNCTUATION, (0x2100, 0x214F), (0x2200, 0x22FF)),
)
_SHARED: ContextVar[bool] = ContextVar("pdf_shared_fonts", default=False)


class _BeyondSharedFonts(Exception):
    """A character the cut-down font lacks: draw the document again with the full fonts."""


@contextmanager
def shared_fonts() -> Iterator[None]:
    """Invoice PDFs rendered inside start from the cut-down fonts (same bytes, a third to a quarter of the CPU)."""
    token = _SHARED.set(True)
    try:
        yield
    finally:
        _SHARED.reset(token)


def _cut_font(source: Path, target: Path, ranges: tuple[tuple[int, int], ...]) -> None:
    font = ttLib.TTFont(source, recalcTimestamp=False, recalcBBoxes=False)
    options = ftsubset.Options(
        glyph_names=True, notdef_glyph=True, notdef_outline=True, recommended_glyphs=True, layout_features=["*"],
        name_IDs=["*"], name_languages=["*"], name_legacy=True, legacy_cmap=True, symbol_cmap=True, hinting=True,
        passthrough_tables=True, prune_unicode_ranges=False, recalc_bounds=False, recalc_timestamp=False,
    )
    options.drop_tables = []
    subsetter = ftsubset.Subsetter(options)
    subsetter.populate(unicodes=[c for first, last in ranges for c in range(first, last + 1)])
    subsetter.subset(font)
    font.save(target)


@cache
def _shared_font_files(cut: int) -> tuple[tuple[str, str, str, tuple[str]], ...]:
    """FONTS cut to SHARED_CUTS[cut], as files in a private temporary folder (once per process and cut)."""
    folder = Path(tempfile.mkdtemp(prefix="chargeback-fonts-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    out = []
    for family, style, package, names in FONTS:
        source = font_path(package, names)
        target = folder / source.name
        _cut_font(source, target, SHARED_CUTS[cut])
        out.append((family, style, package, (str(target),)))
    return tuple(out)


def _text(value: object) -> str:
    """Any value as cell text (the embedded fonts print every script; nothing becomes '?')."""
    return str(value)


class _Doc(FPDF):
    def __init__(self, title: str, cut: int | None = None):
        super().__init__(orientation="P", unit="mm", format="A4")
        self.shared = cut is not None
        if cut is not None:
            for family, style, _, (path,) in _shared_font_files(cut):
                self.add_font(family, style, path)
        else:
            _register_fonts(self)
        self.has_fallbacks = False
        self.doc_title = title
        self.set_auto_page_break(auto=True, margin=15)
        self.set_margins(12, 12, 12)

    def set_font(self, family: str | None = None, style: str | TextEmphasis = "", size: float = 0) -> None:
        """Every text uses the embedded Unicode font, whatever family a layout names (no core fonts)."""
        super().set_font(TEXT_FONT, "B" if TextEmphasis.B in TextEmphasis.coerce(style) else "", size)

    def cell(self, *args, **kwargs):
        """A cell; text in a right-to-left or joining script is shaped (HarfBuzz) and reordered (bidi)."""
        text = str(kwargs.get("text", args[2] if len(args) > 2 else "") or "")
        if self.shared and not set(map(ord, text)) <= self.fonts[TEXT_FONT.lower()].cmap.keys():
            raise _BeyondSharedFonts(text)
        if not self.has_fallbacks and not set(map(ord, text)) <= self.fonts[TEXT_FONT.lower()].cmap.keys():
            _register_fonts(self, FALLBACK_FONTS)
            self.set_fallback_fonts([family for family, *_ in FALLBACK_FONTS], exact_match=False)
            self.has_fallbacks = True
        self.set_text_shaping(bool(_COMPLEX.search(text)))
        return super().cell(*args, **kwargs)

    def footer(self) -> None:
        self.set_y(-12)
        self.set_font("Helvetica", size=7)
        self.cell(0, 5, _text(f"{self.doc_title} - page {self.page_no()}"), align="C")

    def heading(self, text: str, size: int = 14) -> None:
        self.set_font("Helvetica", "B", size)
        self.cell(0, 8, _text(text), new_x=XPos.LMARGIN, new_y=YPos.NEXT)
        self.set_font("Helvetica", size=9)

    def line_text(self, text: str) -> None:
        self.set_font("Helvetica", size=9)
        self.cell(0, 5, _text(text), new_x=XPos.LMARGIN, new_y=YPos.NEXT)

    def table(self, widths: list[float], header: list[str], rows: list[list[str]], right: set[int] = frozenset(),
              totals: list[str] | None = None) -> None:
        """A table; `totals` is its last row, in bold under a rule."""
        self.set_font("Helvetica", "B", 8)
        for w, h in zip(widths, header):
            self.cell(w, 5, _text(h), border="B")
        self.ln(5)
        self.set_font("Helvetica", size=8)
        for row in rows:
            for i, (w, value) in enumerate(zip(widths, row)):
                self.cell(w, 4.5, _text(value), align="R" if i in right else "L")
            self.ln(4.5)
        if totals is not None:
            self.set_font("Helvetica", "B", 8)
            for i, (w, value) in enumerate(zip(widths, totals)):
                self.cell(w, 5, _text(value), border="T", align="R" if i in right else "L")
            self.ln(5)
            self.set_font("Helvetica", size=8)
        self.ln(2)


def _document(view: PeriodView, title: str, cut: int | None = None) -> _Doc:
    """A document whose metadata come from the period, never the clock (reproducible bytes); `cut` starts it
    from SHARED_CUTS[cut] instead of the full fonts."""
    doc = _Doc(title, cut)
    doc.set_title(title)
    doc.set_author("GPU chargeback portal")
    doc.set_creator("GPU chargeback portal")
    doc.set_producer("GPU chargeback portal")
    doc.set_creation_date(view.period.ends_at)
    return doc


def render_invoice_pdf(view: PeriodView, tenant: str) -> bytes:
    """One tenant's invoice alone, as PDF bytes (what a tenant member may download)."""
    title = f"GPU chargeback {view.period.month} - {tenant}"
    for cut in range(len(SHARED_CUTS)) if _SHARED.get() else ():
        try:
            doc = _document(view, title, cut)
            _invoice_page(doc, view, tenant)
            return bytes(doc.output())
        except _BeyondSharedFonts:
            continue
    doc = _document(view, title)
    _invoice_page(doc, view, tenant)
    return bytes(doc.output())


def render_pdf(view: PeriodView) -> bytes:
    """Summary, platform statement and one invoice per tenant, as PDF bytes."""
    period = view.period
    cur = period.currency
    doc = _document(view, f"GPU chargeback {period.month}")

    summary = invoice_summaries(view, None)
    doc.add_page()
    doc.heading(f"GPU chargeback - period {period.month}", 16)
    doc.line_text(f"Status: {period.status}    Currency: {cur}")
    doc.line_text(f"Period: {period.starts_at:%Y-%m-%d %H:%M} UTC to {period.ends_at:%Y-%m-%d %H:%M} UTC (end exclusive)")
    doc.ln(3)
    doc.heading("Invoices", 12)
    invoices, departments = summary["invoices"], summary["departments"]
    invoiced = sum((i["total"] for i in invoices), Decimal(0))
    doc.table(
        [60, 50, 35, 41], ["Tenant", "Department", "GPU-hours", "Total"],
        [[i["tenant"], i["department"], hours(i["gpu_hours"], 2), money(i["total"], cur)] for i in invoices],
        right={2, 3},
        totals=[f"All tenants ({len(invoices)})", "", hours(sum((i["gpu_hours"] for i in invoices), Decimal(0)), 2),
                money(invoiced, cur)],
    )
    doc.heading("Departments", 12)
    doc.table(
        [60, 85, 41], ["Department", "Tenants", "Total"],
        [[d["department"], str(len(d["tenants"])), money(d["total"], cur)] for d in departments],
        right={2},
        totals=[f"All departments ({len(departments)})", str(sum(len(d["tenants"]) for d in departments)),
                money(sum((d["total"] for d in departments), Decimal(0)), cur)],
    )

    statement = platform_statement(view)
    doc.add_page()
    doc.heading(f"Platform statement - {period.month}", 14)
    doc.table(
        [120, 66], ["Balance line", "Amount"],
        [[LABELS[k], money(v, cur)] for k, v in statement["balance"].items()]
        + [[f"Use no tenant claims ({hours(statement['unallocated']['gpu_hours'], 2)} GPU-hours)",
            money(statement["unallocated"]["amount"], cur)]],
        right={1},
        totals=[CARRIED, money(statement["carried_total"], cur)],
    )
    doc.heading("Cost per pool (C) and conservation", 12)
    doc.table(
        [36, 30, 42, 42, 36], ["Pool", "Cost C", "Tenants: capacity, use", CARRIED, "Check"],
        [[_pool(r, statement["several_clusters"]), money(r["cost"], cur), money(r["tenant_charges"], cur),
          money(r["carried"], cur), "conserved" if r["conserved"] else f"off by {money(r['difference'], cur)}"]
         for r in statement["pools"]],
        right={1, 2, 3},
        totals=["All pools", money(statement["cost_total"], cur), money(statement["tenant_charges_total"], cur),
                money(statement["carried_total"], cur), "conserved" if statement["conserved"] else "NOT conserved"],
    )
    doc.line_text(f"Hours ingested: {statement['hours_ok']} of {statement['hours_expected']}")
    doc.line_text(f"Gap hours: {len(statement['gap_hours'])}    Hours not ingested: {len(statement['missing_hours'])}")
    if statement["accept_gaps_reason"]:
        doc.line_text(f"Gaps accepted: {statement['accept_gaps_reason']}")
    unpooled = statement["unpooled"]
    if unpooled["hours"]:  # only when present, so pooled-only statements keep their bytes
        doc.line_text(
            f"Unpooled GPUs (nodes no pool names, unpriced): up to {unpooled['max_gpus']} GPUs, "
            f"{hours(unpooled['capacity_gpu_hours'], 2)} GPU-hours capacity, {hours(unpooled['used_gpu_hours'], 2)} used"
        )
        for u in unpooled["usage"]:
            doc.line_text(f"  {u['tenant']} ({u['class']}): {hours(u['gpu_hours'], 2)} GPU-hours, unpriced")
        if unpooled["accept_reason"]:
            doc.line_text(f"Unpooled accepted: {unpooled['accept_reason']}")
    for hour in statement["gap_hours"][:48]:
        doc.line_text(f"  gap hour {hour}")
    for u in statement["unmeasured"]:  # only when there are gaps, so complete months keep their bytes
        doc.line_text(f"  unmeasured capacity of {_pool(u, statement['several_clusters'])}: {u['gap_hours']} gap hours x "
                      f"{u['gpus']} GPUs last seen = {hours(u['gpu_hours'], 2)} GPU-hours, {money(u['amount'], cur)} (not billed)")
    doc.line_text(
        f"Unattributed SLA breach minutes: {len(statement['unattributed_breaches'])}"
        f" (penalty nobody pays: {money(statement['unattributed_penalty_total'], cur)})"
    )
    quality = statement["data_quality"]
    if quality["findings"]:
        doc.line_text(f"Data quality: {quality['findings']} unit-hours above capacity, "
                      f"{hours(quality['gpu_hours_cut'], 2)} GPU-hours cut (not billed)")

    for tenant in view.tenants:
        _invoice_page(doc, view, tenant)
    return bytes(doc.output())


def _num(value: Decimal | None, *, trim: bool = True) -> str:
    return "-" if value is None else exact_number(value, trim=trim)


def _invoice_page(doc: _Doc, view: PeriodView, tenant: str) -> None:
    period, cur = view.period, view.period.currency
    inv = tenant_invoice(view, tenant)
    dates, cov = inv["billing_dates"], inv["coverage"]
    doc.add_page()
    # DRAFT first: a right-to-left tenant name must end the line, or bidi reordering moves the text around it.
    doc.heading(("" if inv["final"] else "DRAFT - ") + f"Invoice {period.month} - tenant {tenant}", 14)
    doc.line_text(_identity(inv))
    doc.line_text(f"Department: {inv['department'] or '-'}    Status: {inv['status_label']}    Currency: {cur}")
    doc.line_text(f"Billing period: {dates['first_day']} to {dates['last_day']} ({dates['start_local']} to "
                  f"{dates['end_local']}, {dates['timezone']}, end exclusive)")
    doc.line_text(f"Coverage: {cov['hours_measured']} of {cov['hours_in_month']} hours of the month measured"
                  + ("" if cov["complete"] else " - PARTIAL"))
    doc.line_text("Amounts: hours summed exactly, rounded once half-even to the cent; quantity x unit rate, rounded "
                  "half-even, = amount.")
    doc.ln(2)
    rows: list[list[str]] = []
    for group in inv["groups"]:
        rows.append([f"{group['label']}", "", "", "", "", "", money(group["subtotal"], cur)])
        for l in (line for line in inv["lines"] if line["group"] == group["group"]):
            unit = "min" if l["unit"] == "breach-minute" else "GPU-h"
            rows.append([
                "  " + line_name(l["kind"]) + (" (correction)" if l["correction"] else ""),
                _pool(l, inv["several_clusters"]),
                l["class"] + (f" {l['service']}" if l["service"] else ""), str(l["policy_version"]),
                f"{_num(l['quantity'])} {unit}", _num(l["unit_rate"], trim=False), money(l["amount"], cur),
            ])
            if l["dark_multiplier"] is not None:
                rows.append([f"    at full rate {money(l['undiscounted_amount'], cur)} x dark-time multiplier "
                             f"{_num(l['dark_multiplier'])} = {money(l['amount'], cur)}; discount "
                             f"{money(l['discount'], cur)}", "", "", "", "", "", ""])
            if l["policy_rate"] is not None:
                rows.append([f"    penalty {money(l['policy_rate'], cur)} per breach minute (policy v{l['policy_version']})",
                             "", "", "", "", "", ""])
    doc.table(
        [40, 26, 32, 10, 30, 22, 26], ["Line", "Pool", "Class / service", "Ver", "Quantity", "Unit rate", "Amount"],
        rows, right={4, 5, 6},
    )
    doc.table(
        [50, 30, 30, 30, 46], ["Pool", "Class", "Busy GPU-h", "Dark GPU-h", "Efficiency"],
        [[_pool(g, inv["several_clusters"]), g["class"], hours(g["busy"], 2), hours(g["dark"], 2),
          "-" if g["efficiency"] is None else f"{g['efficiency']:.1%}"] for g in inv["gpu_hours"]],
        right={2, 3, 4},
    )
    eff = "-" if inv["efficiency"] is None else f"{inv['efficiency']:.1%}"
    doc.line_text(f"GPU-hours: {hours(inv['gpu_hours_total'], 2)}    Efficiency: {eff}")
    doc.line_text(f"Penalties paid: {money(inv['penalties_paid'], cur)}    "
                  f"Credits received: {money(inv['credits_received'], cur)}")
    doc.set_font("Helvetica", "B", 11)
    doc.cell(0, 8, _text(f"{inv['total_label']}: {money(inv['total'], cur)}"), new_x=XPos.LMARGIN, new_y=YPos.NEXT)


def _identity(inv: dict) -> str:
    """The invoice's issue date, due date and number (a draft says it is neither issued nor due). The number ends
    the line: a right-to-left tenant name in it must not reorder the dates around it."""
    if not inv["final"]:
        return f"Draft: not issued, not due    Invoice number: {inv['invoice_number']}"
    due = (f"{inv['due_date']} ({inv['payment_terms_days']} days)" if inv["due_date"]
           else "not recorded (finalized before payment terms were stored)")
    return f"Issue date: {inv['issue_date']}    Due date: {due}    Invoice number: {inv['invoice_number']}"


def _pool(row: dict, several_clusters: bool) -> str:
    """A pool's cell: with several clusters, its cluster beside it (single-cluster documents keep their bytes)."""
    return f"{row['pool']} ({row['cluster']})" if several_clusters and row.get("cluster") else row["pool"]
