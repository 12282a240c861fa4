"""One bounded HTTP POST to a webhook receiver: whatever the receiver does, it ends within the deadline.

`connect_timeout_s` bounds the TCP (and TLS) connection, `read_timeout_s` each wait for bytes, and
`deadline_s` the whole attempt: a receiver that accepts and never answers, or drips its answer a
byte at a time, has its socket shut down by a watchdog at the deadline. Redirects are not followed
(Standard Webhooks: a 3xx is a failure; the URL should be updated). Only the first bytes of the
answer are read and kept; an answer that is not HTTP at all is a failure with the parser's reason.
"""

from __future__ import annotations

import http.client
import socket
import ssl
import threading
import time
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from urllib.parse import urlsplit

from app.core.outbound import AllowList, Refused, Resolver, Target, check_host
from app.core.timeutil import utcnow

SNIPPET_BYTES = 256  # of the answer's body, kept with the attempt: an excerpt, never a document
REFUSED = "refused by the outbound URL policy"
COULD_NOT_CONNECT = "could not connect"
USER_AGENT = "gpu-chargeback-webhooks/1"


@dataclass(frozen=True)
class Outcome:
    """What one POST came to: a status (any answer), or an error (no complete HTTP answer)."""

    status: int | None
    duration_ms: int
    error: str | None = None
    response: str = ""  # the first SNIPPET_BYTES of the body, decoded leniently (nothing for a refused host)
    retry_after_s: float | None = None  # from an answer's Retry-After (429, 503)

    @property
    def ok(self) -> bool:
        return self.status is not None and 200 <= self.status < 300


def _retry_after(value: str | None) -> float | None:
    """Retry-After in seconds from now, given as seconds or an HTTP date (RFC 9110 10.2.3); None if unreadable."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(min(int(value), 7 * 86400))
    try:
        return max((parsedate_to_datetime(value) - utcnow()).total_seconds(), 0.0)
    except (TypeError, ValueError):
        return None


def clean(text: str) -> str:
    """Text safe to store and show: control characters (NUL refused by PostgreSQL among them) written as escapes."""
    return "".join(c if c in "\n\t" or (ord(c) >= 32 and ord(c) != 127) else f"\\x{ord(c):02x}" for c in text)


MAX_ADDRESSES = 4  # of a name's checked addresses tried in turn (IPv6 and IPv4 of one host, round-robin pairs)


class _PinnedHTTP(http.client.HTTPConnection):
    """Connects to the addresses the outbound policy checked, never to a fresh lookup of the name (no DNS
    rebinding between the check and the connect); Host, and for https SNI and the certificate check, stay the name."""

    addresses: tuple[str, ...] = ()
    tcp_connected = False

    def _open(self) -> socket.socket:
        error: OSError | None = None
        for address in self.addresses[:MAX_ADDRESSES]:
            try:
                sock = socket.create_connection((address, self.port), self.timeout)
            except OSError as exc:
                error = exc
                continue
            self.tcp_connected = True
            return sock
        raise error or OSError("no address")

    def connect(self) -> None:
        self.sock = self._open()


class _PinnedHTTPS(_PinnedHTTP, http.client.HTTPSConnection):
    def connect(self) -> None:
        self.sock = self._context.wrap_socket(self._open(), server_hostname=self.host)  # type: ignore[attr-defined]


def _connection(url: str, target: Target, *, timeout: float, ca_file: str | None) -> tuple[_PinnedHTTP, str]:
    parts = urlsplit(url)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    conn: _PinnedHTTP
    if parts.scheme == "https":
        conn = _PinnedHTTPS(parts.hostname or "", parts.port, timeout=timeout,
                            context=ssl.create_default_context(cafile=ca_file))
    else:
        conn = _PinnedHTTP(parts.hostname or "", parts.port, timeout=timeout)
    conn.addresses = target.addresses
    return conn, path


def _target(url: str, *, allow: AllowList, resolver: Resolver | None) -> Target:
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    target = check_host(parts.hostname or "", port, allow=allow, **({"resolver": resolver} if resolver else {}))
    assert target is not None  # resolve_allowed: always a target
    return target


def post(url: str, body: bytes, headers: dict[str, str], *, connect_timeout_s: float, read_timeout_s: float,
         deadline_s: float, allow: AllowList, ca_file: str | None = None, resolver: Resolver | None = None) -> Outcome:
    """POST `body` to `url` if the outbound policy permits its host now; never raises for anything the network,
    the resolver or the receiver does."""
    began = time.monotonic()

    def elapsed_ms() -> int:
        return int((time.monotonic() - began) * 1000)

    try:
        target = _target(url, allow=allow, resolver=resolver)
    except Refused as exc:  # no connection is made: nothing of that host is learned or kept
        return Outcome(status=None, duration_ms=elapsed_ms(), error=clean(f"{REFUSED}: {exc}"))
    cut = threading.Event()
    conn, path = _connection(url, target, timeout=min(connect_timeout_s, deadline_s), ca_file=ca_file)

    def watchdog() -> None:
        cut.set()
        sock = conn.sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)  # wakes a blocked recv/send at once
            except OSError:
                pass

    timer = threading.Timer(deadline_s, watchdog)
    timer.daemon = True
    timer.start()

    connected = False
    try:
        conn.connect()
        connected = True
        conn.sock.settimeout(read_timeout_s)
        conn.request("POST", path, body=body, headers={
            **headers, "Content-Type": "application/json", "User-Agent": USER_AGENT, "Connection": "close"})
        response = conn.getresponse()
        snippet = response.read(SNIPPET_BYTES)  # at most this much, however long the answer
        return Outcome(status=response.status, duration_ms=elapsed_ms(), response=clean(snippet.decode("utf-8", "replace")),
                       retry_after_s=_retry_after(response.getheader("Retry-After")))
    except Exception as exc:  # every way a receiver can fail us ends as a recorded reason
        if not conn.tcp_connected:  # refused, filtered, unreachable: one reason, so no port's state is told apart
            return Outcome(status=None, duration_ms=elapsed_ms(), error=COULD_NOT_CONNECT)
        reason = _reason(exc, cut=cut.is_set(), deadline_s=deadline_s, connected=connected,
                         timeout_s=read_timeout_s if connected else min(connect_timeout_s, deadline_s))
        return Outcome(status=None, duration_ms=elapsed_ms(), error=clean(reason))
    finally:
        timer.cancel()
        conn.close()


def _reason(exc: BaseException, *, cut: bool, deadline_s: float, connected: bool, timeout_s: float) -> str:
    if cut:
        return f"no complete answer within the {deadline_s:g} s deadline"
    if isinstance(exc, TimeoutError | socket.timeout):
        if connected:
            return f"read timeout: no bytes for {timeout_s:g} s"
        return f"connect timeout: no connection within {timeout_s:g} s"
    if isinstance(exc, http.client.BadStatusLine | http.client.LineTooLong | http.client.IncompleteRead):
        return f"not an HTTP answer: {type(exc).__name__}: {str(exc)[:200]}"
    if isinstance(exc, ssl.SSLError):
        return f"TLS: {exc.reason or exc}"
    text = str(exc)[:300]
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
