"""Where the portal's own files are: inside the installed package (a wheel), else the checkout root."""

from __future__ import annotations

from functools import lru_cache
from importlib.resources import files
from pathlib import Path

BUNDLE = "_bundle"  # written by setup.py's build_py when a wheel is built


@lru_cache
def resource_root() -> Path:
    """The folder holding templates/, static/, migrations/ and alembic.ini."""
    packaged = files("app") / BUNDLE
    if packaged.is_dir():
        # A wheel installs as plain files, so the Traversable is a real path (Alembic and StaticFiles need one).
        return Path(str(packaged))
    return Path(__file__).resolve().parents[2]


def resource_path(name: str) -> Path:
    """One of templates, static, migrations, alembic.ini; a missing one is an installation error, said plainly."""
    path = resource_root() / name
    if not path.exists():
        raise RuntimeError(f"{name} not found at {path}: the package was installed without its data files")
    return path
