"""Every query window comes from app/metrics/windows.py: one edge rule, 1 ms short of whole units."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from app.metrics import windows
from tests.support.pysource import parse

APP = Path(__file__).resolve().parents[2] / "app"


def test_windows_are_one_millisecond_short_of_whole_units():
    assert (windows.MINUTE, windows.HOUR) == ("59999ms", "3599999ms")
    assert (windows.TEN_MINUTES, windows.ELEVEN_MINUTES) == ("599999ms", "659999ms")
    assert windows.window(1800 + 600) == "2399999ms"


def test_no_module_writes_a_window_of_its_own():
    """A range literal in milliseconds anywhere else in app/ would be a second definition of an edge."""
    literal = re.compile(r"\d{3,}ms\b")
    offenders = []
    for path in APP.rglob("*.py"):
        if path.name == "windows.py":
            continue
        tree = parse(path.read_text())
        docstrings = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)}
        offenders += [f"{path.relative_to(APP)}:{n.lineno}: {n.value}" for n in ast.walk(tree)
                      if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docstrings
                      and literal.search(n.value)]
    assert not offenders, offenders
