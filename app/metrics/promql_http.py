"""One PromQL range query over HTTP, with a wall-clock deadline and a strict reading of the answer.

Anything that is not a complete, successful, well-formed matrix becomes `Unavailable`, which
ingestion records as a gap for the hours the query covers and retries with backoff: an error
status, a partial response (Thanos/Mimir `warnings`), a body that is not JSON (a proxy's HTML page),
missing or mistyped keys, and values no count, sum or counter can take (NaN, +-Inf, negative,
absurdly large). A server that drips bytes is cut off at the deadline: requests' `timeout` bounds
each socket read, not the whole answer, so the body is read in small pieces against a clock.
"""

from __future__ import annotations

import json
import math
import time

import requests

from app.core.errors import Invalid, Unavailable

# No count, activity sum, energy counter (mJ since boot) or request counter comes near this.
MAX_VALUE = 1e18
READ_PIECE = 1 << 16


def get_body(session: requests.Session, url: str, params: dict, *, timeout_s: float, deadline_s: float,
             headers: dict | None = None, auth=None) -> bytes:
    """GET `url` and return the whole body, or raise `Unavailable` (no answer, 5xx, past the deadline)."""
    began = time.monotonic()
    cutoff = began + deadline_s
    try:
        response = session.get(url, params=params, headers=headers, auth=auth, stream=True,
                               timeout=(min(timeout_s, deadline_s), min(timeout_s, deadline_s)))
    except requests.RequestException as exc:
        raise Unavailable(f"{_base(url)} did not answer: {type(exc).__name__}") from exc
    with response:
        pieces = []
        try:
            while True:
                if time.monotonic() > cutoff:
                    raise Unavailable(f"{_base(url)} did not finish its answer within the {deadline_s:g} s deadline")
                # read1 returns whatever has arrived (at most one socket read), so a drip cannot hold it.
                piece = response.raw.read1(READ_PIECE, decode_content=True)
                if not piece:
                    break
                pieces.append(piece)
        except requests.RequestException as exc:
            raise Unavailable(f"{_base(url)} broke off its answer: {type(exc).__name__}") from exc
        except OSError as exc:  # urllib3's read timeouts and resets surface as OSError subclasses
            raise Unavailable(f"{_base(url)} broke off its answer: {type(exc).__name__}") from exc
        body = b"".join(pieces)
    if response.status_code >= 500:
        raise Unavailable(f"{_base(url)} failed: HTTP {response.status_code} {_excerpt(body)}")
    if response.status_code != 200:
        raise Invalid(f"{_base(url)} rejected a query (HTTP {response.status_code}): {_error_text(body)}")
    return body


def decode_matrix(body: bytes, *, source: str) -> list[dict]:
    """The `result` of a successful, complete matrix answer, checked; otherwise `Unavailable` with the reason."""
    try:
        answer = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise Unavailable(f"{source} sent an answer that is not JSON: {_excerpt(body)}") from exc
    if not isinstance(answer, dict):
        raise Unavailable(f"{source} sent a malformed answer: not a JSON object")
    if answer.get("status") != "success":
        raise Unavailable(f"{source} answered status {answer.get('status')!r}: "
                          f"{answer.get('errorType', '')} {answer.get('error', '')}".rstrip())
    warnings = answer.get("warnings") or []
    if not isinstance(warnings, list):
        warnings = [warnings]
    # Prometheus's own "PromQL info:" annotations say nothing about completeness; any other warning
    # (Thanos/Mimir: a store or ingester did not answer) or VictoriaMetrics' isPartial means missing data.
    serious = [str(w) for w in warnings if not str(w).startswith("PromQL info:")]
    if serious or answer.get("isPartial"):
        reason = "; ".join(serious)[:500] if serious else "isPartial"
        raise Unavailable(f"{source} answered a partial response: {reason}")
    data = answer.get("data")
    if not isinstance(data, dict) or data.get("resultType") != "matrix" or not isinstance(data.get("result"), list):
        raise Unavailable(f"{source} sent a malformed answer: data.result is not a matrix")
    result = data["result"]
    try:
        texts: set = set()
        for item in result:
            metric, values = item["metric"], item["values"]
            if type(metric) is not dict or type(values) is not list:
                raise TypeError("metric/values")
            # Unpacking checks the [t, v] shape at C speed; a timestamp that is not a number fails
            # where handlers read it, and becomes Unavailable there (PrometheusSource.fetch).
            texts.update([v for _, v in values])
    except (KeyError, TypeError, ValueError) as exc:
        raise Unavailable(f"{source} sent a malformed answer: a series lacks metric/values pairs") from exc
    # Few distinct value strings in an answer (counts, percentages): each is checked once.
    for text in texts:
        if type(text) is not str:
            raise Unavailable(f"{source} sent a malformed answer: value {str(text)[:40]!r} is not a quoted number")
        try:
            value = float(text)
        except ValueError:
            raise Unavailable(f"{source} sent a malformed answer: value {text[:40]!r} is not a number") from None
        if not (math.isfinite(value) and 0 <= value <= MAX_VALUE):
            raise Unavailable(f"{source} sent an impossible value {text[:40]!r} (NaN, infinite, negative or huge)")
    return result


def _base(url: str) -> str:
    return url.split("/api/", 1)[0]


def _excerpt(body: bytes) -> str:
    return body[:200].decode("utf-8", "replace").replace("\n", " ")


def _error_text(body: bytes) -> str:
    try:
        answer = json.loads(body)
        return f"{answer.get('errorType', '')}: {answer.get('error', '')}"
    except (ValueError, AttributeError):
        return _excerpt(body)
