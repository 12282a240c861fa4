"""Exporter outages: an hour in which none of a node's GPUs report, though they did in the hours before.

Such an hour would otherwise roll up as zero use and zero capacity for that node, and its cost would
vanish; instead the source marks it a gap (recorded, retried with backoff, shown). Nodes are
followed by their GPUs' UUIDs, so an exporter pod that comes back under another `Hostname` is not
an outage. A node taken out for good is a gap for `lookback_hours`, then no longer expected.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable

from app.metrics.types import SourceBatch

HOUR_S = 3600
LOOKBACK_HOURS = 3

Seen = dict[int, dict[str, set[str]]]  # hour end -> host -> GPU UUIDs that reported in that hour


def silent_nodes(seen: Seen, hour_end: int, lookback_hours: int = LOOKBACK_HOURS) -> list[str]:
    """Hosts that reported in one of the `lookback_hours` hours before `hour_end`'s hour, none of whose GPUs report in it."""
    now = set().union(*seen.get(hour_end, {}).values())
    earlier: dict[str, set[str]] = defaultdict(set)
    for k in range(1, lookback_hours + 1):
        for host, uuids in seen.get(hour_end - k * HOUR_S, {}).items():
            earlier[host] |= uuids
    return sorted(host for host, uuids in earlier.items() if not uuids & now)


def presence_plan(batch: SourceBatch, cs: int, ce: int, selector: str,
                  lookback_hours: int = LOOKBACK_HOURS) -> list[tuple[str, int, int, int, Callable[[list], None]]]:
    """One query: which GPUs (by host and UUID) reported in each hour from `lookback_hours` before the chunk.

    `selector` is a PromQL expression counting a unit's samples over the hour (any labels kept).
    """
    seen: Seen = defaultdict(lambda: defaultdict(set))

    def handle(result: list) -> None:
        for item in result:
            m = item["metric"]
            host = m.get("Hostname") or m.get("hostname", "")
            for t, _ in item["values"]:
                seen[int(t)][host].add(m.get("UUID", ""))
        for hour_end in range(cs + HOUR_S, ce + 1, HOUR_S):
            silent = silent_nodes(seen, hour_end, lookback_hours)
            if silent:
                earlier = batch.gaps.get(hour_end - HOUR_S)  # another host shard's finding for the hour
                batch.gaps[hour_end - HOUR_S] = (f"{earlier}; " if earlier else "") + (
                    f"no GPU of node(s) {', '.join(silent[:10])}{' ...' if len(silent) > 10 else ''} reported in this "
                    f"hour, though they did in the {lookback_hours} h before: exporter outage, a dropped metric or "
                    "renamed labels (not billed as zero use)")

    query = f"group by (Hostname, hostname, UUID) ({selector})"
    return [(query, cs - (lookback_hours - 1) * HOUR_S, ce, HOUR_S, handle)]
