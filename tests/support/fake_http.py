"""A tiny real HTTP server for tests that need a misbehaving upstream (malformed answers, a byte drip).

    with FakeUpstream() as up:
        up.answer = (200, "application/json", b'{"status": "error"}')   # every request gets this
        up.drip = True                                                 # or: trickle bytes forever
"""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class FakeUpstream:
    def __init__(self) -> None:
        self.answer: tuple[int, str, bytes] = (200, "application/json", b"{}")
        self.drip = False
        self.requests: list[str] = []
        self._stop = threading.Event()
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                upstream.requests.append(self.path)
                if upstream.drip:
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(1 << 20))
                    self.end_headers()
                    try:
                        self.wfile.write(b'{"status":"success","data":{"resultType":"matrix","result":[')
                        # One byte at a time, each well inside the client's per-read timeout.
                        while not upstream._stop.wait(0.05):
                            self.wfile.write(b" ")
                            self.wfile.flush()
                    except OSError:
                        pass  # the client gave up: that is the point
                    return
                status, kind, body = upstream.answer
                reply(self, status, body, kind)

            def log_message(self, *args) -> None:
                pass

        self.served = Served(Handler)
        self.server, self.url = self.served.server, self.served.url

    def __enter__(self) -> FakeUpstream:
        self.served.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self.served.__exit__(*exc)


def reply(handler: BaseHTTPRequestHandler, status: int, body: bytes, kind: str = "application/json") -> None:
    """Send one whole answer from a handler."""
    handler.send_response(status)
    handler.send_header("Content-Type", kind)
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


class Served:
    """A handler class served by a ThreadingHTTPServer on a free port, from a thread, while in the `with` block."""

    def __init__(self, handler: type[BaseHTTPRequestHandler]):
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Served:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(timeout=5)


def elapsed(fn) -> float:
    """Seconds `fn()` took (for asserting that a deadline bounded it)."""
    began = time.monotonic()
    fn()
    return time.monotonic() - began
