"""The one CSV writer: every cell reads back as written (plus the neutralising quote), no line of any cell
starts a formula, plain numbers stay numbers; human text with control characters is refused by path."""

from __future__ import annotations

import csv
import io

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.core import safe_text
from app.core.errors import Invalid
from app.core.safe_text import FORMULA_START, LINE_BREAKS, csv_bytes, neutralise


def _read(data: bytes) -> list[list[str]]:
    return list(csv.reader(io.StringIO(data.decode("utf-8"), newline="")))


def test_a_bare_carriage_return_cannot_start_a_row_or_a_formula():
    # csv.writer(lineterminator="\n") wrote `late fix\r=SUM(1+2)` unquoted: a reader splitting on CR
    # (csv.reader does) read a new row whose first cell was the live formula.
    data = csv_bytes(["reason", "amount"], [["late fix\r=SUM(1+2)", "-12.50"]])
    assert _read(data) == [["reason", "amount"], ["late fix\r'=SUM(1+2)", "-12.50"]]
    assert b'"late fix\r\'=SUM(1+2)"' in data


@pytest.mark.parametrize("brk", list(LINE_BREAKS))
def test_every_line_break_quotes_the_cell_and_the_next_line_is_neutralised(brk):
    data = csv_bytes(["a", "b"], [[f"x{brk}@cmd", "y"]])
    assert data.startswith(b"a,b\n\"x")
    rows = _read(data)
    assert rows == [["a", "b"], [f"x{brk}'@cmd", "y"]]


def test_neutralise():
    assert neutralise("=1+1") == "'=1+1"
    assert neutralise("-12.50") == "-12.50"
    assert neutralise("-1+2") == "'-1+2"
    assert neutralise("@SUM(A1)") == "'@SUM(A1)"
    assert neutralise("\uff1dSUM(A1)") == "'\uff1dSUM(A1)"  # full-width equals sign
    assert neutralise("\r=1") == "'\r'=1"
    assert neutralise("ok\n+1\n-2.5") == "ok\n'+1\n'-2.5"  # only a whole cell is a number
    assert neutralise("research") == "research"


def test_plain_cells_are_written_as_csv_writer_writes_them():
    rows = [["research", "12.50", "a,b", 'say "hi"', "", "two\nlines"]]
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["h1", "h2", "h3", "h4", "h5", "h6"])
    writer.writerows(rows)
    assert csv_bytes(["h1", "h2", "h3", "h4", "h5", "h6"], rows) == buffer.getvalue().encode()


def _starts_formula(text: str) -> bool:
    return text[:1] in FORMULA_START


@given(st.lists(st.lists(st.text(), min_size=3, max_size=3), min_size=1, max_size=5))
def test_any_text_round_trips_and_no_line_of_a_cell_is_live(rows):
    back = _read(csv_bytes(["a", "b", "c"], rows))
    assert back[0] == ["a", "b", "c"]
    assert len(back) == len(rows) + 1
    for written, read in zip(rows, back[1:], strict=True):
        assert read == [neutralise(cell) for cell in written]
        for cell in read:
            if not safe_text._NUMBER.fullmatch(cell):
                assert not _starts_formula(cell)
                for line in safe_text._LINE_SPLIT.split(cell)[2::2]:
                    assert not _starts_formula(line)


@given(st.text())
def test_neutralising_only_prefixes_lines_with_a_quote(value):
    before = safe_text._LINE_SPLIT.split(value)
    after = safe_text._LINE_SPLIT.split(neutralise(value))
    assert len(after) == len(before)
    for old, new in zip(before, after, strict=True):
        assert new in (old, "'" + old)


@given(st.decimals(min_value=-10**9, max_value=10**9, places=2, allow_nan=False, allow_infinity=False))
def test_amounts_stay_numbers(amount):
    cell = format(amount, "f")
    assert _read(csv_bytes(["amount"], [[cell]]))[1] == [cell]


@pytest.mark.parametrize("char", ["\n", "\r", "\t", "\x00", "\x1b", "\x7f", "\x85", "\x9f", "\u2028", "\u2029"])
def test_control_and_line_separator_characters_are_refused_by_path(char):
    with pytest.raises(Invalid) as info:
        safe_text.check_text("The correction is not valid", {"reason": "ok", "title": f"bad{char}text"})
    assert info.value.status == 422
    [error] = info.value.errors
    assert error.path == "title"
    assert f"U+{ord(char):04X}" in error.message and "position 4" in error.message


def test_ordinary_unicode_text_passes():
    assert safe_text.text_errors({"name": "Recherche & Développement — 研究", "none": None, "empty": ""}) == []
