"""A real SMTP server for the e-mail tests (aiosmtpd), run as a process of its own.

    python -m tests.support.smtp_server --port N --maildir DIR [--user U --password P] [--cert C --key K [--implicit]]

Each accepted message is written to DIR as NNNN.eml (the bytes received) beside NNNN.rcpt (the
envelope recipients, one a line), renamed into place so a reader never sees half a message. With
--user, AUTH (PLAIN, LOGIN) is required; with --cert/--key, STARTTLS is offered and required, or with
--implicit TLS is spoken from the first byte (port 465 style).
"""

from __future__ import annotations

import argparse
import itertools
import os
import signal
import ssl
import threading
from pathlib import Path

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword


class Maildir:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.counter = itertools.count(1)
        self.lock = threading.Lock()

    async def handle_DATA(self, server, session, envelope) -> str:
        with self.lock:
            n = next(self.counter)
        base = self.directory / f"{n:04d}"
        for suffix, data in ((".rcpt", "\n".join(envelope.rcpt_tos).encode()), (".eml", envelope.original_content)):
            tmp = base.with_suffix(suffix + ".tmp")
            tmp.write_bytes(data)
            os.replace(tmp, base.with_suffix(suffix))
        return "250 Message accepted for delivery"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--maildir", type=Path, required=True)
    parser.add_argument("--user")
    parser.add_argument("--password")
    parser.add_argument("--cert")
    parser.add_argument("--key")
    parser.add_argument("--implicit", action="store_true")
    args = parser.parse_args()
    args.maildir.mkdir(parents=True, exist_ok=True)
    options: dict = {}
    if args.user:
        expected = LoginPassword(args.user.encode(), (args.password or "").encode())

        def authenticator(server, session, envelope, mechanism, auth_data) -> AuthResult:
            ok = isinstance(auth_data, LoginPassword) and auth_data == expected
            return AuthResult(success=ok, handled=False)  # aiosmtpd answers 235 or 535 itself

        # Loopback only: AUTH over a plain connection is allowed unless STARTTLS is configured.
        # aiosmtpd counts only STARTTLS as TLS for AUTH: with implicit TLS the check is off (it is encrypted anyway).
        options.update(authenticator=authenticator, auth_required=True,
                       auth_require_tls=bool(args.cert) and not args.implicit)
    if args.cert:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(args.cert, args.key)
        if args.implicit:
            options.update(ssl_context=context)
        else:
            options.update(tls_context=context, require_starttls=True)
    controller = Controller(Maildir(args.maildir), hostname="127.0.0.1", port=args.port, **options)
    controller.start()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    stop.wait()
    controller.stop()


if __name__ == "__main__":
    main()
