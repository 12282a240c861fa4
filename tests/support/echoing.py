"""A real HTTP server that answers every request badly, repeating the credentials it was sent (issue 25 item 6).

    with EchoingProxy() as proxy:
        proxy.shape = "400"   # "500" page, "400" JSON error, "status" error, "warning", "not-json"
"""

from __future__ import annotations

import base64
import json
from http.server import BaseHTTPRequestHandler

from tests.support.fake_http import Served, reply


class EchoingProxy:
    """Answers every request badly, repeating what it was sent (the Authorization header, decoded too) in the
    shape `shape` asks: a 500 page, a 400 JSON error, status "error", a warning, a body that is not JSON."""

    def __init__(self) -> None:
        self.shape = "500"
        self.requests = 0
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                proxy.requests += 1
                sent = self.headers.get("Authorization", "")
                scheme, _, value = sent.partition(" ")
                decoded = base64.b64decode(value).decode(errors="replace") if scheme == "Basic" else value
                echo = f"denied: Authorization: {sent} ({decoded})"
                if proxy.shape == "500":
                    reply(self, 500, f"<html>{echo}</html>".encode(), "text/html")
                elif proxy.shape == "400":
                    reply(self, 400, json.dumps({"status": "error", "errorType": "bad_data", "error": echo}).encode())
                elif proxy.shape == "status":
                    reply(self, 200, json.dumps({"status": "error", "errorType": "auth", "error": echo}).encode())
                elif proxy.shape == "warning":
                    reply(self, 200, json.dumps({"status": "success", "warnings": [echo],
                                                 "data": {"resultType": "vector", "result": []}}).encode())
                else:
                    reply(self, 200, f"not json {echo}".encode(), "text/plain")

            def log_message(self, *args) -> None:
                pass

        self.served = Served(Handler)
        self.url = self.served.url

    def __enter__(self) -> EchoingProxy:
        self.served.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.served.__exit__(*exc)
