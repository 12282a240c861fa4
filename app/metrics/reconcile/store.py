"""The reconciliation's database side: the stored rollups it checks, the verdicts it writes, and a period's state.

Services only flush; the caller commits. A verdict is current while its hour's ingest row still has the
status and attempts it had when checked (see models.py); `period_state` counts only current ones.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal

from sqlalchemy import delete, insert, select
from sqlmodel import Session

from app.core.timeutil import SECONDS_PER_HOUR, aware, epoch, from_epoch
from app.metrics.models import IngestHour, PoolHourModel, PoolHourRollup, UsageRollup
from app.metrics.reconcile.compare import HourCheck, StoredHour, StoredModel, StoredPool
from app.metrics.reconcile.models import MISSING_STATUS, PROBLEMS, HourVerdict, ReconcileHour, ReconcilePoolHour
from app.policy.document import PolicyDocument
from app.policy.models import PolicyVersion
from app.policy.service import load_document, version_at

SHOWN = 3  # problem hours named in a period's state


def read_stored(session: Session, *, cluster: str, start: int, end: int) -> dict[int, StoredHour]:
    """Every hour of [start, end) as the cluster's rollups store it (status, pools, GPUs, GPU-seconds, energy rows)."""
    lo, hi = from_epoch(start), from_epoch(end)
    out = {h: StoredHour(hour=h, status=MISSING_STATUS) for h in range(start, end, SECONDS_PER_HOUR)}
    in_range = lambda table: (table.cluster == cluster, table.hour >= lo, table.hour < hi)  # noqa: E731
    for row in session.execute(select(IngestHour).where(*in_range(IngestHour))).scalars():
        hour = out[epoch(row.hour)]
        hour.status, hour.attempts, hour.error = row.status, row.attempts or 0, row.last_error or ""
    for row in session.execute(select(PoolHourRollup).where(*in_range(PoolHourRollup))).scalars():
        out[epoch(row.hour)].pools.setdefault(row.pool, StoredPool(pool=row.pool)).gpus = row.gpus
    # Summed in Python: SQLite would add NUMERIC as floats.
    for hour, pool, tenant, seconds in session.execute(
            select(UsageRollup.hour, UsageRollup.pool, UsageRollup.tenant, UsageRollup.gpu_seconds).where(*in_range(UsageRollup))):
        stored = out[epoch(hour)].pools.setdefault(pool, StoredPool(pool=pool))
        stored.gpu_seconds += Decimal(seconds)
        stored.tenants[tenant] = stored.tenants.get(tenant, Decimal(0)) + Decimal(seconds)
    for row in session.execute(select(PoolHourModel).where(*in_range(PoolHourModel))).scalars():
        out[epoch(row.hour)].pools.setdefault(row.pool, StoredPool(pool=row.pool)).models.append(
            StoredModel(model=row.model, gpus=row.gpus, measured_gpus=row.measured_gpus, measured_kwh=Decimal(row.measured_kwh)))
    return out


def policies(session: Session, *, cluster: str, hours: Iterable[int]) -> dict[int, PolicyDocument | None]:
    """The cluster's policy per hour: the version its stored rollups used, else the one in effect then."""
    used = dict(session.execute(
        select(IngestHour.hour, IngestHour.policy_version_id).where(
            IngestHour.cluster == cluster, IngestHour.hour.in_([from_epoch(h) for h in hours]),
            IngestHour.policy_version_id.is_not(None))).all())
    used = {epoch(h): v for h, v in used.items()}
    docs: dict[int, PolicyDocument] = {}
    out: dict[int, PolicyDocument | None] = {}
    for hour in hours:
        version_id = used.get(hour)
        if version_id is None:
            found = version_at(session=session, when=from_epoch(hour))
            version_id = found.id if found is not None else None
        if version_id is None:
            out[hour] = None
            continue
        if version_id not in docs:
            docs[version_id] = load_document(session.get(PolicyVersion, version_id)).for_cluster(cluster)
        out[hour] = docs[version_id]
    return out


def write_checks(session: Session, *, cluster: str, checks: Sequence[HourCheck], checked_at: datetime) -> None:
    """Replace the cluster's verdicts of these hours."""
    hours = [from_epoch(c.hour) for c in checks]
    if not hours:
        return
    for table in (ReconcilePoolHour, ReconcileHour):
        session.execute(delete(table).where(table.cluster == cluster, table.hour.in_(hours)))
    session.execute(insert(ReconcileHour), [
        {"cluster": cluster, "hour": from_epoch(c.hour), "verdict": str(c.verdict), "stored_status": c.stored_status,
         "ingest_attempts": c.attempts, "checked_at": checked_at, "detail": c.detail[:4000]} for c in checks])
    pools = [
        {"cluster": cluster, "hour": from_epoch(c.hour), "pool": p.pool, "agrees": p.agrees, "stored_gpus": p.stored_gpus,
         "source_gpus": p.source_gpus, "stored_gpu_seconds": p.stored_gpu_seconds,
         "source_gpu_seconds": p.source_gpu_seconds, "stored_kwh": p.stored_kwh, "source_kwh": p.source_kwh,
         "tenants": json.dumps({t: [str(a), str(b)] for t, (a, b) in p.tenants.items()}) if p.tenants else "",
         "note": p.note[:500]}
        for c in checks for p in c.pools]
    if pools:
        session.execute(insert(ReconcilePoolHour), pools)
    session.flush()


def _current(check: ReconcileHour | None, ingest: IngestHour | None) -> bool:
    """Whether a verdict still describes the hour as stored (no ingestion of it since)."""
    if check is None:
        return False
    if ingest is None:
        return check.stored_status == MISSING_STATUS
    return check.stored_status == ingest.status and check.ingest_attempts == (ingest.attempts or 0)


def check_states(session: Session, *, cluster: str, start: datetime, end: datetime) -> dict[datetime, tuple[bool, bool]]:
    """Each hour of [start, end): (ingested, ok or gap; checked, with a verdict still current)."""
    ingest, checks = _rows(session, [cluster], start, end)
    return {h: ((cluster, h) in ingest, _current(checks.get((cluster, h)), ingest.get((cluster, h))))
            for h in _hours(start, end)}


def _hours(start: datetime, end: datetime) -> list[datetime]:
    return [from_epoch(h) for h in range(epoch(start), epoch(end), SECONDS_PER_HOUR)]


def _rows(session: Session, clusters: Sequence[str], start: datetime, end: datetime):
    ingest = {(r.cluster, aware(r.hour)): r for r in session.execute(select(IngestHour).where(
        IngestHour.cluster.in_(list(clusters)), IngestHour.hour >= aware(start), IngestHour.hour < aware(end))).scalars()}
    checks = {(r.cluster, aware(r.hour)): r for r in session.execute(select(ReconcileHour).where(
        ReconcileHour.cluster.in_(list(clusters)), ReconcileHour.hour >= aware(start),
        ReconcileHour.hour < aware(end))).scalars()}
    return ingest, checks


@dataclass(frozen=True)
class ReconcileState:
    """What the close needs to know: how many cluster-hours were checked, currently, and what they found."""

    clusters: tuple[str, ...] = ()  # the clusters read from a Prometheus-compatible source (empty: nothing to check)
    hours: int = 0  # cluster-hours to check (finished hours of the period x clusters)
    unchecked: int = 0  # never checked, or ingested again since
    verdicts: dict[str, int] = field(default_factory=dict)  # verdict -> cluster-hours, current ones only
    examples: tuple[str, ...] = ()  # the first problem hours, with both figures

    @property
    def applicable(self) -> bool:
        return bool(self.clusters)

    @property
    def problems(self) -> int:
        return sum(self.verdicts.get(v, 0) for v in PROBLEMS)

    @property
    def reconciled(self) -> bool:
        return not self.applicable or (self.unchecked == 0 and self.problems == 0)


def period_state(session: Session, *, clusters: Sequence[str], start: datetime, end: datetime) -> ReconcileState:
    """The reconciliation of the cluster-hours [start, end) (the caller clips `end` to the finished hours)."""
    if not clusters or end <= start:
        return ReconcileState(clusters=tuple(clusters))
    ingest, checks = _rows(session, clusters, start, end)
    hours = _hours(start, end)
    verdicts: Counter = Counter()
    unchecked = 0
    examples = []
    for hour in hours:
        for cluster in clusters:
            check = checks.get((cluster, hour))
            if not _current(check, ingest.get((cluster, hour))):
                unchecked += 1
                continue
            verdicts[check.verdict] += 1
            if check.verdict in PROBLEMS and len(examples) < SHOWN:
                where = f"{cluster} " if len(clusters) > 1 else ""
                examples.append(f"{where}{hour:%Y-%m-%d %H:%M} UTC {HourVerdict(check.verdict).value}: {check.detail[:300]}")
    return ReconcileState(clusters=tuple(clusters), hours=len(hours) * len(clusters), unchecked=unchecked,
                          verdicts=dict(verdicts), examples=tuple(examples))
