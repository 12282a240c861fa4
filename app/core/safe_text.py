"""Text that leaves the portal safely: human-entered text refused with control characters, CSV cells that a
spreadsheet cannot run as formulas.

Two halves of one policy (issue 25 item 2). Text people type (reasons, names, titles, departments, contacts)
is refused when it holds a control or line-separator character: nothing downstream (a mail header, a CSV
row, a PDF line, a log line) has to guess what such a character means. Text the portal does not choose
(label values read from metrics: namespaces, pods, services) is stored verbatim, so every CSV cell is
written through `csv_bytes`: quoted when it holds anything a reader splits on, and neutralised (OWASP CSV
injection: a leading single quote) when it, or any line inside it, starts like a formula.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Mapping

from app.core.errors import FieldError, Invalid

# What a spreadsheet runs as a formula at the start of a cell (OWASP), with the full-width forms a
# spreadsheet folds to them and the Unicode minus sign.
FORMULA_START = ("=", "+", "-", "@", "\t", "\r", "\uff1d", "\uff0b", "\uff0d", "\uff20", "\u2212")
# Every character str.splitlines() breaks on: a cell holding any of them is quoted, and each line after
# one is neutralised as if it started the cell (an importer that splits lines first sees it there).
LINE_BREAKS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
_LINE_SPLIT = re.compile("([" + re.escape(LINE_BREAKS) + "])")
_NUMBER = re.compile(r"-?[0-9]+(\.[0-9]+)?")
_NEEDS_QUOTES = frozenset(',"' + LINE_BREAKS)


def is_control(char: str) -> bool:
    """C0 (tab, CR and LF included), DEL, C1 (NEL included) or a Unicode line/paragraph separator."""
    code = ord(char)
    return code < 0x20 or 0x7F <= code <= 0x9F or code in (0x2028, 0x2029)


PROSE_BREAKS = "\n\r\t"  # what a textarea sends in several lines of prose (justifications, comments); CR only in CRLF


def control_problem(value: str, *, allow: str = "") -> str | None:
    """Why `value` is refused as human-entered text (its first control character, readably), or None.

    `allow`: characters let through (PROSE_BREAKS for multi-line prose); one-line text allows none."""
    for i, char in enumerate(value):
        bare_cr = char == "\r" and value[i + 1:i + 2] != "\n"  # a CR alone ends a line (and a CSV row) for some readers
        if is_control(char) and (char not in allow or bare_cr):
            name = unicodedata.name(char, "") or {0x85: "NEXT LINE"}.get(ord(char), "control character")
            return (f"must not contain control or line-separator characters "
                    f"(U+{ord(char):04X} {name.lower()} at position {i + 1})")
    return None


def printable(value: str) -> str:
    """`value` with each control or line-separator character shown as its code (U+2028): for one-line
    places such as a mail header, where such a character ends the header (or the message is refused)."""
    return "".join(f"U+{ord(c):04X}" if is_control(c) else c for c in value)


def text_errors(fields: Mapping[str, str | None] | Iterable[tuple[str, str | None]], *,
                allow: str = "") -> list[FieldError]:
    """One FieldError per (path, value) whose value holds a control character (None and "" pass)."""
    items = fields.items() if isinstance(fields, Mapping) else fields
    return [FieldError(path, problem) for path, value in items
            if value and (problem := control_problem(value, allow=allow))]


def check_text(detail: str, fields: Mapping[str, str | None] | Iterable[tuple[str, str | None]]) -> None:
    """422 naming each field path whose one-line human-entered text holds a control character."""
    if errors := text_errors(fields):
        raise Invalid(detail, errors)


def _starts_formula(line: str) -> bool:
    return line[:1] in FORMULA_START


def neutralise(value: str) -> str:
    """A cell a spreadsheet will not run as a formula, at its start or after any line break in it;
    plain numbers (-12.50) stay numeric."""
    if _NUMBER.fullmatch(value):
        return value
    parts = _LINE_SPLIT.split(value)  # [line, break, line, break, ...]
    for i in range(0, len(parts), 2):
        if _starts_formula(value if i == 0 else parts[i]):
            parts[i] = "'" + parts[i]
    return "".join(parts)


def csv_cell(value: str) -> str:
    """One neutralised cell, quoted (RFC 4180) when it holds a separator, a quote or any line break.

    csv.writer(lineterminator="\\n") leaves a bare CR (and U+2028, NEL...) unquoted, which readers that
    split on them turn into a new row whose first cell is then live."""
    value = neutralise(value)
    if _NEEDS_QUOTES.intersection(value):
        return '"' + value.replace('"', '""') + '"'
    return value


def csv_bytes(header: list[str], rows: Iterable[Iterable[str]]) -> bytes:
    """The CSV of `header` and `rows`, every cell through `csv_cell`: the one writer of every CSV export."""
    lines = [",".join(csv_cell(cell) for cell in header)]
    lines += [",".join(csv_cell(cell) for cell in row) for row in rows]
    return ("\n".join(lines) + "\n").encode("utf-8")
