"""Exporter outages: an hour in which none of a node's GPUs report, though the node was reporting
when it last reported (alive at the end of its last hour with samples, within the look-back).

Such an hour would otherwise roll up as zero use and zero capacity for that node, and its cost would
vanish; instead the source marks it a gap (recorded, retried with backoff, shown). A node that
left mid-hour (drained, removed) is not expected afterwards; one that was reporting up to an hour's
end and then nothing is. Nodes are followed by their GPUs' UUIDs, so an exporter pod that comes back
under another `Hostname` is not an outage. After `lookback_hours` silent hours a node is no longer expected.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable

from app.core.timeutil import SECONDS_PER_HOUR as HOUR_S
from app.metrics.types import SourceBatch
from app.metrics.windows import FIVE_MINUTES, HOUR

LOOKBACK_HOURS = 3
TAIL = FIVE_MINUTES  # "alive at the hour's end": a sample in its last 5 minutes

Seen = dict[int, dict[str, set[str]]]  # hour end -> host -> GPU UUIDs with samples in that hour (or its tail)


def silent_nodes(reported: Seen, alive: Seen, hour_end: int, lookback_hours: int = LOOKBACK_HOURS) -> list[str]:
    """Hosts expected in the hour ending at `hour_end` (alive at the end of their last hour with samples,
    within `lookback_hours`) none of whose GPUs report in it."""
    now = set().union(*reported.get(hour_end, {}).values())
    last_seen: dict[str, int] = {}  # host -> end of the most recent earlier hour it reported in
    for k in range(lookback_hours, 0, -1):
        for host in reported.get(hour_end - k * HOUR_S, {}):
            last_seen[host] = hour_end - k * HOUR_S
    out = []
    for host, t in last_seen.items():
        uuids = alive.get(t, {}).get(host)
        if uuids and not (reported[t][host] & now):
            out.append(host)
    return sorted(out)


def presence_plan(batch: SourceBatch, cs: int, ce: int, count_over: Callable[[str], str],
                  lookback_hours: int = LOOKBACK_HOURS) -> list[tuple[str, int, int, int, Callable[[list], None]]]:
    """Two queries: which GPUs (host, UUID) reported in each hour, and in its last minutes, from the look-back on.

    `count_over(window)` is a PromQL expression counting a unit's samples over `window` (any labels kept).
    """
    reported: Seen = defaultdict(lambda: defaultdict(set))
    alive: Seen = defaultdict(lambda: defaultdict(set))

    def keep(into: Seen) -> Callable[[list], None]:
        def handle(result: list) -> None:
            for item in result:
                m = item["metric"]
                host = m.get("Hostname") or m.get("hostname", "")
                for t, _ in item["values"]:
                    into[int(t)][host].add(m.get("UUID", ""))
        return handle

    def judge(result: list) -> None:
        keep(reported)(result)
        for hour_end in range(cs + HOUR_S, ce + 1, HOUR_S):
            silent = silent_nodes(reported, alive, hour_end, lookback_hours)
            if silent:
                earlier = batch.gaps.get(hour_end - HOUR_S)  # another host shard's finding for the hour
                batch.gaps[hour_end - HOUR_S] = (f"{earlier}; " if earlier else "") + (
                    f"no GPU of node(s) {', '.join(silent[:10])}{' ...' if len(silent) > 10 else ''} reported in this "
                    "hour, though they were reporting until the end of their last hour: exporter outage, a dropped "
                    "metric or renamed labels (not billed as zero use)")

    first = cs - (lookback_hours - 1) * HOUR_S
    labels = "Hostname, hostname, UUID"
    return [
        (f"group by ({labels}) ({count_over(TAIL)})", first, ce, HOUR_S, keep(alive)),
        (f"group by ({labels}) ({count_over(HOUR)})", first, ce, HOUR_S, judge),
    ]
