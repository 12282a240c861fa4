"""PDFs embed Unicode fonts: Chinese, Arabic and accented names read back with pdftotext."""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime

import pytest

from app.billing import exports, pdf, periods
from tests.support.billing import add_hour, policy_doc, store_policy
from tests.support.policies import SPEC_TENANTS

CHINESE, ARABIC, ACCENTS = "视觉训练", "الرؤية", "Recherche & Développement, Zürich"
# Tenant names follow the policy's DNS-label rule; departments are free text, and the rollups carry
# whatever tenant name attribution wrote, so both paths are exercised.
USAGE = [
    ("search", "inference", False, 1800),
    (CHINESE, "training", False, 2520),
    (ARABIC, "training", True, 1800),
    ("vision", "training", False, 600),
    ("etl", "preprocessing", False, 360),
]


def _text(tmp_path, data: bytes) -> str:
    path = tmp_path / "out.pdf"
    path.write_bytes(data)
    text = subprocess.run(["pdftotext", "-layout", str(path), "-"], check=True, capture_output=True, text=True).stdout
    # pdftotext wraps each right-to-left run it finds in embedding marks (U+202B ... U+202C); the
    # letters between them are the name in logical order.
    return text.translate(dict.fromkeys(range(0x202A, 0x202F)))


def _fonts(tmp_path, data: bytes) -> str:
    path = tmp_path / "fonts.pdf"
    path.write_bytes(data)
    return subprocess.run(["pdffonts", str(path)], check=True, capture_output=True, text=True).stdout


@pytest.fixture
def unicode_month(session):
    departments = {"search": CHINESE, "vision": ARABIC, "etl": ACCENTS}
    tenants = [{**t, "namespaces": list(t["namespaces"]), "department": departments[t["name"]]} for t in SPEC_TENANTS]
    v = store_policy(session, policy_doc(tenants=tenants))
    add_hour(session, hour=datetime(2026, 10, 1, tzinfo=UTC), version=v.id, usage=USAGE, breaches=())
    return periods.rate(session=session, period="2026-10", actor="fin")


def test_invoice_pdfs_print_chinese_arabic_and_accented_names(session, unicode_month, tmp_path):
    for tenant in (CHINESE, ARABIC):
        text = _text(tmp_path, exports.render_invoice(session=session, period=unicode_month, tenant=tenant))
        assert f"Invoice 2026-10 - tenant {tenant}" in text
    etl = exports.render_invoice(session=session, period=unicode_month, tenant="etl")
    assert f"Department: {ACCENTS}" in _text(tmp_path, etl)
    fonts = _fonts(tmp_path, etl)  # a Latin document pays for no CJK font
    assert "DejaVuSans" in fonts and "WenQuanYi" not in fonts


def test_period_pdf_summary_statement_and_invoices_read_back(session, unicode_month, tmp_path):
    data = exports.render(session=session, period=unicode_month, fmt="pdf")
    text = _text(tmp_path, data)
    for name in (f"Invoice 2026-10 - tenant {ARABIC}", f"Invoice 2026-10 - tenant {CHINESE}",
                 f"Department: {CHINESE}", f"Department: {ARABIC}", f"Department: {ACCENTS}"):
        assert name in text, name
    assert "?" not in text
    # every font is an embedded subset with a Unicode map (no unembedded core font such as Helvetica)
    fonts = _fonts(tmp_path, data)
    assert "DejaVuSans" in fonts and "WenQuanYiMicroHei" in fonts and "Helvetica" not in fonts
    assert all(line.split()[-5:-2] == ["yes", "yes", "yes"] for line in fonts.splitlines()[2:])


def test_a_missing_font_names_its_debian_package(monkeypatch, tmp_path):
    monkeypatch.setattr(pdf, "FONT_DIRS", (tmp_path,))
    pdf.font_path.cache_clear()
    try:
        with pytest.raises(pdf.FontMissing, match="fonts-dejavu-core"):
            pdf._Doc("x")
    finally:
        pdf.font_path.cache_clear()



def test_invoices_of_an_issuing_run_are_the_same_bytes_from_the_cut_down_fonts(session, tmp_path, monkeypatch):
    """Within shared_fonts() an invoice starts from DejaVu cut to Latin-1 (accents, punctuation, currency, arrows),
    else to Latin, Greek and Cyrillic: the same bytes as from the full font; one with a character beyond both
    cuts (Chinese, Arabic) is drawn again from the full fonts."""
    from app.billing.invoices import load_view

    departments = {"search": "Ωμέγα – Щука", "vision": CHINESE, "etl": ACCENTS + " € →"}
    tenants = [{**t, "namespaces": list(t["namespaces"]), "department": departments[t["name"]]} for t in SPEC_TENANTS]
    v = store_policy(session, policy_doc(tenants=tenants))
    add_hour(session, hour=datetime(2026, 10, 1, tzinfo=UTC), version=v.id, usage=USAGE, breaches=())
    row = periods.rate(session=session, period="2026-10", actor="fin")
    view = exports._detached_view(load_view(session=session, period=row))
    full = {t: pdf.render_invoice_pdf(view, t) for t in view.tenants}
    drawn, document = [], pdf._document

    def recorded(view, title, cut=None):
        drawn.append((title.rsplit(" - ", 1)[1], cut))
        return document(view, title, cut)

    monkeypatch.setattr(pdf, "_document", recorded)
    with pdf.shared_fonts():
        shared = {t: pdf.render_invoice_pdf(view, t) for t in view.tenants}
    assert shared == full
    last = {t: cut for t, cut in drawn}  # the fonts each invoice was drawn from, in the end
    assert last == {"etl": 0, "search": 1, CHINESE: None, ARABIC: None, "vision": None}  # vision's department: Chinese
    assert {t for t, cut in drawn if cut == 0} == set(view.tenants)  # every one tried the Latin-1 cut first
    assert "Department: Ωμέγα – Щука" in _text(tmp_path, shared["search"])
    assert f"Department: {ACCENTS} € →" in _text(tmp_path, shared["etl"])
