"""The dependency order of the packages: core <- http <- auth <- policy <- metrics <- billing <- review <- notify <- api/web.

Every module under app/ is parsed (not imported) and each of its imports, function-local ones
included, is checked: a package imports only packages of its own rank or below, and no modules
import each other in a circle.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support.pysource import parse

APP = Path(__file__).resolve().parent.parent / "app"

RANK = {"core": 0, "http": 1, "auth": 2, "policy": 3, "metrics": 4, "billing": 5, "review": 6, "notify": 7}
TOP = 8  # api, web, cli, demo, main: the entry points, which may import any domain

# Arrows that run back up today and are being removed by the other parts of issue 11.
# The lead empties this list after merging them; nothing may be added to it.
ALLOWED_UPWARD: set[tuple[str, str]] = set()  # none left: keep it that way
# Modules that import each other today, each circle as the set of its modules ("billing" part).
ALLOWED_CYCLES: list[set[str]] = []


def _module_name(path: Path) -> str:
    parts = path.relative_to(APP.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(path): path for path in APP.rglob("*.py")}


def _resolve(name: str) -> str | None:
    """The app module `name` refers to (a module, or the package holding it), or None outside app."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _imports(module: str) -> set[str]:
    tree = parse(MODULES[module].read_text(), str(MODULES[module]))
    package = module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            # `from app.auth import service` names a module; `from app.auth.deps import X` a name in one.
            names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base for alias in node.names]
        else:
            continue
        found.update(target for name in names if name.startswith("app") and (target := _resolve(name)))
    found.discard(module)
    return found


GRAPH = {module: _imports(module) for module in MODULES}


def _rank(module: str) -> int:
    parts = module.split(".")
    return RANK.get(parts[1], TOP) if len(parts) > 1 else TOP


def test_no_import_runs_back_up_the_layers():
    upward = sorted(
        (module, target)
        for module, targets in GRAPH.items()
        for target in targets
        if _rank(target) > _rank(module) and (module, target) not in ALLOWED_UPWARD
    )
    assert upward == [], "imports against the order core <- http <- auth <- policy <- metrics <- billing <- review <- api/web"


def test_the_allow_list_holds_only_arrows_that_still_exist():
    stale = sorted(edge for edge in ALLOWED_UPWARD if edge[1] not in GRAPH.get(edge[0], set()))
    assert stale == [], "remove these from ALLOWED_UPWARD"


def _cycles() -> list[set[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in GRAPH[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                out.append(component)

    for node in sorted(GRAPH):
        if node not in index:
            visit(node)
    return out


def test_no_modules_import_each_other_in_a_circle():
    cycles = [sorted(c) for c in _cycles() if not any(c <= allowed for allowed in ALLOWED_CYCLES)]
    assert cycles == []


def test_the_checker_sees_local_imports_and_packages():
    assert "app.auth.service" in GRAPH["app.auth.deps"]
    assert _resolve("app.http.problems.problem_response") == "app.http.problems"
    assert _rank("app.http.templating") == 1 and _rank("app.main") == TOP
