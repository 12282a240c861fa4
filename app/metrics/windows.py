"""The look-back windows of every query the portal sends, each edge defined here once.

A sample at t belongs to the window (end - length, end]: SPEC section 4's hour (end - 3600 s, end] and
each minute (end - 60 s, end]. Prometheus 2.x reads a range `[d]` as closed, [end - d, end]; Prometheus 3.x
and VictoriaMetrics as left-open, (end - d, end]. A window 1 ms short of the length, `[3599999ms]`, holds the
same samples on all three (timestamps are whole milliseconds): one exactly an hour old is out everywhere.
Ingestion (prometheus_source, presence, serving), the live view and the reconcile pass all take their
windows from here, so no two of them can disagree about an edge.
"""

from __future__ import annotations

from app.core.timeutil import SECONDS_PER_HOUR, SECONDS_PER_MINUTE


def window(seconds: int) -> str:
    """PromQL range for the left-open window of `seconds` ending at the evaluation time."""
    return f"{seconds * 1000 - 1}ms"


MINUTE = window(SECONDS_PER_MINUTE)  # 59999ms
HOUR = window(SECONDS_PER_HOUR)  # 3599999ms
FIVE_MINUTES = window(5 * SECONDS_PER_MINUTE)  # 299999ms: "alive at the hour's end" (presence.py)
TEN_MINUTES = window(10 * SECONDS_PER_MINUTE)  # 599999ms: a counter's value before the minute (serving.py)
ELEVEN_MINUTES = window(11 * SECONDS_PER_MINUTE)  # 659999ms: the minute and the ten before it (serving.py)
