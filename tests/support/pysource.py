"""Parsing the project's own Python source in tests that check its import graph."""

from __future__ import annotations

import ast


def parse(source: str, filename: str = "<unknown>") -> ast.Module:
    """`ast.parse`, safe beside other threads of the test process.

    CPython 3.11 keeps the AST converter's recursion counter in state shared by the whole interpreter
    (python/cpython gh-106905, fixed in 3.12): when another thread of the test process (a server under
    test compiling, a library introspecting source) converts a tree at the same moment, the parse fails with
    `SystemError: AST constructor recursion depth mismatch` though the source is fine. That failure says
    nothing about the source, so the parse is simply done again; any other error is raised as it is.
    """
    for attempt in range(5):
        try:
            return ast.parse(source, filename=filename)
        except SystemError as error:
            if "recursion depth mismatch" not in str(error) or attempt == 4:
                raise
    raise AssertionError("unreachable")
