"""The webhook receiver process (tests/support/webhook_receiver.py) and reading what it received."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.server import free_port, peer_process

# The operator's allow-list tests run with (tests/conftest.py): receivers on loopback, made-up names only saved.
TEST_WEBHOOK_ALLOW = "127.0.0.0/8,::1/128,localhost,erp.example,erp.example.com,ledger.example,erp.internal"


@dataclass
class Request:
    path: str
    headers: dict[str, str]
    body: str
    received_at: float
    behaviour: str

    @property
    def webhook_id(self) -> str:
        return self.header("webhook-id")

    def header(self, name: str) -> str:
        return {k.lower(): v for k, v in self.headers.items()}[name.lower()]

    def json(self) -> dict:
        return json.loads(self.body)


@dataclass
class Receiver:
    port: int
    directory: Path
    proc: subprocess.Popen | None = None

    tls: bool = False

    def url(self, path: str) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}{path}"

    def script(self, plan: dict[str, list[str]]) -> None:
        """How it answers from now on, per path (see the receiver's docstring)."""
        tmp = self.directory / "script.tmp"
        tmp.write_text(json.dumps(plan))
        tmp.replace(self.directory / "script.json")

    def requests(self, path: str | None = None) -> list[Request]:
        """Every request received so far (to `path`), in order."""
        out = []
        for file in sorted((self.directory / "requests").glob("*.json")):
            request = Request(**json.loads(file.read_text()))
            if path is None or request.path == path:
                out.append(request)
        return out


def wait_for(predicate: Callable[[], Any], what: str, *, timeout_s: float = 60) -> Any:
    """Poll `predicate` until it returns something truthy; fail with `what` after the deadline."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


@contextmanager
def webhook_receiver(directory: Path, *, plan: dict[str, list[str]] | None = None, cert: tuple[Path, Path] | None = None,
                     timeout_s: float = 30) -> Iterator[Receiver]:
    """Start the receiver (answering 200 unless `plan` says otherwise; https with `cert`), wait until it listens,
    stop it."""
    directory.mkdir(parents=True, exist_ok=True)
    receiver = Receiver(port=free_port(), directory=directory, tls=cert is not None)
    receiver.script(plan or {})
    args = [sys.executable, "-m", "tests.support.webhook_receiver", "--port", str(receiver.port), "--dir", str(directory)]
    if cert:
        args += ["--cert", str(cert[0]), "--key", str(cert[1])]
    with peer_process(args, log_path=directory / "receiver.log", what="webhook receiver", timeout_s=timeout_s,
                      ready=lambda: _listening(receiver.port)) as proc:
        receiver.proc = proc
        yield receiver
