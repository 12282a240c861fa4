"""A real HTTP receiver for the webhook tests, run as a process of its own.

    python -m tests.support.webhook_receiver --port N --dir DIR [--cert C --key K]

Every request is written to DIR/requests as NNNNNN.json (path, headers, body as text, received_at),
renamed into place so a reader never sees half of one, before the receiver answers it (over TLS
with --cert/--key). How it
answers comes from DIR/script.json, read at each request: {"/path": ["500", "500", "200"]} takes
one behaviour per request to that path, the last one repeating. Behaviours:

- "200", "410", "500", ...: that status, a short body (a "503:7" adds Retry-After: 7)
- "hang": accept, record, never answer (until the client gives up or the receiver stops)
- "drip": send a status line a byte every 0.3 s, forever
- "garbage": answer bytes that are not HTTP, then close
- "sleep:S": wait S seconds, then 200
- "say:STATUS:TEXT": that status with TEXT as the body; "redirect:URL": 302 to URL
- "until:NAME:STATUS": record, wait until the file DIR/NAME exists (the test says when), then answer STATUS
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import signal
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

STOP = threading.Event()


class Receiver(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address, directory: Path):
        super().__init__(address, Handler)
        self.directory = directory
        self.counter = itertools.count(1)
        self.seen: dict[str, int] = {}
        self.lock = threading.Lock()

    def behaviour(self, path: str) -> str:
        try:
            script = json.loads((self.directory / "script.json").read_text())
        except (OSError, ValueError):
            script = {}
        plan = script.get(path) or script.get("*") or ["200"]
        with self.lock:
            n = self.seen.get(path, 0)
            self.seen[path] = n + 1
        return plan[min(n, len(plan) - 1)]

    def record(self, entry: dict) -> None:
        with self.lock:
            n = next(self.counter)
        target = self.directory / "requests" / f"{n:06d}.json"
        tmp = target.with_suffix(".tmp")
        tmp.write_text(json.dumps(entry))
        os.replace(tmp, target)


class Handler(BaseHTTPRequestHandler):
    server: Receiver
    protocol_version = "HTTP/1.1"

    def log_message(self, format, *args):  # quiet: the records are the log
        pass

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length)
        behaviour = self.server.behaviour(self.path)
        self.server.record({"path": self.path, "headers": dict(self.headers.items()),
                            "body": body.decode("utf-8", "replace"), "received_at": time.time(),
                            "behaviour": behaviour})
        if behaviour == "hang":
            while not STOP.is_set() and not _closed(self.connection):
                time.sleep(0.05)  # state-free: polls STOP and the connection
            return
        if behaviour == "drip":
            for byte in itertools.cycle(b"HTTP/1.1 200 OK"):
                if STOP.wait(0.3):
                    return
                try:
                    self.wfile.write(bytes([byte]))
                    self.wfile.flush()
                except OSError:
                    return
        if behaviour == "garbage":
            self.wfile.write(b"\x00\xffnot http at all\r\n\r\n")
            self.close_connection = True
            return
        status, _, extra = behaviour.partition(":")
        reply = None
        if status == "say":  # say:STATUS:TEXT answers TEXT as the body (what an internal service would show)
            status, _, text = extra.partition(":")
            reply, extra = text.encode(), ""
        if status == "redirect":  # redirect:URL answers 302 to URL
            self.send_response(302)
            self.send_header("Location", extra)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if status == "until":
            name, _, status = extra.partition(":")
            extra = ""
            while not STOP.is_set() and not (self.server.directory / name).exists():
                time.sleep(0.02)  # state-free: polls for the test's file
        if status == "sleep":
            time.sleep(float(extra))
            status, extra = "200", ""
        reply = reply if reply is not None else json.dumps({"received": True, "status": int(status)}).encode()
        self.send_response(int(status))
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(reply)))
        if extra:
            self.send_header("Retry-After", extra)
        self.end_headers()
        self.wfile.write(reply)


def _closed(sock) -> bool:
    """True once the client has closed its end (a zero-byte peek)."""
    import select
    import socket

    readable, _, _ = select.select([sock], [], [], 0)
    if not readable:
        return False
    try:
        return sock.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--dir", type=Path, required=True)
    parser.add_argument("--cert")
    parser.add_argument("--key")
    args = parser.parse_args()
    (args.dir / "requests").mkdir(parents=True, exist_ok=True)
    server = Receiver(("127.0.0.1", args.port), args.dir)
    if args.cert:
        import ssl

        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(args.cert, args.key)
        server.socket = context.wrap_socket(server.socket, server_side=True)
    signal.signal(signal.SIGTERM, lambda *_: STOP.set())
    signal.signal(signal.SIGINT, lambda *_: STOP.set())
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    STOP.wait()
    server.shutdown()


if __name__ == "__main__":
    main()
