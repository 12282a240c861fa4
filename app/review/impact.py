"""The impact preview of a change request: capacity (quotas, MIG slices, memory reserve), quotas against a
month's measured use (with an estimate of preemption), and that month's invoices and platform statement
re-rated under the proposal. The month defaults to the newest complete month with every hour ingested."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from decimal import Decimal
from typing import Any

from sqlalchemy import func
from sqlmodel import Session, select

from app.billing.loader import load_hours
from app.billing.period import Period, parse_period
from app.billing.rating import rate_period
from app.billing.totals import NOT_TENANTS, account_totals
from app.billing.types import PLATFORM, LineKind, RatingResult
from app.core.cache import TtlCache
from app.core.errors import AppError, FieldError, Invalid
from app.core.settings import get_settings
from app.core.timeutil import aware, utcnow
from app.metrics.models import IngestHour, IngestStatus, UsageRollup
from app.metrics.prometheus_api import PromReader
from app.metrics.serving import bucket_lookup
from app.policy import gpus
from app.policy.document import PolicyDocument
from app.policy.service import get_version, load_document
from app.policy.validation import LatencyBuckets, pool_model
from app.review.changes import is_stale, semantic_diff, validation
from app.review.models import ChangeRequest

ZERO = Decimal(0)
GPUS = Decimal("0.01")  # GPUs held, to two places
SECONDS_PER_HOUR = 3600


def _pool_gpus(pool) -> int:
    return len(pool.nodes) * pool.gpus_per_node


def _quota_rows(base: PolicyDocument | None, doc: PolicyDocument) -> list[dict]:
    def sums(d: PolicyDocument | None) -> dict[str, int]:
        out: dict[str, int] = {}
        for q in (d.quotas if d else []):
            out[q.pool] = out.get(q.pool, 0) + q.guaranteed_gpus
        return out

    before, after = sums(base), sums(doc)
    rows = []
    for pool in doc.pools:
        old = base.pool(pool.name) if base else None
        rows.append({
            "pool": pool.name,
            "gpus_before": _pool_gpus(old) if old else None,
            "gpus": _pool_gpus(pool),
            "guaranteed_before": before.get(pool.name, 0),
            "guaranteed": after.get(pool.name, 0),
            "over": after.get(pool.name, 0) > _pool_gpus(pool),
        })
    return rows


def _mig_rows(doc: PolicyDocument) -> list[dict]:
    rows = []
    for node, layout in sorted(doc.isolation.mig.items()):
        pool = doc.pool_for_node(node)
        model_name = layout.model or (pool_model(doc, pool) if pool else None) or ""
        model = gpus.lookup(model_name)
        for key, profiles in layout.gpus.items():
            used = 0
            for profile, count in profiles.items():
                if model is not None and profile in model.profiles and count > 0:
                    used += model.profile_slices(profile)[0] * count
            total = model.slices if model is not None and model.mig else 0
            rows.append({"node": node, "gpus": key, "model": model_name, "profiles": dict(profiles),
                         "slices_used": used, "slices": total, "over": used > total})
    return rows


def _reserved_mib(doc: PolicyDocument, tenant: str) -> float | None:
    """GPU memory held for an inference tenant: its weighted share of each pool's reserved fraction."""
    reserved = 0.0
    for pool in doc.pools:
        weight = pool.reservations.get(tenant)
        total = sum((w for w in pool.reservations.values() if w > 0), 0)
        if not weight or weight <= 0 or total <= 0:
            continue
        model = gpus.lookup(pool_model(doc, pool) or "")
        if model is None:
            return None
        reserved += float(pool.reserved_fraction * weight / total) * _pool_gpus(pool) * model.memory_mib
    return reserved


def _memory_rows(doc: PolicyDocument, measured_peaks: Mapping[str, float] | None) -> list[dict]:
    factor = float(doc.isolation.inference.memory_reserve_factor)
    rows = []
    for tenant in doc.tenants:
        if tenant.klass != "inference":
            continue
        peak = None if measured_peaks is None else measured_peaks.get(tenant.name)
        reserved = _reserved_mib(doc, tenant.name)
        required = None if peak is None else max(factor, 1.2) * float(peak)
        rows.append({
            "tenant": tenant.name,
            "reserved_mib": None if reserved is None else round(reserved),
            "peak_mib": None if peak is None else round(float(peak)),
            "required_mib": None if required is None else round(required),
            "ok": None if required is None or reserved is None else reserved >= required,
        })
    return rows


def capacity_impact(
    base: PolicyDocument | None, doc: PolicyDocument, *, measured_peaks: Mapping[str, float] | None = None
) -> dict:
    """Guaranteed quotas vs GPUs per pool, MIG compute slices per GPU, inference memory reserve vs measured peak."""
    return {
        "quotas": _quota_rows(base, doc),
        "mig": _mig_rows(doc),
        "memory": _memory_rows(doc, measured_peaks),
        "memory_measured": measured_peaks is not None,
    }


def previous_month(now=None) -> str:
    """The last complete billing month ("YYYY-MM") in the billing timezone."""
    local = (now or utcnow()).astimezone(get_settings().tz)
    year, month = (local.year, local.month - 1) if local.month > 1 else (local.year - 1, 12)
    return f"{year:04d}-{month:02d}"


def month_before(month: str) -> str:
    """The calendar month before "YYYY-MM"."""
    year, mon = int(month[:4]), int(month[5:7])
    return f"{year - (mon == 1):04d}-{(mon - 2) % 12 + 1:02d}"


def _ok_hours(session: Session, period: Period) -> int:
    return session.exec(
        select(func.count()).select_from(IngestHour)
        .where(IngestHour.hour >= period.start, IngestHour.hour < period.end, IngestHour.status == IngestStatus.OK)
    ).one()


def _coverage(session: Session, period: Period) -> dict:
    expected = int((period.end - period.start).total_seconds() // 3600)
    return {"month": period.month, "hours_expected": expected, "hours_ok": _ok_hours(session, period)}


MONTH_CHOICES = 24  # how far back the picker offers complete months


def month_choices(*, session: Session, now=None) -> list[dict]:
    """Complete billing months since the first ingested hour (at most MONTH_CHOICES), newest first, with coverage."""
    earliest = session.exec(select(func.min(IngestHour.hour))).one()
    if earliest is None:
        return []
    out, month = [], previous_month(now)
    while len(out) < MONTH_CHOICES:
        period = parse_period(month, field_path="month")
        if period.end <= aware(earliest):
            break
        out.append(_coverage(session, period))
        month = month_before(month)
    return out


def choose_month(choices: list[dict], *, now=None) -> tuple[str, str | None]:
    """The default month to re-rate: the newest fully covered one (hours_ok == hours_expected), else the most
    covered (ties: the newest), else last month; with a note saying why when it is not a fully covered month."""
    for c in choices:
        if c["hours_ok"] == c["hours_expected"]:
            return c["month"], None
    best = max(choices, key=lambda c: (c["hours_ok"], c["month"]), default=None)
    if best is None or best["hours_ok"] == 0:
        return previous_month(now), "no complete month has ingested hours yet"
    return best["month"], (f"no complete month is fully covered: {best['month']} has the most ingested hours "
                           f"({best['hours_ok']} of {best['hours_expected']})")


def resolve_month(*, session: Session, month: str | None, now=None) -> dict:
    """The month the preview re-rates: `month` (YYYY-MM, a month that has started; else 422 naming `month`)
    or the default. Returns month, hours_ok, hours_expected, note, requested and the picker's choices."""
    choices = month_choices(session=session, now=now)
    if month is None or not month.strip():
        chosen, note = choose_month(choices, now=now)
        requested = False
    else:
        period = parse_period(month.strip(), field_path="month")
        if period.start > (now or utcnow()):
            raise Invalid(f"{period.month} has not started: nothing to re-rate",
                          [FieldError("month", "a month that has started (the picker lists complete months)")])
        chosen, note, requested = period.month, None, True
    coverage = next((c for c in choices if c["month"] == chosen), None)
    if coverage is None:
        coverage = _coverage(session, parse_period(chosen, field_path="month"))
    if note is None and coverage["hours_ok"] < coverage["hours_expected"]:
        note = f"{chosen} is not fully covered: {coverage['hours_ok']} of {coverage['hours_expected']} hours ingested"
    return {**coverage, "note": note, "requested": requested, "choices": choices}


# What rating reads from a policy document (billing/rating.py `_Version.of`): a proposal that changes none of
# these leaves every invoice as it was.
RATED_PARTS = ("pricing", "pools", "sla", "tenants")

_PLATFORM_LINES = (
    (LineKind.IDLE, "Idle capacity"),
    (LineKind.DARK_DISCOUNT, "Dark-time discount"),
    (LineKind.RESERVED_UNUSED, "Reserved but unused"),
    (LineKind.ROUNDING, "Rounding"),
    (LineKind.UNALLOCATED, "Unallocated usage"),
)


def _change(before: Decimal, after: Decimal, **extra) -> dict:
    return {**extra, "before": str(before), "after": str(after), "delta": str(after - before)}


def _platform_rows(old: RatingResult, new: RatingResult) -> list[dict]:
    """The platform statement's lines old vs new, then the platform's share (their sum) and C, the cost to cover."""
    def by_kind(result: RatingResult) -> dict[str, Decimal]:
        sums: dict[str, Decimal] = {}
        for line in result.lines:
            if line.account == PLATFORM:
                sums[line.kind] = sums.get(line.kind, ZERO) + line.amount
        return sums

    before, after = by_kind(old), by_kind(new)
    rows = [_change(before.get(kind, ZERO), after.get(kind, ZERO), line=label, kind=str(kind))
            for kind, label in _PLATFORM_LINES]
    rows.append(_change(sum(before.values(), ZERO), sum(after.values(), ZERO), line="Platform's share", kind="total"))
    rows.append(_change(sum(old.cost_by_pool.values(), ZERO), sum(new.cost_by_pool.values(), ZERO),
                        line="Fleet cost C (tenants + platform)", kind="cost"))
    return rows


def price_impact(*, session: Session, base: PolicyDocument, doc: PolicyDocument, month: str) -> dict | None:
    """What `month`'s invoices and platform statement would have been under the proposal, account by account.

    The stored rollups are re-rated twice with the billing code: once as billed (each hour's own version)
    and once with the rated parts of each hour's policy (RATED_PARTS) replaced by the proposal's. None when
    the proposal changes none of them.
    """
    if all(getattr(base, part) == getattr(doc, part) for part in RATED_PARTS):
        return None
    period = parse_period(month, field_path="month")
    hours = list(load_hours(session=session, start=period.start, end=period.end))
    span = {"period_start": int(period.start.timestamp()), "period_end": int(period.end.timestamp())}
    out: dict[str, Any] = {"month": period.month, "pool_hours": len(hours), "currency": doc.pricing.currency,
                           "tenants": [], "platform": []}
    if not hours:
        return out
    update = {part: getattr(doc, part) for part in RATED_PARTS}
    proposed = [replace(h, policy=h.policy.model_copy(update=update)) for h in hours]
    try:
        as_billed = rate_period(hours, **span)
        as_proposed = rate_period(proposed, **span)
    except Invalid as exc:
        out["error"] = exc.detail
        return out

    before, after = account_totals(as_billed.lines), account_totals(as_proposed.lines)
    for account in sorted((set(before) | set(after)) - NOT_TENANTS):
        out["tenants"].append(_change(before.get(account, ZERO), after.get(account, ZERO), tenant=account))
    out["platform"] = _platform_rows(as_billed, as_proposed)
    return out


def _hourly_use(session: Session, period: Period) -> dict[tuple[str, str], list[Decimal]]:
    """(tenant, pool) -> GPUs held in each hour of the month it used any (its GPU-seconds in the hour / 3600)."""
    rows = session.exec(
        select(UsageRollup.tenant, UsageRollup.pool, func.sum(UsageRollup.gpu_seconds))
        .where(UsageRollup.hour >= period.start, UsageRollup.hour < period.end)
        .group_by(UsageRollup.hour, UsageRollup.tenant, UsageRollup.pool)
    ).all()
    out: dict[tuple[str, str], list[Decimal]] = {}
    for tenant, pool, seconds in rows:
        out.setdefault((tenant, pool), []).append(Decimal(str(seconds)) / SECONDS_PER_HOUR)
    return out


def _limits(doc: PolicyDocument) -> dict[tuple[str, str], tuple[int, int]]:
    return {(q.tenant, q.pool): (q.guaranteed_gpus, q.guaranteed_gpus + q.borrowing_limit) for q in doc.quotas}


def quota_use(use: dict[tuple[str, str], list[Decimal]], hours_ok: int,
              base: PolicyDocument, doc: PolicyDocument) -> list[dict]:
    """Each quota (tenant, pool) before and after against the month's measured use, and the preemption estimate.

    Use in an hour is the GPUs the tenant held on average in that hour (rollups are hourly), so `peak` is the
    busiest hour's mean, not an instantaneous peak. The estimate, from Kueue's rules: GPUs held above the
    guaranteed (nominal) quota are borrowed, and preemptible when the lender reclaims them; GPUs above
    guaranteed + borrowing_limit are never admitted, so those workloads would have been preempted or kept
    waiting. Counted per hour (`hours_borrowing`, `hours_over_limit`) and in GPU-hours above the limit.
    """
    old, new = _limits(base), _limits(doc)
    rows = []
    for key in sorted(set(old) | set(new)):
        hourly = use.get(key, [])
        row: dict[str, Any] = {
            "tenant": key[0], "pool": key[1],
            "peak_gpus": str(max(hourly, default=ZERO).quantize(GPUS)),
            "mean_gpus": str((sum(hourly, ZERO) / hours_ok if hours_ok else ZERO).quantize(GPUS)),
        }
        for side, limits in (("before", old.get(key)), ("after", new.get(key))):
            guaranteed, limit = limits if limits is not None else (0, 0)
            row[f"guaranteed_{side}"] = guaranteed if limits is not None else None
            row[f"limit_{side}"] = limit if limits is not None else None
            row[f"hours_borrowing_{side}"] = sum(1 for gpus in hourly if gpus > guaranteed)
            row[f"hours_over_limit_{side}"] = sum(1 for gpus in hourly if gpus > limit)
            row[f"gpu_hours_over_limit_{side}"] = str(sum((gpus - limit for gpus in hourly if gpus > limit), ZERO).quantize(GPUS))
        over_before, over_after = Decimal(row["gpu_hours_over_limit_before"]), Decimal(row["gpu_hours_over_limit_after"])
        row["preempted"] = "more" if over_after > over_before else "fewer" if over_after < over_before else "same"
        rows.append(row)
    return rows


def preview(
    *, session: Session, change: ChangeRequest, measured_peaks: Mapping[str, float] | None = None, month: str | None = None,
    latency_buckets=None, now=None,
) -> dict:
    """Validation, semantic diff, capacity impact, quotas against a month's use and the invoice impact of a request.

    `month` (YYYY-MM) is the month re-rated and measured; by default the newest fully covered complete month.
    """
    chosen = resolve_month(session=session, month=month, now=now)
    doc, findings = validation(change, measured_peaks=measured_peaks, latency_buckets=latency_buckets)
    base = load_document(get_version(session=session, number=change.base_version_id))
    out: dict[str, Any] = {
        "valid": doc is not None and not any(e.severity == "error" for e in findings),
        "errors": [e.as_dict() for e in findings if e.severity == "error"],
        "warnings": [e.as_dict() for e in findings if e.severity != "error"],
        "stale": is_stale(session=session, change=change),
        "month": {k: v for k, v in chosen.items() if k != "choices"},
        "months": chosen["choices"],
        "diff": [],
        "capacity": None,
        "quota_use": [],
        "price": None,
    }
    if doc is None:
        return out
    out["diff"] = [c.as_dict() for c in semantic_diff(session=session, change=change)]
    out["capacity"] = capacity_impact(base, doc, measured_peaks=measured_peaks)
    period = parse_period(chosen["month"], field_path="month")
    out["quota_use"] = quota_use(_hourly_use(session, period), chosen["hours_ok"], base, doc)
    out["price"] = price_impact(session=session, base=base, doc=doc, month=chosen["month"])
    return out


# A tenant's peak: the highest total framebuffer its namespaces held at once over the window, sampled each
# minute (a subquery), so that a pod's memory on several GPUs counts together.
# The editor validates as the author types: one 7-day query per few minutes is plenty.
PEAK_CACHE_S = 300
_PEAK_CACHE: TtlCache[list] = TtlCache(ttl_s=PEAK_CACHE_S, max_entries=32)
PEAK_QUERY = 'max_over_time((sum by (namespace) (DCGM_FI_DEV_FB_USED{{namespace!=""}}))[{window}:1m])'


def measured_peaks_from_prometheus(
    url: str, doc: PolicyDocument, *, at=None, window: str = "7d", timeout_s: float = 10.0
) -> dict[str, float] | None:
    """Peak GPU memory (MiB) per tenant over `window` from dcgm-exporter's DCGM_FI_DEV_FB_USED; None if unreachable.

    Namespaces of one tenant are added (an upper bound when their peaks did not coincide).
    """
    key = (url, window, at)
    hit, result = _PEAK_CACHE.peek(key)
    if not hit:
        try:
            result = PromReader(url, timeout_s=timeout_s).query(PEAK_QUERY.format(window=window), (at or utcnow()).timestamp())
        except AppError:  # unanswered, partial or refused: not measured: validation then warns instead
            return None
        _PEAK_CACHE.put(key, result)
    peaks: dict[str, float] = {}
    for labels, samples in result:
        tenant = doc.tenant_for_namespace(labels.get("namespace", ""))
        if tenant is None or not samples:
            continue
        peaks[tenant.name] = peaks.get(tenant.name, 0.0) + samples[-1][1]
    return peaks


def configured_latency_buckets() -> LatencyBuckets | None:
    """Bucket boundaries of a latency histogram as the configured Prometheus has them (red-line warnings); None without one."""
    settings = get_settings()
    if not settings.prometheus_url:
        return None
    return bucket_lookup(settings.prometheus_url, timeout_s=min(settings.prometheus_timeout_s, 10.0))
