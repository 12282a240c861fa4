"""A small, strict reader of the Prometheus HTTP API for `chargeback doctor`: instant queries only.

Every answer is validated before use; anything else (an HTTP error, HTML, a partial answer with
`warnings`, a malformed body, a server that drips bytes past the deadline) raises `ReadError`, which
the doctor turns into a "could not read" finding instead of a traceback.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass

import requests

MAX_BYTES = 256 * 1024 * 1024  # a preflight answer larger than this is not one we would sign


class ReadError(Exception):
    """An answer the doctor cannot use; the message says why, in words."""


@dataclass
class PromReader:
    """GETs against a Prometheus-compatible API (Prometheus, Thanos, Mimir, VictoriaMetrics)."""

    url: str
    timeout_s: float = 30.0

    def _get(self, path: str, params: list[tuple[str, str]]) -> object:
        deadline = time.monotonic() + self.timeout_s
        try:
            with requests.get(self.url.rstrip("/") + path, params=params, timeout=self.timeout_s, stream=True) as r:
                chunks, size = [], 0
                for chunk in r.iter_content(65536):
                    size += len(chunk)
                    if size > MAX_BYTES:
                        raise ReadError(f"answer larger than {MAX_BYTES // 2**20} MiB")
                    if time.monotonic() > deadline:
                        raise ReadError(f"no complete answer within {self.timeout_s:g} s")
                    chunks.append(chunk)
                status = r.status_code
        except requests.RequestException as exc:
            raise ReadError(f"cannot reach {self.url}: {type(exc).__name__}") from exc
        try:
            body = json.loads(b"".join(chunks))
        except (ValueError, UnicodeDecodeError):
            raise ReadError(f"HTTP {status}, not a JSON answer (is {self.url} the Prometheus API?)") from None
        if not isinstance(body, dict) or body.get("status") != "success":
            error = body.get("error") if isinstance(body, dict) else None
            raise ReadError(f"HTTP {status}, status {body.get('status') if isinstance(body, dict) else '?'}: {error or 'no error text'}")
        if body.get("warnings"):
            raise ReadError(f"partial answer: {'; '.join(map(str, body['warnings']))[:300]}")
        if "data" not in body:
            raise ReadError("answer without data")
        return body["data"]

    def query(self, expr: str, at: float) -> list[tuple[dict[str, str], list[tuple[float, float]]]]:
        """An instant query: (labels, samples) per series; a vector gives one sample, a range vector its raw samples."""
        data = self._get("/api/v1/query", [("query", expr), ("time", f"{at:.3f}")])
        if not isinstance(data, dict) or data.get("resultType") not in ("vector", "matrix"):
            raise ReadError(f"unexpected result type for {expr!r}")
        result = data.get("result")
        if not isinstance(result, list):
            raise ReadError(f"no result list for {expr!r}")
        out = []
        for item in result:
            if not isinstance(item, dict):
                raise ReadError(f"malformed series in the answer to {expr!r}")
            labels = _labels(item.get("metric"), expr)
            points = item.get("values") if data["resultType"] == "matrix" else [item.get("value")]
            if not isinstance(points, list):
                raise ReadError(f"malformed samples in the answer to {expr!r}")
            out.append((labels, [_point(p, expr) for p in points]))
        return out

    def series(self, matches: list[str], start: float, end: float) -> list[dict[str, str]]:
        """Label sets of the series matching any selector in (start, end]."""
        params = [("match[]", m) for m in matches] + [("start", f"{start:.3f}"), ("end", f"{end:.3f}")]
        data = self._get("/api/v1/series", params)
        if not isinstance(data, list):
            raise ReadError("the series answer is not a list")
        return [_labels(m, "series") for m in data]

    def label_values(self, name: str, matches: list[str], start: float, end: float) -> list[str]:
        """Values of one label on the series matching the selectors."""
        params = [("match[]", m) for m in matches] + [("start", f"{start:.3f}"), ("end", f"{end:.3f}")]
        data = self._get(f"/api/v1/label/{name}/values", params)
        if not isinstance(data, list) or not all(isinstance(v, str) for v in data):
            raise ReadError(f"the values of label {name!r} are not a list of strings")
        return data


def _labels(value: object, what: str) -> dict[str, str]:
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise ReadError(f"malformed labels in the answer to {what!r}")
    return value


def _point(value: object, what: str) -> tuple[float, float]:
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        raise ReadError(f"malformed sample in the answer to {what!r}")
    try:
        t, v = float(value[0]), float(value[1])
    except (TypeError, ValueError):
        raise ReadError(f"non-numeric sample in the answer to {what!r}") from None
    if not math.isfinite(t):
        raise ReadError(f"non-finite timestamp in the answer to {what!r}")
    return t, v
