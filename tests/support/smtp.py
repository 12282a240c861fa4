"""The SMTP server process for tests (tests/support/smtp_server.py) and reading what it received."""

from __future__ import annotations

import email
import email.policy
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from email.message import EmailMessage
from pathlib import Path

from tests.support.server import free_port, peer_process

USER, PASSWORD = "portal", "s3cret-relay"


@dataclass
class Received:
    recipients: list[str]
    message: EmailMessage

    def attachments(self) -> dict[str, bytes]:
        return {part.get_filename(): part.get_content() for part in self.message.iter_attachments()}


@dataclass
class SmtpServer:
    port: int
    maildir: Path
    proc: subprocess.Popen | None = None

    def received(self) -> list[Received]:
        """Every message accepted so far, in order."""
        out = []
        for path in sorted(self.maildir.glob("*.eml")):
            rcpt = path.with_suffix(".rcpt").read_text().splitlines()
            message = email.message_from_bytes(path.read_bytes(), policy=email.policy.default)
            out.append(Received(rcpt, message))  # type: ignore[arg-type]
        return out


def _accepting(port: int, *, tls: bool = False) -> bool:
    """The server greets (220); with implicit TLS, a connection is enough (its greeting comes after the handshake)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
            return tls or sock.recv(3) == b"220"
    except OSError:
        return False


@contextmanager
def smtp_server(directory: Path, *, port: int | None = None, auth: bool = True, cert: tuple[Path, Path] | None = None,
                implicit_tls: bool = False, timeout_s: float = 30) -> Iterator[SmtpServer]:
    """Start the server (AUTH required with USER/PASSWORD unless `auth` is False), wait until it listens, stop it.

    With `cert`: STARTTLS required, or TLS from the first byte with `implicit_tls`.
    """
    server = SmtpServer(port=port or free_port(), maildir=directory / "maildir")
    args = [sys.executable, "-m", "tests.support.smtp_server", "--port", str(server.port), "--maildir", str(server.maildir)]
    if auth:
        args += ["--user", USER, "--password", PASSWORD]
    if cert:
        args += ["--cert", str(cert[0]), "--key", str(cert[1])] + (["--implicit"] if implicit_tls else [])
    with peer_process(args, log_path=directory / f"smtp-{server.port}.log", what="SMTP server", timeout_s=timeout_s,
                      ready=lambda: _accepting(server.port, tls=implicit_tls)) as proc:
        server.proc = proc
        yield server


def self_signed(directory: Path) -> tuple[Path, Path]:
    """A throwaway certificate for 127.0.0.1 and localhost (its own CA file too)."""
    cert, key = directory / "smtp-cert.pem", directory / "smtp-key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
                    "-days", "1", "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
                   check=True, capture_output=True)
    return cert, key
