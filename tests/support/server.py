"""A real uvicorn serving the portal on a free loopback port (browser tests and load benchmarks)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]
UVICORN = (sys.executable, "-m", "uvicorn", "app.main:app")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ServerFailed(RuntimeError):
    """uvicorn exited or did not answer /healthz in time; the message holds its log."""


@dataclass
class Portal:
    base: str
    log_path: Path
    pid: int  # the server's process (with --workers, the supervisor of the workers)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


@contextmanager
def running_portal(database_url: str, *, extra_args: tuple[str, ...] = (), log_dir: Path | None = None,
                   timeout_s: float = 60, command: tuple[str, ...] = UVICORN, cwd: Path = ROOT,
                   env: dict[str, str] | None = None) -> Iterator[Portal]:
    """Start `command --host 127.0.0.1 --port N` on `database_url`, wait for /healthz, stop it on exit.

    `command` defaults to uvicorn from this interpreter (`chargeback serve` and `chargeback demo` take the same
    options); `env` replaces this process's environment when given.
    """
    port = free_port()
    log_path = Path(tempfile.mkdtemp(dir=log_dir, prefix="uvicorn-")) / "uvicorn.log"
    env = {**(os.environ if env is None else env), "CHARGEBACK_DATABASE_URL": database_url}
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [*command, "--host", "127.0.0.1", "--port", str(port), *extra_args],
            cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT,
        )
    portal = Portal(base=f"http://127.0.0.1:{port}", log_path=log_path, pid=proc.pid)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                if httpx.get(f"{portal.base}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise ServerFailed(f"{command[-1]} did not come up:\n{portal.log()}")
            time.sleep(0.2)
        yield portal
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextmanager
def peer_process(args: list[str], *, log_path: Path, ready: Callable[[], bool], what: str,
                 timeout_s: float = 30) -> Iterator[subprocess.Popen]:
    """Run a test peer (an SMTP server, a webhook receiver) from the repository root, logging to `log_path`;
    yield once `ready()` holds, stop it on exit (terminate, then kill after 10 s)."""
    with open(log_path, "w") as log:
        proc = subprocess.Popen(args, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + timeout_s
        while not ready():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{what} did not come up:\n" + log_path.read_text())
            time.sleep(0.05)
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
