"""SLA signals from raw counter values: requests over the idle window and the P99 bucket, per minute.

Each SLA's request counter and latency buckets are read as per-minute increases built from raw
last values only (`minute_increases`: resets and births handled, nothing extrapolated, identical on
Prometheus 2.x/3.x and VictoriaMetrics) and summed in the engine; the trailing-window sums and the
P99 bucket are computed here, so dark-time and breach minutes do not depend on any engine's
`increase`/`rate` extrapolation.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable
from decimal import Decimal

from app.core.errors import AppError
from app.metrics.histograms import boundaries, p99_bucket, parse_le, quantile
from app.metrics.prometheus_api import PromReader
from app.metrics.types import ServiceMinutes, SourceBatch
from app.policy.document import PolicyDocument

MINUTE_S = 60
P99_WINDOW_MIN = 5  # P99 over the trailing 5 minutes (SPEC section 4)
MAX_STEPS = 360  # minutes per query: answers stay small (memory flat however many hours a fetch holds)

Plan = list[tuple[str, int, int, int, Callable[[list], None]]]


def window_minutes(policy: PolicyDocument) -> int:
    """The idle window in whole minutes (rounded up: a partial minute is read whole)."""
    return -(-policy.colocation.idle_window_s // MINUTE_S)


# A series silent for longer than this before a minute counts as born in that minute (its whole value is increase).
SILENCE = "10m"


def minute_increases(selector: str, by: str) -> str:
    """PromQL: each series' counter increase into every minute (last sample in the minute minus the one before), summed.

    A drop is a reset (the new value is all increase) and a series with no earlier sample within
    SILENCE was born: both through `or`, so no series is counted twice. Only `last_over_time`,
    `offset`, arithmetic and set operators enter: Prometheus 2.x/3.x and VictoriaMetrics answer the
    same, with none of `increase`'s extrapolation. Engine-side sums keep the answers one series per
    `le` (not per pod and `le`).
    """
    now = f"last_over_time({selector}[59999ms])"
    before = f"last_over_time({selector}[{SILENCE}] offset 1m)"
    return f"sum by ({by}) ((({now} - {before}) >= 0) or ({now} + 0))"


def services_plan(batch: SourceBatch, cs: int, ce: int, policy: PolicyDocument) -> Plan:
    """Queries for the minutes (cs, ce] of every SLA; the last answer fills `batch.services`."""
    if not policy.sla:
        return []
    for sla in policy.sla:
        batch.services.setdefault(sla.service, ServiceMinutes(service=sla.service))
    lookback = max(window_minutes(policy), P99_WINDOW_MIN) * MINUTE_S
    first = cs - lookback + MINUTE_S  # the first minute end whose increase a trailing window needs
    requests: dict[str, dict[int, float]] = defaultdict(lambda: defaultdict(float))  # service -> minute -> n
    buckets: dict[str, dict] = defaultdict(lambda: defaultdict(lambda: defaultdict(float)))  # service -> le -> minute -> n

    def add(service: str, signal: str, finish: bool) -> Callable[[list], None]:
        def handle(result: list) -> None:
            for item in result:
                if signal == "requests":
                    target = requests[service]
                else:
                    le = parse_le(item["metric"].get("le", ""))
                    if le is None:
                        continue  # a malformed bucket: not part of the quantile
                    target = buckets[service][le]
                for t, v in item["values"]:
                    target[int(t)] += float(v)
            if finish:
                _fill(batch, policy, cs, ce, requests, buckets)
        return handle

    signals = [(sla.service, signal, minute_increases(selector, by)) for sla in policy.sla
               for signal, selector, by in (("requests", sla.requests, ""), ("latency", sla.latency_histogram, "le"))]
    plan: Plan = []
    pieces = list(range(first, ce + 1, MAX_STEPS * MINUTE_S))
    for i, a in enumerate(pieces):
        b = min(a + (MAX_STEPS - 1) * MINUTE_S, ce)
        for j, (service, signal, query) in enumerate(signals):
            last = i == len(pieces) - 1 and j == len(signals) - 1
            plan.append((query, a, b, MINUTE_S, add(service, signal, last)))
    return plan


def _fill(batch: SourceBatch, policy: PolicyDocument, cs: int, ce: int,
          requests: dict[str, dict[int, float]], buckets: dict[str, dict]) -> None:
    """Per service: requests over the idle window and the P99 bucket of the trailing 5 minutes, per minute."""
    span = window_minutes(policy)
    for sla in policy.sla:
        out = batch.services[sla.service]
        per_minute = requests.get(sla.service, {})
        per_le = buckets.get(sla.service, {})
        for m in range(cs + MINUTE_S, ce + 1, MINUTE_S):
            out.requests_in_window[m] = float(sum(per_minute.get(m - k * MINUTE_S, 0.0) for k in range(span)))
            cumulative = [(le, sum(series.get(m - k * MINUTE_S, 0.0) for k in range(P99_WINDOW_MIN)))
                          for le, series in per_le.items()]
            bucket = p99_bucket(cumulative)
            if bucket is not None:
                out.p99_bucket[m] = bucket
                out.p99_s[m] = quantile(cumulative)


# Red-line checks run as an author types: one small query per histogram every few minutes is plenty.
BUCKET_CACHE_S = 300
_BUCKET_CACHE: dict[tuple, tuple[float, tuple[Decimal, ...] | None]] = {}


def bucket_lookup(url: str, *, timeout_s: float = 10.0, window: str = "1d", at: float | None = None):
    """A function: latency histogram selector -> its finite `le` boundaries seen over `window` (None when unknown).

    For policy validation's red-line warning and `chargeback doctor`; any failure means "unknown", never an error.
    """
    reader = PromReader(url, timeout_s=timeout_s)

    def lookup(selector: str) -> tuple[Decimal, ...] | None:
        key = (url, selector, window, at)
        cached = _BUCKET_CACHE.get(key)
        if cached is not None and time.monotonic() - cached[0] < BUCKET_CACHE_S:
            return cached[1]
        try:
            series = reader.query(f"group by (le) (last_over_time({selector}[{window}]))", time.time() if at is None else at)
            found = boundaries(labels.get("le", "") for labels, _ in series) or None
        except AppError:
            found = None
        if len(_BUCKET_CACHE) > 256:
            _BUCKET_CACHE.clear()
        _BUCKET_CACHE[key] = (time.monotonic(), found)
        return found

    return lookup
