"""Whole hours from a metrics source into rollup rows: idempotent per hour, gaps recorded, never zeros.

A source is one cluster's: its hours are ingested, replaced and marked for that cluster only, with the
policy as that cluster sees it (`PolicyDocument.for_cluster`: its pools, their SLA services), so one
cluster down is a gap of that cluster alone. Each hour is written in its own savepoint (delete the
cluster's rows of the hour, insert the new ones, mark the `IngestHour` ok), so a failure never leaves
part of an hour. Several hours that share a policy
version are fetched with one set of queries, and the next batch is fetched while the current one
is attributed and written. Services only flush: the caller commits.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy import delete, insert
from sqlmodel import Session, select

from app.core.clusters import DEFAULT_CLUSTER
from app.core.errors import AppError
from app.core.event_payloads import IngestionGap
from app.core.events import emit
from app.core.timeutil import HOUR, SECONDS_PER_HOUR, aware, from_epoch, hours_between, utcnow
from app.metrics.attribution import attribute_hour, split_hours
from app.metrics.models import (
    BreachMinuteRollup,
    BreachShare,
    DataQualityFinding,
    IngestHour,
    IngestStatus,
    NamespaceUsage,
    PoolHourModel,
    PoolHourRollup,
    SlaUnresolvedHour,
    UnitHourRollup,
    UsageRollup,
)
from app.metrics.types import OCCUPANCY_METRICS, HourRollup, MetricsSource, SourceBatch
from app.policy.document import PolicyDocument
from app.policy.service import load_document, version_at

# Backoff for gap retries: 1, 2, 4, ... minutes, at most 6 hours.
RETRY_BASE_S = 60
RETRY_MAX_S = 6 * SECONDS_PER_HOUR
# About 60,000 minute-samples per fetch (~4 h of 256 busy GPUs): hours per fetch shrink as the fleet grows,
# so memory stays flat, and several batches let fetching and attribution overlap.
SAMPLE_BUDGET = 60_000
MAX_HOURS_PER_FETCH = 24
NO_POLICY = "no policy version was in effect"
MAX_FAILED_FETCHES = 3  # reads of one run that fail in a row before the rest of its hours are marked gaps unread


@dataclass
class IngestReport:
    ok: list[datetime] = field(default_factory=list)
    gaps: list[datetime] = field(default_factory=list)
    kept: list[datetime] = field(default_factory=list)  # already ok; a re-read failed, old rollups kept
    errors: dict[datetime, str] = field(default_factory=dict)
    duration_s: float = 0.0

    def merge(self, other: IngestReport) -> None:
        self.ok += other.ok
        self.gaps += other.gaps
        self.kept += other.kept
        self.errors.update(other.errors)
        self.duration_s += other.duration_s


def retry_delay(attempts: int) -> timedelta:
    """Exponential backoff after `attempts` failed reads of an hour."""
    return timedelta(seconds=min(RETRY_BASE_S * 2 ** max(attempts - 1, 0), RETRY_MAX_S))


def policy_at(*, session: Session, hour: datetime) -> tuple[int, PolicyDocument] | None:
    """The policy version in effect at `hour` and its document (None when none was in effect yet)."""
    version = version_at(session=session, when=hour)
    if version is None:
        return None
    return version.id, load_document(version)


def ingest_hours(*, session: Session, source: MetricsSource, start: datetime, end: datetime,
                 scrape_interval_s: int | None = None,
                 progress: Callable[[datetime, str], None] | None = None, now: datetime | None = None,
                 hours_per_fetch: int | None = None, cluster: str = DEFAULT_CLUSTER) -> IngestReport:
    """Ingest every whole hour in [start, end) of `cluster` from its source; which hours are ok, which gaps."""
    return ingest_hour_list(session=session, source=source, hours=hours_between(start, end),
                            scrape_interval_s=scrape_interval_s, progress=progress, now=now,
                            hours_per_fetch=hours_per_fetch, cluster=cluster)


def ingest_hour_list(*, session: Session, source: MetricsSource, hours: list[datetime],
                     scrape_interval_s: int | None = None,
                     progress: Callable[[datetime, str], None] | None = None, now: datetime | None = None,
                     hours_per_fetch: int | None = None, cluster: str = DEFAULT_CLUSTER) -> IngestReport:
    """Ingest the given hour starts of `cluster` (`source` is its); consecutive hours under one policy version share a fetch.

    `hours_per_fetch` None adapts the batch to the fleet: about SAMPLE_BUDGET minute-samples per fetch.
    """
    with _fewer_gc_pauses():
        return _ingest(session=session, source=source, hours=hours, scrape_interval_s=scrape_interval_s,
                       progress=progress, now=now, hours_per_fetch=hours_per_fetch, cluster=cluster)


@contextmanager
def _fewer_gc_pauses():
    """Collect young objects less often while batches are decoded: they are acyclic and short-lived,
    and every full collection would walk the whole batch (a third of the CPU at 512 GPUs)."""
    before = gc.get_threshold()
    gc.set_threshold(max(before[0], 100_000), *before[1:])
    try:
        yield
    finally:
        gc.set_threshold(*before)


def _ingest(*, session: Session, source: MetricsSource, hours: list[datetime], scrape_interval_s: int | None,
            progress: Callable[[datetime, str], None] | None, now: datetime | None,
            hours_per_fetch: int | None, cluster: str) -> IngestReport:
    report = IngestReport()
    began = time.perf_counter()
    hours = sorted({aware(h) for h in hours})
    # Adaptive batches start with one hour: the first answer tells how large an hour of this fleet is.
    per_fetch = hours_per_fetch or 1
    i = failed = 0

    def next_group() -> tuple | None:
        """Plan the next batch of hours (one policy version) and start fetching it in the background."""
        nonlocal i
        while i < len(hours):
            found = policy_at(session=session, hour=hours[i])
            if found is not None:
                break
            _mark_gap(session, cluster, hours[i], NO_POLICY, report, now, count_attempt=False)
            if progress:
                progress(hours[i], IngestStatus.GAP)
            i += 1
        else:
            return None
        version_id, policy = found[0], found[1].for_cluster(cluster)
        group = [hours[i]]
        while (len(group) < per_fetch and i + len(group) < len(hours) and hours[i + len(group)] == group[-1] + HOUR
               and _same_version(session, hours[i + len(group)], version_id)):
            group.append(hours[i + len(group)])
        i += len(group)
        future = prefetch.submit(source.fetch, start=group[0], end=group[-1] + HOUR, policy=policy)
        return group, version_id, policy, future, time.perf_counter()

    # The next batch is fetched while this one is attributed and written: Prometheus and Python overlap.
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="prefetch") as prefetch:
        job = next_group()
        while job is not None:
            group, version_id, policy, future, fetch_began = job
            try:
                batch = future.result()
            except AppError as exc:
                # Nothing of these hours is stored: each is a gap with the source's answer, retried later, and
                # ingestion carries on with the next batch. After MAX_FAILED_FETCHES failures in a row the source
                # is down: the rest of the list is marked a gap too, unasked, so that no hour is left unaccounted.
                failed += 1
                rest = hours[i:] if failed >= MAX_FAILED_FETCHES else []
                for hour in group + rest:
                    _mark_gap(session, cluster, hour, exc.detail if hour in group else
                              f"not read ({failed} reads in a row failed): {exc.detail}", report, now,
                              count_attempt=hour in group)
                    if progress:
                        progress(hour, IngestStatus.GAP)
                if rest:
                    break
                job = next_group()
                continue
            failed = 0
            fetched_s = (time.perf_counter() - fetch_began) / len(group)
            if hours_per_fetch is None:
                samples = sum(len(s.samples) for s in batch.occupancy)
                per_fetch = max(1, min(MAX_HOURS_PER_FETCH, SAMPLE_BUDGET * len(group) // max(samples, 1)))
            job = next_group()
            for hour, part in sorted(split_hours(batch).items()):
                why = batch.gaps.get(hour) or unreported(part, policy)
                if why:  # the source cannot vouch for this hour (e.g. an exporter outage, an empty answer)
                    _mark_gap(session, cluster, from_epoch(hour), why, report, now, count_attempt=True)
                    if progress:
                        progress(from_epoch(hour), IngestStatus.GAP)
                    continue
                write_began = time.perf_counter()
                rollup = attribute_hour(part, hour=hour, policy=policy, scrape_interval_s=scrape_interval_s)
                with session.begin_nested():
                    replace_hour(session, rollup, version_id, cluster=cluster)
                    _mark_ok(session, cluster, from_epoch(hour), version_id, fetched_s + time.perf_counter() - write_began,
                             now)
                report.ok.append(from_epoch(hour))
                if progress:
                    progress(from_epoch(hour), IngestStatus.OK)
            del batch
    session.flush()
    report.duration_s = time.perf_counter() - began
    return report


def unreported(part: SourceBatch, policy: PolicyDocument) -> str | None:
    """Why an hour that the source answered cannot be billed, when it holds no occupancy series of any pooled node.

    An empty but successful answer (a wrong URL path, a relabelling that dropped the exporter, a fresh install, the
    whole cluster's exporters down) would otherwise store the hour ok with zero use and zero capacity (SPEC 4)."""
    pooled = {node for pool in policy.pools for node in pool.nodes}
    if not pooled or any(s.samples and s.labels.host in pooled for s in part.occupancy):
        return None
    names = sorted(pooled)
    return (f"the source answered, but with no occupancy series ({' or '.join(OCCUPANCY_METRICS)}) for any of the {len(names)} pooled node(s) ({', '.join(names[:5])}{' ...' if len(names) > 5 else ''}): "
            "a wrong URL path, a relabelling that dropped the exporter, or the exporters down (not billed as zero use)")


def _same_version(session: Session, hour: datetime, version_id: int) -> bool:
    found = policy_at(session=session, hour=hour)
    return found is not None and found[0] == version_id


def replace_hour(session: Session, rollup: HourRollup, version_id: int, *, cluster: str = DEFAULT_CLUSTER) -> None:
    """Delete whatever the cluster's hour had and insert `rollup` (idempotent re-ingestion); other clusters' rows stay."""
    hour = from_epoch(rollup.hour)
    breach_ids = select(BreachMinuteRollup.id).where(BreachMinuteRollup.hour == hour, BreachMinuteRollup.cluster == cluster)
    session.execute(delete(BreachShare).where(BreachShare.breach_id.in_(breach_ids)))
    for table in (BreachMinuteRollup, UsageRollup, NamespaceUsage, PoolHourModel, PoolHourRollup, SlaUnresolvedHour,
                  DataQualityFinding):
        session.execute(delete(table).where(table.hour == hour, table.cluster == cluster))
    replace_unit_hours(session, hour, rollup, version_id, cluster=cluster)
    # Plain executemany inserts: building ORM objects for thousands of rows costs more than the writes.
    if rollup.usage:
        session.execute(insert(UsageRollup), [
            {"hour": hour, "cluster": cluster, "pool": u.pool, "tenant": u.tenant, "klass": u.klass, "dark": u.dark,
             "gpu_seconds": u.gpu_seconds, "activity_sum": u.activity_sum, "activity_samples": u.activity_samples,
             "policy_version_id": version_id}
            for u in rollup.usage
        ])
    if rollup.namespaces:
        session.execute(insert(NamespaceUsage), [
            {"hour": hour, "cluster": cluster, "pool": n.pool, "namespace": n.namespace, "tenant": n.tenant, "klass": n.klass,
             "dark": n.dark, "gpu_seconds": n.gpu_seconds, "activity_sum": n.activity_sum,
             "activity_samples": n.activity_samples}
            for n in rollup.namespaces
        ])
    if rollup.pools:
        session.execute(insert(PoolHourRollup), [
            {"hour": hour, "cluster": cluster, "pool": p.pool, "gpus": p.gpus, "capacity_gpu_seconds": p.capacity_gpu_seconds,
             "dark_minutes": p.dark_minutes, "policy_version_id": version_id}
            for p in rollup.pools
        ])
    if rollup.findings:
        session.execute(insert(DataQualityFinding), [
            {"hour": hour, "cluster": cluster, "pool": f.pool, "kind": f.kind, "unit": f.unit, "gpu_seconds_cut": f.gpu_seconds_cut,
             "detail": f.detail[:2000]}
            for f in rollup.findings
        ])
    models = [{"hour": hour, "cluster": cluster, "pool": p.pool, "model": m.model, "gpus": m.gpus, "measured_gpus": m.measured_gpus,
               "measured_kwh": m.measured_kwh} for p in rollup.pools for m in p.models]
    if models:
        session.execute(insert(PoolHourModel), models)
    if rollup.unresolved:
        session.execute(insert(SlaUnresolvedHour), [
            {"hour": hour, "cluster": cluster, "service": service, "service_tenant": tenant, "pool": pool, "minutes": minutes}
            for (service, tenant, pool), minutes in sorted(rollup.unresolved.items())
        ])
    breaches = [
        BreachMinuteRollup(hour=hour, cluster=cluster, service=b.service, service_tenant=b.service_tenant, pool=b.pool,
                           minute_end=from_epoch(b.minute_end), p99_ms=b.p99_ms)
        for b in rollup.breaches
    ]
    session.add_all(breaches)
    session.flush()
    session.add_all(
        BreachShare(breach_id=row.id, tenant=tenant, gpu_seconds=seconds)
        for row, b in zip(breaches, rollup.breaches) for tenant, seconds in b.colocated
    )
    session.flush()


def replace_unit_hours(session: Session, hour: datetime, rollup: HourRollup, version_id: int, *,
                       cluster: str = DEFAULT_CLUSTER) -> None:
    """The cluster's per-unit rows of the hour (unit_hour), replaced in the caller's savepoint with its other rollups."""
    session.execute(delete(UnitHourRollup).where(UnitHourRollup.hour == hour, UnitHourRollup.cluster == cluster))
    if rollup.units:
        session.execute(insert(UnitHourRollup), [
            {"hour": hour, "cluster": cluster, "node": u.node, "gpu_uuid": u.gpu_uuid, "gpu_instance": u.gpu_instance,
             "gpu_index": u.gpu_index, "mig_profile": u.mig_profile, "model": u.model, "pool": u.pool,
             "capacity_gpu_seconds": u.capacity_gpu_seconds, "gpu_seconds": u.gpu_seconds,
             "activity_sum": u.activity_sum, "activity_samples": u.activity_samples, "tenants": ",".join(u.tenants),
             "fb_used_peak_mib": u.fb_used_peak_mib, "policy_version_id": version_id}
            for u in rollup.units
        ])


def _mark_ok(session: Session, cluster: str, hour: datetime, version_id: int, duration_s: float,
             now: datetime | None) -> None:
    row = session.get(IngestHour, (cluster, hour)) or IngestHour(cluster=cluster, hour=hour, status=IngestStatus.OK)
    row.status, row.policy_version_id, row.last_error = IngestStatus.OK, version_id, ""
    row.attempts = (row.attempts or 0) + 1
    row.ingested_at, row.duration_s, row.next_retry_at = now or utcnow(), duration_s, None
    session.add(row)
    session.flush()


def _mark_gap(session: Session, cluster: str, hour: datetime, error: str, report: IngestReport, now: datetime | None,
              *, count_attempt: bool) -> None:
    with session.begin_nested():
        row = session.get(IngestHour, (cluster, hour))
        if row is not None and row.status == IngestStatus.OK:
            report.kept.append(hour)  # a re-read failed: the hour's earlier rollups stay valid
            report.errors[hour] = error
            return
        row = row or IngestHour(cluster=cluster, hour=hour, status=IngestStatus.GAP)
        row.status, row.last_error = IngestStatus.GAP, error[:2000]
        if count_attempt:
            row.attempts = (row.attempts or 0) + 1
        row.next_retry_at = (now or utcnow()) + retry_delay(max(row.attempts, 1))
        session.add(row)
        session.flush()
        # One event per hour and attempt: an hour marked again without a new read (no policy, a run
        # cut short) or by a racing worker records nothing new.
        # The default cluster's key as before clusters; another cluster's names it (the same hour, its own gap).
        where = "" if cluster == DEFAULT_CLUSTER else f"{cluster}:"
        emit(session=session, type="ingestion.gap",
             key=f"ingestion.gap:{where}{aware(hour).isoformat()}:{row.attempts}",
             payload=IngestionGap(hour=aware(hour), error=row.last_error[:500], attempts=row.attempts,
                                  next_retry_at=row.next_retry_at, cluster=cluster))
    report.gaps.append(hour)
    report.errors[hour] = error


def hour_status(session: Session, start: datetime, end: datetime,
                cluster: str = DEFAULT_CLUSTER) -> dict[datetime, IngestHour]:
    """The cluster's IngestHour rows for hours in [start, end), keyed by aware hour start."""
    rows = session.exec(select(IngestHour).where(IngestHour.cluster == cluster, IngestHour.hour >= aware(start),
                                                 IngestHour.hour < aware(end))).all()
    return {aware(r.hour): r for r in rows}
