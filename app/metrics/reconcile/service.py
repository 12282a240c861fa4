"""Reconcile a cluster's hours: read the source the second way, derive, judge against the stored rollups, store verdicts.

A day at a time (`CHUNK_HOURS`): the source is asked for the day and the hour on each side (the hours
around decide "silent in this hour only"), the stored rollups of the day are read, and each hour's verdict
replaces the previous one. A source that cannot be read stops the run: the hours left are reported
unread and keep whatever verdict they had (none counts as checked). Services only flush.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from sqlmodel import Session

from app.core.errors import AppError
from app.core.timeutil import SECONDS_PER_DAY, SECONDS_PER_HOUR, epoch, from_epoch, utcnow
from app.metrics.labels import host_of
from app.metrics.reconcile import derive
from app.metrics.reconcile.compare import HourCheck, judge
from app.metrics.reconcile.models import PROBLEMS
from app.metrics.reconcile.source import ENERGY, ReconcileSource, SourceHours
from app.metrics.reconcile.store import policies, read_stored, write_checks

CHUNK_HOURS = 24


@dataclass
class ReconcileReport:
    cluster: str
    checks: list[HourCheck] = field(default_factory=list)
    unread: list[datetime] = field(default_factory=list)  # hours not checked: the source could not be read
    error: str = ""
    duration_s: float = 0.0

    @property
    def verdicts(self) -> Counter:
        return Counter(str(c.verdict) for c in self.checks)

    @property
    def problems(self) -> list[HourCheck]:
        return [c for c in self.checks if c.verdict in PROBLEMS]


def reconcile_hours(*, session: Session, source: ReconcileSource, cluster: str, start: datetime, end: datetime,
                    until: datetime, scrape_interval_s: int | None = None,
                    progress: Callable[[int], None] | None = None) -> ReconcileReport:
    """Check every hour of [start, end) of `cluster`; `until` = the end of the last finished hour (never read past it)."""
    report = ReconcileReport(cluster=cluster)
    began = time.perf_counter()
    s, e, limit = epoch(start) // SECONDS_PER_HOUR * SECONDS_PER_HOUR, epoch(end), epoch(until)
    for cs in range(s, e, CHUNK_HOURS * SECONDS_PER_HOUR):
        ce = min(cs + CHUNK_HOURS * SECONDS_PER_HOUR, e)
        try:
            checks = check_chunk(session=session, source=source, cluster=cluster, start=cs, end=ce, limit=limit,
                                 scrape_interval_s=scrape_interval_s)
        except AppError as exc:  # Unavailable (no answer, partial, malformed) or Invalid (a query refused)
            report.unread = [from_epoch(h) for h in range(cs, e, SECONDS_PER_HOUR)]
            report.error = exc.detail
            break
        write_checks(session, cluster=cluster, checks=checks, checked_at=utcnow())
        report.checks += checks
        if progress:
            progress(len(checks))
    report.duration_s = time.perf_counter() - began
    return report


def check_chunk(*, session: Session, source: ReconcileSource, cluster: str, start: int, end: int, limit: int,
                scrape_interval_s: int | None = None) -> list[HourCheck]:
    """The verdicts of the hours [start, end) (epoch seconds, whole hours)."""
    hours = list(range(start, end, SECONDS_PER_HOUR))
    stored = read_stored(session, cluster=cluster, start=start, end=end)
    docs = policies(session, cluster=cluster, hours=hours)
    data = source.hours(start=start - SECONDS_PER_HOUR, end=min(end + SECONDS_PER_HOUR, max(limit, end)),
                        energy_start=start, energy_end=end)
    occ = derive.occupancy_of(data, source.exporter)
    seen = derive.evidence(occ)
    spacing = {}
    for scrape, (series, t) in derive.thin_evidence(occ, seen).items():
        found = source.raw(_selector(series.metric, series.labels), at=t)
        gaps = derive.spacing(ts for _, samples in found for ts, _ in samples)
        if gaps is not None:
            spacing[scrape] = gaps
    intervals = derive.intervals(seen, spacing, scrape_interval_s)
    increases = _raw_increases(source, data, [h + SECONDS_PER_HOUR for h in hours])
    checks = []
    for hour in hours:
        end_t = hour + SECONDS_PER_HOUR
        policy = docs[hour]
        derived = None
        if policy is not None:
            derived = derive.derive_hour(occ, hour=hour, policy=policy, interval=intervals,
                                         kwh=derive.gpu_kwh(data, end_t, increases))
        around = (derive.reporting_at(occ, hour), derive.reporting_at(occ, end_t + SECONDS_PER_HOUR))
        checks.append(judge(stored[hour], derived, policy=policy, around=around))
    return checks


def _raw_increases(source: ReconcileSource, data: SourceHours, hour_ends: list[int]) -> dict:
    """The counter increase, from raw samples, of each GPU-hour whose hourly values cannot tell it."""
    out = {}
    for (host, uuid), t in derive.counter_needs_raw(data, hour_ends):
        samples = [p for labels, points in source.raw(_selector(ENERGY, {"UUID": uuid}), at=t)
                   if host_of(labels, data.pod_nodes) == host for p in points if p[0] > t - SECONDS_PER_HOUR]
        before = [s.values[t - SECONDS_PER_HOUR] for s in data.energy_last
                  if (host_of(s.labels, data.pod_nodes), s.labels.get("UUID", "")) == (host, uuid)
                  and t - SECONDS_PER_HOUR in s.values]
        found = derive.increase(max(before) if before else None, samples)
        if found is not None:
            out[((host, uuid), t)] = found
    return out


def _selector(metric: str, labels: dict[str, str]) -> str:
    """`metric{l="v", ...}` matching exactly these labels (an empty value matches an absent label, as PromQL does)."""
    return metric + "{" + ", ".join(f"{k}={json.dumps(v)}" for k, v in sorted(labels.items()) if k != "__name__") + "}"


def days_of(start: datetime, end: datetime) -> list[tuple[datetime, datetime]]:
    """[start, end) cut at UTC midnights."""
    s, e = epoch(start), epoch(end)
    out = []
    while s < e:
        stop = min((s // SECONDS_PER_DAY + 1) * SECONDS_PER_DAY, e)
        out.append((from_epoch(s), from_epoch(stop)))
        s = stop
    return out
