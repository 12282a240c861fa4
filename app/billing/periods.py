"""Billing periods: rate (draft, re-ratable), close (finalize, one transaction; documents issued after), correct.

Services flush only; the caller's unit of work commits. Every state change is audited.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from datetime import datetime
from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation
from itertools import islice

from sqlalchemy import delete, func, insert, select, update
from sqlalchemy.exc import IntegrityError, OperationalError
from sqlmodel import Session

from app.billing import issued
from app.billing.loader import DocumentCache
from app.billing.models import (
    BillingPeriod,
    ChargeLineRecord,
    LineSource,
    PeriodStatus,
    PoolCostRecord,
    TenantUsageRecord,
    UnattributedBreachRecord,
    UnmeasuredCapacityRecord,
    UnpooledUsageRecord,
)
from app.billing.period import Period, get_period, month_name, next_month, parse_period, require_started
from app.billing.rating_sql import rate_stored
from app.billing.reconciliation import period_reconciliation, unreconciled_message
from app.billing.types import PLATFORM, ChargeLine, RatingResult
from app.billing.unmeasured import unmeasured_capacity
from app.core.audit import record
from app.core.db import sqlite_write_lock
from app.core.errors import Conflict, FieldError, Invalid, NotFound
from app.core.event_payloads import CorrectionCreated, PeriodRated
from app.core.events import emit
from app.core.safe_text import check_text, text_errors
from app.core.settings import get_settings
from app.core.timeutil import HOUR, SECONDS_PER_HOUR, format_runs, from_epoch, hours_between, utcnow
from app.metrics.cluster_hours import hour_states, never_ingested, scope
from app.metrics.models import IngestHour, IngestStatus, PoolHourRollup, UsageRollup

CENT = Decimal("0.01")
LINE_BATCH = 5_000  # charge-line rows per INSERT of a rating run


@dataclass
class HourStatus:
    expected: int
    ok: int
    gaps: list[datetime] = field(default_factory=list)
    missing: list[datetime] = field(default_factory=list)
    # Cluster -> its hours never attempted; an hour may be a gap in one cluster and missing in another.
    missing_by_cluster: dict[str, list[datetime]] = field(default_factory=dict)

    @property
    def complete(self) -> bool:
        return not self.gaps and not self.missing


def hour_status(*, session: Session, period: Period) -> HourStatus:
    """Which hours of the period are ingested (ok in every cluster), gaps (in some cluster), or never attempted in
    some cluster (missing: each cluster's named)."""
    expected = hours_between(period.start, period.end)
    clusters = scope()
    seen = hour_states(session=session, start=period.start, end=period.end, clusters=clusters)
    by_cluster = never_ingested(session=session, start=period.start, end=period.end, clusters=clusters)
    status = HourStatus(expected=len(expected), ok=sum(1 for s in seen.values() if s == IngestStatus.OK),
                        missing_by_cluster=by_cluster)
    unread = set().union(*by_cluster.values())
    for hour in expected:
        if hour in unread:
            status.missing.append(hour)
        elif seen.get(hour) == IngestStatus.GAP:
            status.gaps.append(hour)
    return status


def missing_message(month: str, by_cluster: dict[str, list[datetime]]) -> str:
    """Why a close is refused while hours were never ingested, and the command that fills them."""
    todo = "; ".join(f"ingest {format_runs(hours)} for {cluster}" for cluster, hours in by_cluster.items())
    commands = " ".join(
        f"chargeback ingest --cluster {cluster} --start {min(hours):%Y-%m-%dT%H:%MZ} "
        f"--end {max(hours) + HOUR:%Y-%m-%dT%H:%MZ}"
        for cluster, hours in by_cluster.items())
    return (f"Billing period {month} has hours never ingested, which no acceptance covers: {todo} first "
            f"({commands}). Hours the source could not answer then become gaps, which a close can accept with a reason.")


def _get_or_create(session: Session, period: Period) -> BillingPeriod:
    row = get_period(session=session, month=period.month)
    if row is not None:
        return row
    row = BillingPeriod(month=period.month, starts_at=period.start, ends_at=period.end, created_at=utcnow())
    # No savepoint: pysqlite would commit a released outermost SAVEPOINT behind the caller's back.
    session.add(row)
    try:
        session.flush()
    except IntegrityError as exc:  # a concurrent caller created it first; the caller rolls back
        raise Conflict(f"Billing period {period.month} is being changed by someone else; try again") from exc
    return row


def _claim(session: Session, row: BillingPeriod, **values) -> None:
    """Conditional UPDATE: takes the row lock and fails if the period got finalized meanwhile."""
    try:
        result = session.execute(
            update(BillingPeriod)
            .where(BillingPeriod.id == row.id, BillingPeriod.status != PeriodStatus.FINALIZED)
            .values(revision=BillingPeriod.revision + 1, **values)
            .execution_options(synchronize_session=False)
        )
    except OperationalError as exc:  # SQLite: another writer holds or just changed the database
        if "locked" not in str(exc):
            raise
        raise Conflict(f"Billing period {row.month} is being changed by someone else; try again") from exc
    if result.rowcount != 1:
        session.expire(row)
        raise Conflict(f"Billing period {row.month} is finalized; its invoices can no longer change")
    session.expire(row)


def rate(*, session: Session, period: str, actor: str) -> BillingPeriod:
    """Rate the period as a draft, replacing its previous draft lines. Refuses a finalized period."""
    p = parse_period(period)
    require_started(p)
    sqlite_write_lock(session)  # a second close waits for the first, then reads its result (PostgreSQL: _claim)
    row = _get_or_create(session, p)
    if row.status == PeriodStatus.FINALIZED:
        raise Conflict(f"Billing period {p.month} is finalized; its invoices can no longer change")
    before = {"status": row.status, "revision": row.revision}
    _claim(session, row, status=PeriodStatus.RATED)
    rated = _rate_into(session, row, p, actor)
    record(
        session=session, actor=actor, action="billing.rate", entity="billing_period", entity_id=p.month,
        before=before, after={"status": row.status, "revision": row.revision, "total": str(rated.total)},
    )
    emit(session=session, type="period.rated", key=f"period.rated:{p.month}:{row.revision}", payload=PeriodRated(
        period=p.month, revision=row.revision, lines_sha256=rated.sha256, lines=rated.lines, currency=row.currency,
        total=str(rated.total), tenants={t: str(a) for t, a in sorted(rated.tenants.items())},
        hours_expected=row.hours_expected, hours_ok=row.hours_ok, gap_hours=len(json.loads(row.gap_hours)),
        rated_at=row.rated_at, rated_by=actor))
    return row


def close(
    *, session: Session, period: str, actor: str, accept_gaps: bool = False, accept_unpooled: bool = False,
    reason: str | None = None, accept_unreconciled: bool = False,
) -> BillingPeriod:
    """Finalize the period in one transaction: re-rate, store lines, status finalized, audit.

    Refused (409) unless its hours are complete, its GPUs pooled and its hours reconciled with the source
    (app/billing/reconciliation.py), or the close accepts each shortfall with a reason.

    Its documents are left pending: the issuing step (app/billing/issuing.py) renders them from the
    stored lines afterwards, sets their hashes and only then emits `period.finalized`.
    """
    p = parse_period(period)
    require_started(p)
    # Audited, printed on the statement and in the exports: one line of text, no control characters.
    check_text("The close reason cannot be stored", {"reason": reason})
    reason = (reason or "").strip() or None
    if accept_gaps and not reason:
        raise Invalid("Accepting gaps needs a reason", [FieldError("reason", "required with accept_gaps")])
    if accept_unpooled and not reason:
        raise Invalid("Accepting unpooled GPUs needs a reason", [FieldError("reason", "required with accept_unpooled")])
    if accept_unreconciled and not reason:
        raise Invalid("Accepting unreconciled hours needs a reason",
                      [FieldError("reason", "required with accept_unreconciled")])
    sqlite_write_lock(session)  # a second close waits for the first, then reads its result (PostgreSQL: _claim)
    row = _get_or_create(session, p)
    if row.status == PeriodStatus.FINALIZED:
        raise Conflict(f"Billing period {p.month} is already finalized")
    hours = hour_status(session=session, period=p)
    if hours.missing:
        raise Conflict(missing_message(p.month, hours.missing_by_cluster))
    if hours.gaps and not accept_gaps:
        raise Conflict(_gaps_message(p, hours))
    unpooled = unpooled_status(session=session, period=p)
    if unpooled.hours and not accept_unpooled:
        raise Conflict(_unpooled_message(p, unpooled))
    reconciled = period_reconciliation(session=session, period=p, now=utcnow())
    if not reconciled.reconciled and not accept_unreconciled:
        raise Conflict(unreconciled_message(p.month, reconciled))
    before = {"status": row.status, "revision": row.revision}
    _claim(
        session, row, status=PeriodStatus.FINALIZED, finalized_at=utcnow(), finalized_by=actor,
        payment_terms_days=get_settings().payment_terms_days,
        accept_gaps_reason=reason if not hours.complete else None,
        accept_unpooled_reason=reason if unpooled.hours else None,
        accept_unreconciled_reason=reason if not reconciled.reconciled else None,
        # No export hashes: they mark the documents issued, and the issuing step sets them.
        csv_sha256=None, focus_sha256=None, pdf_sha256=None,
    )
    total = _rate_into(session, row, p, actor).total
    row = session.get(BillingPeriod, row.id)
    record(
        session=session, actor=actor, action="billing.close", entity="billing_period", entity_id=p.month,
        before=before,
        after={
            "status": row.status, "revision": row.revision, "total": str(total), "gap_hours": len(hours.gaps),
            "missing_hours": len(hours.missing), "accept_gaps_reason": row.accept_gaps_reason,
            "unpooled_gpu_hours": str(row.unpooled_gpu_hours), "accept_unpooled_reason": row.accept_unpooled_reason,
            "unreconciled_hours": reconciled.problems + reconciled.unchecked,
            "accept_unreconciled_reason": row.accept_unreconciled_reason,
            "documents": "pending",
        },
    )
    return row


def billed_total(*, session: Session, period: BillingPeriod) -> Decimal:
    """What the period's rating lines bill the tenants (platform lines left out), as close reported it."""
    amounts = session.execute(
        select(ChargeLineRecord.amount).where(
            ChargeLineRecord.period_id == period.id, ChargeLineRecord.source == LineSource.RATING,
            ChargeLineRecord.account != PLATFORM)
    ).scalars()
    return sum((Decimal(a) for a in amounts), Decimal(0))  # in Python: SQLite would sum NUMERIC as floats


def _gaps_message(p: Period, hours: HourStatus) -> str:
    return (
        f"Billing period {p.month} has {len(hours.gaps)} gap hour(s) the source could not answer "
        f"({format_runs(hours.gaps, limit=3)}). Wait for ingestion to retry them, or close with accept_gaps and a "
        "reason (CLI: --accept-gaps --reason \"...\"); they are not billed, and the statement shows what they cost."
    )


@dataclass(frozen=True)
class UnpooledStatus:
    hours: int  # hours with GPUs on nodes no pool names
    max_gpus: int
    capacity_gpu_hours: Decimal
    used_gpu_hours: Decimal


def unpooled_status(*, session: Session, period: Period) -> UnpooledStatus:
    """GPUs the stored rollups put in `unpooled` (nodes the policy does not know) during the period."""
    from app.metrics.attribution import UNPOOLED

    in_period = (PoolHourRollup.pool == UNPOOLED, PoolHourRollup.hour >= period.start, PoolHourRollup.hour < period.end,
                 PoolHourRollup.gpus > 0)
    # Each cluster has an unpooled pool of its own: an hour's unpooled GPUs are those of every cluster (as rated).
    per_hour = session.execute(
        select(func.sum(PoolHourRollup.gpus), func.sum(PoolHourRollup.capacity_gpu_seconds)).where(*in_period)
        .group_by(PoolHourRollup.hour)
    ).all()
    hours, gpus = len(per_hour), max((int(g) for g, _ in per_hour), default=0)
    capacity = sum((Decimal(c) for _, c in per_hour), Decimal(0))
    used = session.execute(
        select(func.sum(UsageRollup.gpu_seconds)).where(
            UsageRollup.pool == UNPOOLED, UsageRollup.hour >= period.start, UsageRollup.hour < period.end
        )
    ).scalar_one()
    to_hours = lambda gs: (Decimal(gs or 0) / SECONDS_PER_HOUR).quantize(Decimal("0.000001"))  # noqa: E731
    return UnpooledStatus(hours=hours, max_gpus=gpus or 0, capacity_gpu_hours=to_hours(capacity), used_gpu_hours=to_hours(used))


def _unpooled_message(p: Period, unpooled: UnpooledStatus) -> str:
    return (
        f"Billing period {p.month} has GPUs on nodes no policy pool names ({unpooled.max_gpus} GPU(s) in "
        f"{unpooled.hours} hour(s): {unpooled.capacity_gpu_hours} GPU-hours of capacity, "
        f"{unpooled.used_gpu_hours} used, none of it priced). "
        "Assign the nodes to a pool in the policy and re-ingest those hours, or close with accept_unpooled "
        "and a reason (CLI: --accept-unpooled --reason \"...\")."
    )


def _rating_result(session: Session, p: Period, docs: DocumentCache) -> RatingResult:
    """Rate the stored hours (usage summed in the database, equal to `rate_period`); a GPU model without a
    price raises MissingPrice (422, model and hours named)."""
    return rate_stored(session=session, start=p.start, end=p.end, docs=docs)


@dataclass(frozen=True)
class Rated:
    """What one rating run stored: the billed total, per tenant, and a hash of the lines (id, amount)."""

    total: Decimal
    tenants: dict[str, Decimal]
    lines: int
    sha256: str


def _rate_into(session: Session, row: BillingPeriod, p: Period, actor: str) -> Rated:
    """Run rating and replace the period's draft rows; return what was billed."""
    docs = DocumentCache(session)
    result = _rating_result(session, p, docs)
    hours = hour_status(session=session, period=p)
    for table in (TenantUsageRecord, UnattributedBreachRecord, PoolCostRecord, UnpooledUsageRecord,
                  UnmeasuredCapacityRecord):
        session.execute(delete(table).where(table.period_id == row.id))
    session.execute(
        delete(ChargeLineRecord).where(ChargeLineRecord.period_id == row.id, ChargeLineRecord.source == LineSource.RATING)
    )
    revision = session.execute(select(BillingPeriod.revision).where(BillingPeriod.id == row.id)).scalar_one()
    departments = _departments(docs)
    # Inserted a batch at a time and folded as they go: the run never holds every line's row at once (at 5,000
    # tenants that is 111,442 dicts, more than the ChargeLines they come from).
    tenants: dict[str, Decimal] = {}
    digest = hashlib.sha256()
    count = 0
    rows = _line_rows(row.id, revision, p.month, result.lines, departments)
    while batch := list(islice(rows, LINE_BATCH)):
        session.execute(insert(ChargeLineRecord), batch)
        count += len(batch)
        for line in batch:
            if line["account"] != PLATFORM:
                tenants[line["account"]] = tenants.get(line["account"], Decimal(0)) + line["amount"]
            digest.update(f"{line['line_id']}\t{line['amount']}\n".encode())
    usage = [
        {
            "period_id": row.id, "tenant": u.tenant, "department": departments.get(u.tenant, ""), "pool": u.pool,
            "klass": u.klass, "busy_gpu_hours": u.busy_gpu_hours, "dark_gpu_hours": u.dark_gpu_hours,
            "efficiency": u.efficiency, "activity_samples": u.activity_samples,
        }
        for u in sorted(result.usage, key=lambda u: (u.tenant, u.pool, u.klass))
    ]
    if usage:
        session.execute(insert(TenantUsageRecord), usage)
    breaches = [
        {"period_id": row.id, "service": b.service, "pool": b.pool, "minute_end": from_epoch(b.minute_end),
         "penalty": b.penalty}
        for b in sorted(result.unattributed, key=lambda b: (b.service, b.minute_end))
    ]
    if breaches:
        session.execute(insert(UnattributedBreachRecord), breaches)
    costs = [{"period_id": row.id, "pool": pool, "cost": cost} for pool, cost in sorted(result.cost_by_pool.items())]
    if costs:
        session.execute(insert(PoolCostRecord), costs)
    unpooled = [
        {"period_id": row.id, "tenant": u.tenant, "klass": u.klass, "gpu_hours": u.gpu_hours}
        for u in result.unpooled.usage
    ]
    if unpooled:
        session.execute(insert(UnpooledUsageRecord), unpooled)
    unmeasured = [{"period_id": row.id, **asdict(u)} for u in unmeasured_capacity(
        session=session, start=p.start, end=p.end, docs=docs, currency=result.currency)]
    if unmeasured:
        session.execute(insert(UnmeasuredCapacityRecord), unmeasured)
    row = session.get(BillingPeriod, row.id)
    row.unpooled_hours, row.unpooled_gpus = result.unpooled.hours, result.unpooled.max_gpus
    row.unpooled_gpu_hours = result.unpooled.capacity_gpu_hours
    row.currency = result.currency
    row.rated_at = utcnow()
    row.rated_by = actor
    row.hours_expected, row.hours_ok = hours.expected, hours.ok
    row.gap_hours = json.dumps([h.isoformat() for h in hours.gaps])
    row.missing_hours = json.dumps([h.isoformat() for h in hours.missing])
    session.add(row)
    session.flush()
    return Rated(total=sum(tenants.values(), Decimal(0)), tenants=tenants, lines=count, sha256=digest.hexdigest())


def _departments(docs: DocumentCache) -> dict[str, str]:
    """Tenant -> department from the versions used in this run (the latest version wins)."""
    out: dict[str, str] = {PLATFORM: "platform"}
    for version_id in sorted(docs.docs):
        for tenant in docs.docs[version_id].tenants:
            out[tenant.name] = tenant.department
    return out


def line_key(month: str, line: ChargeLine) -> str:
    """The stable id stem of a line: period/account/pool/kind/class/version[/service]."""
    stem = f"{month}/{line.account}/{line.pool}/{line.kind}/{line.klass or '-'}/v{line.policy_version}"
    return f"{stem}/{line.service}" if line.service else stem


def _line_rows(period_id: int, revision: int, month: str, lines: list[ChargeLine], departments: dict) -> Iterator[dict]:
    """The rows of the lines, sorted by account, pool, kind, class, version, service and start: the order their ids
    number them in within a stem, so a line gets the same id on every run."""
    ordered = sorted(
        lines, key=lambda l: (l.account, l.pool, l.kind, l.klass, l.policy_version, l.service, l.charge_start)
    )
    seq: dict[str, int] = {}
    for line in ordered:
        stem = line_key(month, line)
        seq[stem] = seq.get(stem, 0) + 1
        yield {
            "period_id": period_id, "revision": revision, "line_id": f"{stem}/{seq[stem]}",
            "source": LineSource.RATING, "account": line.account,
            "department": departments.get(line.account, ""), "pool": line.pool, "kind": line.kind,
            "klass": line.klass, "service": line.service, "policy_version": line.policy_version,
            "charge_start": from_epoch(line.charge_start), "charge_end": from_epoch(line.charge_end),
            "quantity": line.quantity, "unit": line.unit, "amount": money(line.amount),
            "corrects": line.corrects, "reason": "", "created_by": "",
        }


def money(value: Decimal) -> Decimal:
    """Half-even to cents (rating already rounds; this keeps stored values exact)."""
    return Decimal(value).quantize(CENT, rounding=ROUND_HALF_EVEN)


def correct(
    *, session: Session, period: str, line_id: str, amount: Decimal | str, reason: str, actor: str
) -> ChargeLineRecord:
    """Add to open period `period` a line that corrects finalized line `line_id` by `amount`."""
    p = parse_period(period)
    require_started(p)
    errors = []
    try:
        delta = money(Decimal(str(amount)))
        if delta == 0:
            errors.append(FieldError("amount", "a correction of zero changes nothing"))
    except (InvalidOperation, ValueError):
        delta = Decimal(0)
        errors.append(FieldError("amount", f"{amount!r} is not a decimal amount"))
    if not (reason or "").strip():
        errors.append(FieldError("reason", "a correction needs a reason"))
    errors += text_errors({"reason": reason})  # a cell of the invoice CSV and FOCUS: one line, no controls
    if errors:
        raise Invalid("The correction is not valid", errors)
    original = session.execute(
        select(ChargeLineRecord, BillingPeriod)
        .join(BillingPeriod, BillingPeriod.id == ChargeLineRecord.period_id)
        .where(ChargeLineRecord.line_id == line_id)
    ).first()
    if original is None:
        raise NotFound(f"No charge line {line_id!r}")
    line, source_period = original
    if source_period.status != PeriodStatus.FINALIZED:
        raise Invalid(
            f"Line {line_id} belongs to {source_period.month}, which is not finalized; re-rate it instead",
            [FieldError("line_id", "only lines of finalized periods are corrected")],
        )
    if source_period.starts_at >= p.start:
        raise Invalid(
            f"A correction of a {source_period.month} line must land in a later period than {p.month}",
            [FieldError("period", f"must be after {source_period.month}")],
        )
    target = _get_or_create(session, p)
    if target.status == PeriodStatus.FINALIZED:
        raise Conflict(f"Billing period {p.month} is finalized; put the correction in an open period")
    count = session.execute(
        select(func.count()).select_from(ChargeLineRecord).where(
            ChargeLineRecord.period_id == target.id, ChargeLineRecord.source == LineSource.CORRECTION
        )
    ).scalar_one()
    fix = ChargeLineRecord(
        period_id=target.id, revision=target.revision, line_id=f"{p.month}/{line.account}/{line.pool}/correction/{count + 1}",
        source=LineSource.CORRECTION, account=line.account, department=line.department, pool=line.pool,
        kind=line.kind, klass=line.klass, service=line.service, policy_version=line.policy_version,
        charge_start=line.charge_start, charge_end=line.charge_end, quantity=Decimal(0), unit=line.unit,
        amount=delta, corrects=line.line_id, reason=reason.strip(), created_by=actor,
    )
    session.add(fix)
    session.flush()
    record(
        session=session, actor=actor, action="billing.correct", entity="charge_line", entity_id=fix.line_id,
        tenant=None if line.account == PLATFORM else line.account,
        after={"corrects": line.line_id, "amount": str(delta), "reason": fix.reason, "period": p.month},
    )
    emit(session=session, type="correction.created", tenant=None if line.account == PLATFORM else line.account,
         key=f"correction.created:{fix.line_id}", payload=CorrectionCreated(
             period=p.month, line_id=fix.line_id, corrects=line.line_id, corrected_period=source_period.month,
             account=line.account, pool=line.pool, amount=str(delta), currency=source_period.currency,
             reason=fix.reason, created_by=actor))
    return fix


def list_periods(*, session: Session, staff: bool = True) -> list[dict]:
    """Stored periods plus the months that have ingested hours but were never rated (status open)."""
    rows = {r.month: r for r in session.execute(select(BillingPeriod)).scalars()}
    out = {m: period_summary(r, staff=staff) for m, r in rows.items()}
    first, last = session.execute(select(func.min(IngestHour.hour), func.max(IngestHour.hour))).one()
    if first is not None:
        tz = get_settings().tz
        cur = first.astimezone(tz).replace(day=1, hour=0, minute=0, second=0, microsecond=0)
        stop = last.astimezone(tz)
        while cur <= stop:
            month = month_name(cur.year, cur.month)
            if month not in out:
                p = parse_period(month)
                out[month] = {"period": month, "status": PeriodStatus.OPEN, "starts_at": p.start, "ends_at": p.end,
                              "revision": 0, "rated_at": None, "finalized_at": None}
            year, month_no = next_month(cur.year, cur.month)
            cur = cur.replace(year=year, month=month_no)
    return [out[m] for m in sorted(out, reverse=True)]


def period_summary(row: BillingPeriod, *, staff: bool = True) -> dict:
    """A period as plain data (status, who rated and finalized it, hours, export hashes).

    `staff=False` (tenant members) leaves out who rated and finalized: those are operators' account names.
    """
    summary = {
        "period": row.month, "status": row.status, "starts_at": row.starts_at, "ends_at": row.ends_at,
        "revision": row.revision, "rated_at": row.rated_at, "rated_by": row.rated_by,
        "finalized_at": row.finalized_at, "finalized_by": row.finalized_by,
        "accept_gaps_reason": row.accept_gaps_reason, "accept_unpooled_reason": row.accept_unpooled_reason,
        "accept_unreconciled_reason": row.accept_unreconciled_reason,
        "unpooled_gpu_hours": row.unpooled_gpu_hours, "hours_expected": row.hours_expected,
        "hours_ok": row.hours_ok, "gap_hours": len(json.loads(row.gap_hours)),
        "missing_hours": len(json.loads(row.missing_hours)),
        "hashes": {"csv": row.csv_sha256, "focus": row.focus_sha256, "pdf": row.pdf_sha256},
        "documents": issued.documents_state(row),
    }
    if not staff:
        summary["rated_by"] = summary["finalized_by"] = None
    return summary
