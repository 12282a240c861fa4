"""The backfill view: samples over a window as an OpenMetrics file for
`promtool tsdb create-blocks-from openmetrics`, streamed in constant memory.

OpenMetrics wants each family's samples together (families never interleave) and each series'
points together and in time order; so the file is written family by family, device by device
(one device's series regrouped in memory: memory is bounded by one device's window, whatever
the size of the cluster), time ascending within each series.
Samples run from 10 minutes before `start` (the trailing 3- and 5-minute windows of the first
minutes, and the energy counter at `start`) through `end` inclusive (a sample at t belongs to the
hour that ends at or after t).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime
from functools import lru_cache
from pathlib import Path

from app.core.timeutil import SECONDS_PER_DAY, epoch
from app.metrics.simulator.series import FAMILIES, FAMILY_NAMES, Renderer
from app.metrics.simulator.workload import SLOTS

LEAD_S = 600
BLOCK_S = 7200  # promtool's block duration
BATCH_LINES = 20_000  # lines per write: memory stays flat however long the window


def _groups(first: int, last: int, step: int):
    """Slot groups (see series.slot_groups) of the instants first, first + step, ..., last, lazily."""
    for day in range((first - 1) // SECONDS_PER_DAY, (last - 1) // SECONDS_PER_DAY + 1):
        for group in _day_groups(day, step):
            if group[3][-1][0] >= first and group[3][0][0] <= last:
                yield group if group[3][0][0] >= first and group[3][-1][0] <= last else \
                    (*group[:3], [(t, x) for t, x in group[3] if first <= t <= last])


@lru_cache(maxsize=4)
def _day_groups(day: int, step: int) -> tuple:
    """Every slot of a day with its scrape instants and their line suffixes (shared by all streams)."""
    return tuple((s, day, s - day * SLOTS, [(t, f" {t}\n") for t in range(s * 60 + step, s * 60 + 61, step)])
                 for s in range(day * SLOTS, (day + 1) * SLOTS))


def _flush(out, buf: list[str]) -> int:
    out.write("".join(buf))
    n = len(buf)
    buf.clear()
    return n


def _by_series(slots) -> list[list[str]]:
    """A device's lines regrouped series by series (time order kept within each): OpenMetrics wants
    each Metric's points together, and a device's unmapped series recurs between pods."""
    series: dict[str, list[str]] = {}
    for lines in slots:
        for line in lines:
            key = line[: line.index("} ")]
            found = series.get(key)
            if found is None:
                series[key] = [line]
            else:
                found.append(line)
    return list(series.values())


def _families(metrics: Iterable[str] | None) -> list:
    wanted = set(FAMILY_NAMES if metrics is None else metrics)
    unknown = wanted - set(FAMILY_NAMES)
    if unknown:
        raise ValueError(f"unknown metric families: {', '.join(sorted(unknown))}")
    return [f for f in FAMILIES if f.name in wanted]


def _window(sim, start: datetime, end: datetime) -> tuple[int, int]:
    s, e = epoch(start), epoch(end)
    if e <= s:
        raise ValueError("end must be after start")
    step = sim.scrape_interval_s
    return -(-(s - LEAD_S) // step) * step, e


def write_openmetrics(sim, path: str | Path, start: datetime, end: datetime, *,
                      metrics: Iterable[str] | None = None,
                      progress: Callable[[int, int], None] | None = None) -> int:
    """Write samples of [start - 10 min, end] to `path`; `metrics` restricts the families
    (0.0.4 names, e.g. "vllm:request_success_total"); `progress(done, total)` after each stream."""
    first, last = _window(sim, start, end)
    return _write(sim, Path(path), first, last, _families(metrics), progress)


def write_openmetrics_blocks(sim, directory: str | Path, start: datetime, end: datetime, *,
                             metrics: Iterable[str] | None = None,
                             progress: Callable[[int, int], None] | None = None) -> list[tuple[Path, int]]:
    """The same samples as `write_openmetrics`, one file per 2-hour TSDB block: promtool parses a
    whole file once per block it spans, so one big file costs (blocks x file) of parsing and
    per-block files cost one pass in all. Returns [(file, samples)] in time order."""
    first, last = _window(sim, start, end)
    families, step = _families(metrics), sim.scrape_interval_s
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    out = []
    lo = first // BLOCK_S * BLOCK_S
    blocks = range(lo, last + 1, BLOCK_S)
    for i, block in enumerate(blocks):
        a, b = max(first, block), min(last, block + BLOCK_S - step)
        if a > b:
            continue
        path = directory / f"{block}.om"
        done = (lambda d, t, i=i: progress(i * t + d, len(blocks) * t)) if progress else None
        out.append((path, _write(sim, path, -(-a // step) * step, b, families, done)))
    return out


def _write(sim, path: Path, first: int, last: int, families: list, progress) -> int:
    step = sim.scrape_interval_s
    renderer = Renderer(sim, empty_labels=False)
    plan = [(f, renderer.streams(f)) for f in families]
    total, done, written = sum(len(streams) for _, streams in plan), 0, 0
    with open(path, "w", encoding="utf-8", newline="\n") as out:
        for family, streams in plan:
            name = family.openmetrics_name
            out.write(f"# HELP {name} {family.help}\n# TYPE {name} {family.openmetrics_type}\n")
            for stream in streams:
                slots = renderer.lines(family, stream, _groups(first, last, step))
                if family.scope in ("requests", "latency"):
                    # A replica's pods never come back: its series are contiguous already.
                    buf: list[str] = []
                    for lines in slots:
                        buf += lines
                        if len(buf) >= BATCH_LINES:
                            written += _flush(out, buf)
                    written += _flush(out, buf)
                else:
                    for buf in _by_series(slots):
                        written += _flush(out, buf)
                done += 1
                if progress is not None:
                    progress(done, total)
        out.write("# EOF\n")
    return written
