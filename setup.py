"""Build hook: the wheel carries templates/, static/, migrations/ and alembic.ini inside `app` (as app/_bundle).

The top-level folders stay the source of truth (the design card names them and every tool and test
uses them in a checkout); they are copied into the package only when a wheel is built.
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
BUNDLE = "_bundle"  # keep in step with app/core/resources.py
BUNDLED = ("templates", "static", "migrations", "alembic.ini")


class BuildPyWithBundle(build_py):
    """build_py, then the portal's non-Python files copied under app/_bundle in the build tree."""

    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return  # an editable install reads them from the checkout itself
        target = Path(self.build_lib) / "app" / BUNDLE
        for name in BUNDLED:
            source, dest = ROOT / name, target / name
            if source.is_dir():
                shutil.copytree(source, dest, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
            else:
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, dest)


setup(cmdclass={"build_py": BuildPyWithBundle})
