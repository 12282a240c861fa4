"""The one client of the Prometheus HTTP API (Prometheus, Thanos, Mimir, VictoriaMetrics).

Every answer is fetched against a wall-clock deadline and read strictly, in one place: anything that
is not a complete, successful, well-formed answer raises `Unavailable` (ingestion records a gap and
retries with backoff; the doctor reports "could not read"; the impact preview says "not measured"):
an error status, a partial response (Thanos/Mimir `warnings`, VictoriaMetrics `isPartial`), a body
that is not JSON (a proxy's HTML page), missing or mistyped keys, and, in matrices that ingestion
bills from, values no count, sum or counter can take (NaN, +-Inf, negative, absurdly large). A
server that drips bytes is cut off at the deadline: requests' `timeout` bounds each socket read, not
the whole answer, so the body is read in small pieces against a clock. A 4xx (a query the server
rejects) raises `Invalid`.

Each cluster's access (bearer token, basic auth, mTLS client certificate, CA file, TLS verification;
`app.core.clusters.ClusterConfig`) is set on the requests session once, by `configure_session`.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

import requests
from requests.auth import AuthBase, HTTPBasicAuth

from app.core.clusters import ClusterConfig
from app.core.errors import Invalid, Unavailable
from app.core.masking import basic_auth_forms, cluster_secrets, mask

# No count, activity sum, energy counter (mJ since boot) or request counter comes near this.
MAX_VALUE = 1e18
READ_PIECE = 1 << 16


def secrets_of(session: requests.Session, auth=None) -> list[str]:
    """The credentials a session (or an explicit auth) sends: what an answer must never be shown with."""
    out: list[str] = []
    for a in (session.auth, auth):
        if isinstance(a, _Bearer | _Basic):
            out += cluster_secrets(a.access)
        elif isinstance(a, HTTPBasicAuth):
            out += [str(a.password), *basic_auth_forms(str(a.username), str(a.password))]
    return out


def get_body(session: requests.Session, url: str, params: dict | list, *, timeout_s: float, deadline_s: float,
             headers: dict | None = None, auth=None, max_bytes: int | None = None) -> bytes:
    """GET `url` and return the whole body, or raise `Unavailable` (no answer, 5xx, past the deadline, too large);
    an excerpt of the answer in the error has the session's credentials masked."""
    began = time.monotonic()
    cutoff = began + deadline_s
    try:
        # verify and cert passed on explicitly: requests lets REQUESTS_CA_BUNDLE override a session's own verify.
        response = session.get(url, params=params, headers=headers, auth=auth, stream=True, verify=session.verify,
                               cert=session.cert, timeout=(min(timeout_s, deadline_s), min(timeout_s, deadline_s)))
    except requests.RequestException as exc:
        raise Unavailable(f"{_base(url)} did not answer: {type(exc).__name__}") from exc
    with response:
        pieces, size = [], 0
        try:
            while True:
                if time.monotonic() > cutoff:
                    raise Unavailable(f"{_base(url)} did not finish its answer within the {deadline_s:g} s deadline")
                # read1 returns whatever has arrived (at most one socket read), so a drip cannot hold it.
                piece = response.raw.read1(READ_PIECE, decode_content=True)
                if not piece:
                    break
                size += len(piece)
                if max_bytes is not None and size > max_bytes:
                    raise Unavailable(f"{_base(url)} sent an answer larger than {max_bytes // 2**20} MiB")
                pieces.append(piece)
        except requests.RequestException as exc:
            raise Unavailable(f"{_base(url)} broke off its answer: {type(exc).__name__}") from exc
        except OSError as exc:  # urllib3's read timeouts and resets surface as OSError subclasses
            raise Unavailable(f"{_base(url)} broke off its answer: {type(exc).__name__}") from exc
        body = b"".join(pieces)
    if response.status_code >= 500:
        raise Unavailable(f"{_base(url)} failed: HTTP {response.status_code} "
                          f"{_excerpt(body, secrets_of(session, auth))}")
    if response.status_code != 200:
        raise Invalid(_rejected(url, response.status_code, body, secrets_of(session, auth)))
    return body


def decode_data(body: bytes, *, source: str, secrets: Sequence[str] = ()):
    """The `data` of a successful, complete answer; otherwise `Unavailable` with the reason (`secrets` masked in
    whatever of the answer it quotes)."""
    try:
        answer = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise Unavailable(f"{source} sent an answer that is not JSON: {_excerpt(body, secrets)}") from exc
    if not isinstance(answer, dict):
        raise Unavailable(f"{source} sent a malformed answer: not a JSON object")
    if answer.get("status") != "success":
        said = mask(f"{answer.get('errorType', '')} {answer.get('error', '')}".rstrip(), secrets)  # masked, then cut
        raise Unavailable(f"{source} answered status {mask(str(answer.get('status')), secrets)[:40]!r}: {said[:500]}")
    warnings = answer.get("warnings") or []
    if not isinstance(warnings, list):
        warnings = [warnings]
    # Prometheus's own "PromQL info:" annotations say nothing about completeness; any other warning
    # (Thanos/Mimir: a store or ingester did not answer) or VictoriaMetrics' isPartial means missing data.
    serious = [str(w) for w in warnings if not str(w).startswith("PromQL info:")]
    if serious or answer.get("isPartial"):
        reason = mask("; ".join(serious), secrets)[:500] if serious else "isPartial"
        raise Unavailable(f"{source} answered a partial response: {reason}")
    return answer.get("data")  # its shape is the caller's to check: a matrix, a vector, a list


def decode_matrix(body: bytes, *, source: str, secrets: Sequence[str] = ()) -> list[dict]:
    """The `result` of a successful, complete matrix answer, values checked; otherwise `Unavailable` with the reason."""
    data = decode_data(body, source=source, secrets=secrets)
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
            raise Unavailable(f"{source} sent a malformed answer: value {mask(str(text), secrets)[:40]!r} is not a quoted number")
        try:
            value = float(text)
        except ValueError:
            raise Unavailable(f"{source} sent a malformed answer: value {mask(text, secrets)[:40]!r} is not a number") from None
        if not (math.isfinite(value) and 0 <= value <= MAX_VALUE):
            raise Unavailable(f"{source} sent an impossible value {mask(text, secrets)[:40]!r} (NaN, infinite, negative or huge)")
    return result


class _Bearer(AuthBase):
    """`Authorization: Bearer <token>`, the token read from the cluster's config (its file) at each request."""

    def __init__(self, access: ClusterConfig):
        self.access = access

    def __call__(self, request):
        token = self.access.token()
        if token:
            request.headers["Authorization"] = f"Bearer {token}"
        return request


class _Basic(HTTPBasicAuth):
    """Basic auth whose password is read from the cluster's config (its file) at each request."""

    def __init__(self, access: ClusterConfig):
        super().__init__(access.username or "", "")
        self.access = access

    def __call__(self, request):
        self.password = self.access.basic_password()
        return super().__call__(request)


def configure_session(session: requests.Session, access: ClusterConfig | None) -> requests.Session:
    """Set a cluster's auth and TLS options on a requests session (None: no auth, the system's CAs)."""
    if access is None:
        return session
    if access.bearer_token is not None or access.bearer_token_file:
        session.auth = _Bearer(access)
    elif access.username:
        session.auth = _Basic(access)
    session.verify = access.ca_file if access.ca_file and access.tls_verify else access.tls_verify
    if access.cert_file:
        session.cert = (access.cert_file, access.key_file) if access.key_file else access.cert_file
    return session


MAX_INSTANT_BYTES = 256 * 1024 * 1024  # an instant answer (doctor, previews) larger than this is not one we would sign


@dataclass
class PromReader:
    """Instant queries, series and label values at one URL (the doctor's preflight, the impact preview)."""

    url: str
    timeout_s: float = 30.0
    access: ClusterConfig | None = None  # the cluster's auth and TLS options

    def _get(self, path: str, params: list[tuple[str, str]]):
        base = self.url.rstrip("/")
        with configure_session(requests.Session(), self.access) as session:
            body = get_body(session, base + path, params, timeout_s=self.timeout_s, deadline_s=self.timeout_s,
                            max_bytes=MAX_INSTANT_BYTES)
        return decode_data(body, source=f"Prometheus at {base}", secrets=cluster_secrets(self.access))

    def query(self, expr: str, at: float) -> list[tuple[dict[str, str], list[tuple[float, float]]]]:
        """An instant query: (labels, samples) per series; a vector gives one sample, a range vector its raw samples."""
        data = self._get("/api/v1/query", [("query", expr), ("time", f"{at:.3f}")])
        if not isinstance(data, dict) or data.get("resultType") not in ("vector", "matrix"):
            raise Unavailable(f"unexpected result type for {expr!r}")
        result = data.get("result")
        if not isinstance(result, list):
            raise Unavailable(f"no result list for {expr!r}")
        out = []
        for item in result:
            if not isinstance(item, dict):
                raise Unavailable(f"malformed series in the answer to {expr!r}")
            labels = _labels(item.get("metric"), expr)
            points = item.get("values") if data["resultType"] == "matrix" else [item.get("value")]
            if not isinstance(points, list):
                raise Unavailable(f"malformed samples in the answer to {expr!r}")
            out.append((labels, [_point(p, expr) for p in points]))
        return out

    def series(self, matches: list[str], start: float, end: float) -> list[dict[str, str]]:
        """Label sets of the series matching any selector in (start, end]."""
        params = [("match[]", m) for m in matches] + [("start", f"{start:.3f}"), ("end", f"{end:.3f}")]
        data = self._get("/api/v1/series", params)
        if not isinstance(data, list):
            raise Unavailable("the series answer is not a list")
        return [_labels(m, "series") for m in data]

    def label_values(self, name: str, matches: list[str], start: float, end: float) -> list[str]:
        """Values of one label on the series matching the selectors."""
        params = [("match[]", m) for m in matches] + [("start", f"{start:.3f}"), ("end", f"{end:.3f}")]
        data = self._get(f"/api/v1/label/{name}/values", params)
        if not isinstance(data, list) or not all(isinstance(v, str) for v in data):
            raise Unavailable(f"the values of label {name!r} are not a list of strings")
        return data


def _labels(value: object, what: str) -> dict[str, str]:
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise Unavailable(f"malformed labels in the answer to {what!r}")
    return value


def _point(value: object, what: str) -> tuple[float, float]:
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        raise Unavailable(f"malformed sample in the answer to {what!r}")
    try:
        t, v = float(value[0]), float(value[1])
    except (TypeError, ValueError):
        raise Unavailable(f"non-numeric sample in the answer to {what!r}") from None
    if not math.isfinite(t):
        raise Unavailable(f"non-finite timestamp in the answer to {what!r}")
    return t, v


def _base(url: str) -> str:
    """The server as configured: the request URL less its API path (the last /api/v1/ and what follows)."""
    return url.rsplit("/api/v1/", 1)[0]


def _rejected(url: str, status: int, body: bytes, secrets: Sequence[str]) -> str:
    """A 4xx in one line: what was asked, what came back, and the likely fix."""
    asked = url.split("?", 1)[0]
    hint = ""
    if _base(url).rstrip("/").endswith(("/api/v1", "/api")):
        hint = "; the URL is the server's root, without /api/v1 (e.g. http://prometheus:9090)"
    return f"{_base(url)} rejected a query (asked {asked}, got HTTP {status}: {_answer_kind(body, secrets)}){hint}"


def _answer_kind(body: bytes, secrets: Sequence[str]) -> str:
    """What a rejecting server sent: the Prometheus API's own error, or what it is instead."""
    text = body.strip()
    if not text:
        return "an empty body, not the Prometheus API"
    if text[:1] == b"<":
        return "an HTML page, not the Prometheus API"
    try:
        answer = json.loads(text)
    except (ValueError, UnicodeDecodeError):
        return f"'{_excerpt(text, secrets)}', not the Prometheus API"
    if isinstance(answer, dict) and answer.get("status") == "error" and answer.get("error"):
        return mask(f"{answer.get('errorType') or 'error'}: {answer['error']}", secrets)[:500]
    return f"a JSON answer that is not the Prometheus API's: {_excerpt(text, secrets)}"


def _excerpt(body: bytes, secrets: Sequence[str]) -> str:
    """The answer's first bytes, secrets masked (before cutting, so no secret is cut in half and shown in part)."""
    return mask(body[:2000].decode("utf-8", "replace"), secrets)[:200].replace("\n", " ")
