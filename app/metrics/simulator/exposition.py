"""The live view: every series at one instant in the Prometheus text format 0.0.4."""

from __future__ import annotations

from datetime import datetime

from app.core.timeutil import aware
from app.metrics.simulator.series import FAMILIES, Renderer, slot_groups


def exposition(sim, at: datetime, families: tuple[str, ...] | None = None) -> str:
    """What dcgm-exporter and the vLLM servers would expose at `at` (no timestamps, as scraped); only `families` when given."""
    t = int(aware(at).timestamp())  # whole seconds, like a scrape timestamp in ms would round
    renderer = Renderer(sim, empty_labels=True)
    groups = slot_groups((t,), stamp=False)
    out: list[str] = []
    for family in FAMILIES:
        if families is not None and family.name not in families:
            continue
        out.append(f"# HELP {family.name} {family.help}\n# TYPE {family.name} {family.prom_type}\n")
        for stream in renderer.streams(family):
            for lines in renderer.lines(family, stream, groups):
                out.extend(lines)
    return "".join(out)
