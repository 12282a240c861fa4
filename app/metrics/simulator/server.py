"""A live exporter endpoint: GET /metrics answers with the simulated state at wall-clock now."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from app.core.timeutil import utcnow

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def serve_exporter(sim, host: str = "127.0.0.1", port: int = 0,
                   families: tuple[str, ...] | None = None) -> ThreadingHTTPServer:
    """Serve `sim` (only `families`, when given) on host:port (0 = any free port) from a daemon thread; .shutdown() stops it."""
    lock = sim.lock  # the simulator's caches are shared by the request threads (and `Simulator.hold`)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.split("?", 1)[0] != "/metrics":
                self._send(404, b"not found: try /metrics\n", "text/plain; charset=utf-8")
                return
            with lock:
                body = sim.exposition(utcnow(), families).encode()
            self._send(200, body, CONTENT_TYPE)

        def _send(self, status: int, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args) -> None:
            pass

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="simulator-exporter", daemon=True).start()
    return server
