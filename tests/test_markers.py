"""The automatic markers name their fixtures by defining module: a moved fixture must not silently stop marking."""

from __future__ import annotations

import importlib

import pytest

from tests.support.markers import MARKING_FIXTURES, SLOW_MODULES


@pytest.mark.parametrize("qualified", sorted(name for names in MARKING_FIXTURES.values() for name in names))
def test_every_marking_fixture_exists_where_it_is_named(qualified):
    module, _, name = qualified.rpartition(".")
    definition = getattr(importlib.import_module(module), name, None)
    assert definition is not None, f"{qualified} is not defined: update MARKING_FIXTURES in tests/conftest.py"


@pytest.mark.parametrize("module", sorted(SLOW_MODULES))
def test_every_slow_module_exists(module):
    """A renamed module left in SLOW_MODULES would silently join the quick tier."""
    importlib.import_module(module)
