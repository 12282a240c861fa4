"""The wheel built from this checkout, installed once per session into a throwaway virtualenv."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.deploy import ROOT

# Everything a checkout holds that is not source: the build must not see (or write into) any of it.
NOT_SOURCE = shutil.ignore_patterns(
    ".git", ".venv", "var", "artifacts", "build", "dist", "*.egg-info", "__pycache__", "*.pyc", "node_modules",
    ".pytest_cache", ".hypothesis", ".schemathesis",
)


@dataclass
class Installed:
    """A virtualenv holding only the wheel and its dependencies."""

    venv: Path

    @property
    def chargeback(self) -> str:
        return str(self.venv / "bin" / "chargeback")

    def env(self, **settings: str) -> dict[str, str]:
        """This process's environment minus anything that would import the checkout or pick its settings."""
        env = {k: v for k, v in os.environ.items()
               if k not in {"PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME"} and not k.startswith("CHARGEBACK_")}
        env["PATH"] = f"{self.venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
        env.update({f"CHARGEBACK_{k.upper()}": v for k, v in settings.items()})
        return env

    def run(self, *args: str, cwd: Path, check: bool = True, timeout: float = 300, **settings: str):
        """`chargeback ARGS` from `cwd`; on failure the assertion carries its output."""
        done = subprocess.run([self.chargeback, *args], cwd=cwd, env=self.env(**settings), capture_output=True,
                              text=True, timeout=timeout)
        if check:
            assert done.returncode == 0, f"chargeback {' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
        return done


@pytest.fixture(scope="session")
def wheel(tmp_path_factory) -> Path:
    """`pip wheel` of a copy of the checkout (a build writes build/ and *.egg-info next to its sources)."""
    base = tmp_path_factory.mktemp("wheel")
    source, dist = base / "src", base / "dist"
    shutil.copytree(ROOT, source, ignore=NOT_SOURCE)
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(dist), str(source)],
        capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    (built,) = dist.glob("gpu_chargeback-*.whl")
    return built


@pytest.fixture(scope="session")
def installed(wheel, tmp_path_factory) -> Iterator[Installed]:
    """`python -m venv` + `pip install the.whl`, as the Dockerfile's final stage does (dependencies from the index)."""
    venv = tmp_path_factory.mktemp("venv") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    installed = Installed(venv=venv)
    # Without PYTHONPATH: a checkout on it (its .egg-info) would make pip skip the wheel as already installed.
    done = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", str(wheel)],
                          capture_output=True, text=True, timeout=600, env=installed.env())
    assert done.returncode == 0, done.stdout + done.stderr
    assert (venv / "bin" / "chargeback").exists(), done.stdout + done.stderr
    yield installed
