"""app/billing has no import cycle (module-level or local imports) and never imports the layers above it."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from tests.support.pysource import parse

BILLING = Path(__file__).resolve().parents[2] / "app" / "billing"
ABOVE = ("app.web", "app.api", "app.review")


def _imports() -> dict[str, set[str]]:
    out = {}
    for path in BILLING.glob("*.py"):
        names = set()
        for node in ast.walk(parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.module:
                if node.module == "app.billing":
                    names |= {f"app.billing.{a.name}" for a in node.names}
                else:
                    names.add(node.module)
            elif isinstance(node, ast.Import):
                names |= {a.name for a in node.names}
        out[f"app.billing.{path.stem}"] = names
    return out


def test_no_import_cycle_inside_billing():
    graph = {m: {d for d in deps if d.startswith("app.billing.")} for m, deps in _imports().items()}
    done: set[str] = set()

    def visit(module: str, path: tuple[str, ...]) -> None:
        assert module not in path, "import cycle: " + " -> ".join((*path, module))
        if module in done:
            return
        for dep in graph.get(module, ()):
            visit(dep, (*path, module))
        done.add(module)

    for module in graph:
        visit(module, ())


def test_billing_imports_nothing_above_it():
    wrong = {(m, d) for m, deps in _imports().items() for d in deps if d.startswith(ABOVE)}
    assert not wrong


def test_starting_the_app_or_the_cli_loads_no_pdf_library():
    """fpdf2 and fontTools load with the first PDF drawn: ~0.4 s and ~50 MB of every process's start otherwise."""
    probe = ("import sys, app.main, app.cli; "
             "print(sorted(m for m in sys.modules if m.split('.')[0] in ('fpdf', 'fontTools', 'uharfbuzz') "
             "or m in ('app.billing.pdf', 'app.billing.report_pdf')))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=BILLING.parents[1])
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
