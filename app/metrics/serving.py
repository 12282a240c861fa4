"""SLA signals from raw counter values: requests over the idle window and the P99 bucket, per minute.

Each SLA's request counter and latency buckets are read as per-minute increases built from raw
last values only (resets and births handled, nothing extrapolated, identical on Prometheus 2.x/3.x
and VictoriaMetrics), summed over the series in the engine as plain per-`le` sums; the
trailing-window sums and the P99 bucket are computed here, so dark-time and breach minutes do not
depend on any engine's `increase`/`rate` extrapolation. Counts are integers, so the sums and their
differences are exact in floating point (below 2**53).
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable
from decimal import Decimal

from app.core.cache import TtlCache
from app.core.clusters import ClusterConfig
from app.core.errors import AppError
from app.core.timeutil import SECONDS_PER_MINUTE as MINUTE_S
from app.metrics.histograms import boundaries, p99_bucket, parse_le, quantile
from app.metrics.prometheus_api import PromReader
from app.metrics.types import ServiceMinutes, SourceBatch
from app.metrics.windows import ELEVEN_MINUTES, TEN_MINUTES, window
from app.policy.document import PolicyDocument

P99_WINDOW_MIN = 5  # P99 over the trailing 5 minutes (SPEC section 4)
MAX_STEPS = 360  # minutes per query: answers stay small (memory flat however many hours a fetch holds)

# (promql, start, end, step, what to do with the answer); a handler may return follow-up queries.
Plan = list[tuple[str, int, int, int, Callable[[list], "Plan | None"]]]


def window_minutes(policy: PolicyDocument) -> int:
    """The idle window in whole minutes (rounded up: a partial minute is read whole)."""
    return -(-policy.colocation.idle_window_s // MINUTE_S)


# The rule: a series' increase into the minute ending at m is its last value in (m - 1 min, m] minus
# its last one in the ten minutes before; when it dropped (a reset) or had no earlier value (born),
# the whole last value; nothing when it has no value in the minute. Summed over the series, that is
# U - B + R: U the sum of each series' last value over the eleven minutes (a series silent in the
# minute keeps its earlier value in U and B alike, so it adds nothing), B the sum of the last values
# in the ten minutes before, R the earlier values of the series that dropped. U and B are plain
# per-`le` sums (no per-series matching, the costly part); R is read only around the minutes whose
# window holds a drop at all. The look-backs are 1 ms short of whole minutes so that Prometheus 2.x
# (closed ranges) and 3.x/VictoriaMetrics (left-open) read the same samples: a value exactly eleven
# minutes old is out on every engine. U's window less B's is (m - 1 min, m] on each; R's `[1m]` may
# also hold a sample at m - 1 min on 2.x, which is then B's own value and never below it.
UNION = ELEVEN_MINUTES


def _before(selector: str) -> str:
    return f"last_over_time({selector}[{TEN_MINUTES}] offset 1m)"


def union_sum(selector: str, by: str) -> str:
    """PromQL: per `by`, the sum of each series' last value in the minute and the ten before (U)."""
    return f"sum by ({by}) (last_over_time({selector}[{UNION}]))"


def before_sum(selector: str, by: str) -> str:
    """PromQL: per `by`, the sum of each series' last value in the ten minutes before the minute (B)."""
    return f"sum by ({by}) ({_before(selector)})"


# Drops are looked for per half hour (one window covering the eleven-minute windows of its 30
# minutes): about an eighth of the samples a per-minute look would scan. Half-hour ends are multiples of
# the step, so no engine or query frontend moves them (VictoriaMetrics, Thanos and Mimir align).
DROP_STEP = 30 * MINUTE_S


def drops(selector: str) -> str:
    """PromQL: at each half-hour end, whether any series' counter dropped in the windows of its minutes (R may be non-zero)."""
    return f"sum(resets({selector}[{window(DROP_STEP + 10 * MINUTE_S)}])) > 0"


def half_hours(a: int, b: int) -> tuple[int, int]:
    """The first and last half-hour ends whose half hours cover the minute ends a..b."""
    return -(-a // DROP_STEP) * DROP_STEP, -(-b // DROP_STEP) * DROP_STEP


def dropped_sum(selector: str, by: str) -> str:
    """PromQL: per `by`, the earlier value of each series whose last value in the minute is below it (R)."""
    return f"sum by ({by}) ({_before(selector)} > last_over_time({selector}[1m]))"


def runs(flagged: list[int], a: int, b: int) -> list[tuple[int, int]]:
    """The minute ends of [a, b] in the half hours ending at `flagged`, as (first, last) ranges, adjacent ones merged."""
    out: list[tuple[int, int]] = []
    for t in sorted(flagged):
        first, last = max(t - DROP_STEP + MINUTE_S, a), min(t, b)
        if first > last:
            continue
        if out and first - out[-1][1] <= MINUTE_S:
            out[-1] = (out[-1][0], last)
        else:
            out.append((first, last))
    return out


class Countdown:
    """Answers still to come, follow-ups included; `done` runs when the last one is in."""

    def __init__(self, done: Callable[[], None]) -> None:
        self.open = 0
        self.done = done

    def expect(self, n: int) -> None:
        self.open += n

    def settle(self) -> None:
        self.open -= 1
        if self.open == 0:
            self.done()


def increase_plan(selector: str, by: str, a: int, b: int, target: Callable[[dict], dict[int, float] | None],
                  countdown: Countdown) -> Plan:
    """Queries adding every minute end a..b's summed increase (U - B + R) into `target(labels)` (None skips)."""
    def part(sign: int) -> Callable[[list], None]:
        def handle(result: list) -> None:
            for item in result:
                minutes = target(item["metric"])
                if minutes is not None:
                    for t, v in item["values"]:
                        minutes[int(t)] += sign * float(v)
            countdown.settle()
        return handle

    def follow(result: list) -> Plan:
        flagged = [int(t) for item in result for t, _ in item["values"]]
        more = [(dropped_sum(selector, by), first, last, MINUTE_S, part(1)) for first, last in runs(flagged, a, b)]
        countdown.expect(len(more))
        countdown.settle()
        return more

    countdown.expect(3)
    return [(union_sum(selector, by), a, b, MINUTE_S, part(1)),
            (before_sum(selector, by), a, b, MINUTE_S, part(-1)),
            (drops(selector), *half_hours(a, b), DROP_STEP, follow)]


def services_plan(batch: SourceBatch, cs: int, ce: int, policy: PolicyDocument) -> Plan:
    """Queries for the minutes (cs, ce] of every SLA; the last answer (follow-ups included) fills `batch.services`."""
    if not policy.sla:
        return []
    for sla in policy.sla:
        batch.services.setdefault(sla.service, ServiceMinutes(service=sla.service))
    lookback = max(window_minutes(policy), P99_WINDOW_MIN) * MINUTE_S
    first = cs - lookback + MINUTE_S  # the first minute end whose increase a trailing window needs
    requests: dict[str, dict[int, float]] = defaultdict(lambda: defaultdict(float))  # service -> minute -> n
    buckets: dict[str, dict] = defaultdict(lambda: defaultdict(lambda: defaultdict(float)))  # service -> le -> minute -> n
    countdown = Countdown(lambda: _fill(batch, policy, cs, ce, requests, buckets))

    def bucket_of(service: str) -> Callable[[dict], dict[int, float] | None]:
        def target(labels: dict) -> dict[int, float] | None:
            le = parse_le(labels.get("le", ""))
            return None if le is None else buckets[service][le]  # a malformed bucket is not part of the quantile
        return target

    plan: Plan = []
    for a in range(first, ce + 1, MAX_STEPS * MINUTE_S):
        b = min(a + (MAX_STEPS - 1) * MINUTE_S, ce)
        for sla in policy.sla:
            plan += increase_plan(sla.requests, "", a, b, lambda _, s=sla.service: requests[s], countdown)
            plan += increase_plan(sla.latency_histogram, "le", a, b, bucket_of(sla.service), countdown)
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
_BUCKET_CACHE: TtlCache[tuple[Decimal, ...] | None] = TtlCache(ttl_s=BUCKET_CACHE_S, max_entries=256)


def bucket_lookup(url: str, *, timeout_s: float = 10.0, window: str = "1d", at: float | None = None,
                  access: ClusterConfig | None = None):
    """A function: latency histogram selector -> its finite `le` boundaries seen over `window` (None when unknown).

    For policy validation's red-line warning and `chargeback doctor`; any failure means "unknown", never an error.
    """
    reader = PromReader(url, timeout_s=timeout_s, access=access)

    def lookup(selector: str) -> tuple[Decimal, ...] | None:
        def read() -> tuple[Decimal, ...] | None:
            try:
                series = reader.query(f"group by (le) (last_over_time({selector}[{window}]))",
                                      time.time() if at is None else at)
                return boundaries(labels.get("le", "") for labels, _ in series) or None
            except AppError:
                return None

        return _BUCKET_CACHE.get((url, selector, window, at), read)

    return lookup
