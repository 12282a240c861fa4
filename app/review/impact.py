"""The impact preview of a change request: capacity (quotas, MIG slices, memory reserve) and last month's invoices."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from sqlmodel import Session

from app.billing.loader import load_hours
from app.billing.period import parse_period
from app.billing.rating import rate_period
from app.billing.totals import account_totals
from app.core.errors import AppError, Invalid
from app.core.settings import get_settings
from app.core.timeutil import utcnow
from app.metrics.prometheus_api import PromReader
from app.metrics.serving import bucket_lookup
from app.policy import gpus
from app.policy.document import PolicyDocument
from app.policy.service import get_version, load_document
from app.policy.validation import LatencyBuckets, pool_model
from app.review.changes import is_stale, semantic_diff, validation
from app.review.models import ChangeRequest


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


def price_impact(*, session: Session, base: PolicyDocument, doc: PolicyDocument, month: str | None = None) -> dict | None:
    """What last month's invoices would have been under the proposed pricing, tenant by tenant.

    The stored rollups are re-rated twice with the billing code: once as billed (each hour's own
    version) and once with each hour's pricing replaced by the proposal. None when pricing is unchanged.
    """
    if base.pricing == doc.pricing:
        return None
    period = parse_period(month or previous_month(), field_path="month")
    hours = list(load_hours(session=session, start=period.start, end=period.end))
    span = {"period_start": int(period.start.timestamp()), "period_end": int(period.end.timestamp())}
    out: dict[str, Any] = {"month": period.month, "pool_hours": len(hours), "currency": doc.pricing.currency, "tenants": []}
    if not hours:
        return out
    proposed = [replace(h, policy=h.policy.model_copy(update={"pricing": doc.pricing})) for h in hours]
    try:
        as_billed = rate_period(hours, **span)
        as_proposed = rate_period(proposed, **span)
    except Invalid as exc:
        out["error"] = exc.detail
        return out

    before, after = account_totals(as_billed.lines), account_totals(as_proposed.lines)
    for account in sorted(set(before) | set(after)):
        old, new = before.get(account, 0), after.get(account, 0)
        out["tenants"].append({"tenant": account, "before": str(old), "after": str(new), "delta": str(new - old)})
    return out


def preview(
    *, session: Session, change: ChangeRequest, measured_peaks: Mapping[str, float] | None = None, month: str | None = None,
    latency_buckets=None,
) -> dict:
    """Validation, semantic diff, capacity impact and (for a price change) the invoice impact of a request."""
    doc, findings = validation(change, measured_peaks=measured_peaks, latency_buckets=latency_buckets)
    base = load_document(get_version(session=session, number=change.base_version_id))
    out: dict[str, Any] = {
        "valid": doc is not None and not any(e.severity == "error" for e in findings),
        "errors": [e.as_dict() for e in findings if e.severity == "error"],
        "warnings": [e.as_dict() for e in findings if e.severity != "error"],
        "stale": is_stale(session=session, change=change),
        "diff": [],
        "capacity": None,
        "price": None,
    }
    if doc is None:
        return out
    out["diff"] = [c.as_dict() for c in semantic_diff(session=session, change=change)]
    out["capacity"] = capacity_impact(base, doc, measured_peaks=measured_peaks)
    out["price"] = price_impact(session=session, base=base, doc=doc, month=month)
    return out


# A tenant's peak: the highest total framebuffer its namespaces held at once over the window, sampled each
# minute (a subquery), so that a pod's memory on several GPUs counts together.
# The editor validates as the author types: one 7-day query per few minutes is plenty.
PEAK_CACHE_S = 300
_PEAK_CACHE: dict[tuple, tuple[float, list]] = {}
PEAK_QUERY = 'max_over_time((sum by (namespace) (DCGM_FI_DEV_FB_USED{{namespace!=""}}))[{window}:1m])'


def measured_peaks_from_prometheus(
    url: str, doc: PolicyDocument, *, at=None, window: str = "7d", timeout_s: float = 10.0
) -> dict[str, float] | None:
    """Peak GPU memory (MiB) per tenant over `window` from dcgm-exporter's DCGM_FI_DEV_FB_USED; None if unreachable.

    Namespaces of one tenant are added (an upper bound when their peaks did not coincide).
    """
    key = (url, window, at)
    cached = _PEAK_CACHE.get(key)
    if cached is not None and time.monotonic() - cached[0] < PEAK_CACHE_S:
        result = cached[1]
    else:
        try:
            result = PromReader(url, timeout_s=timeout_s).query(PEAK_QUERY.format(window=window), (at or utcnow()).timestamp())
        except AppError:  # unanswered, partial or refused: not measured: validation then warns instead
            return None
        if len(_PEAK_CACHE) > 32:
            _PEAK_CACHE.clear()
        _PEAK_CACHE[key] = (time.monotonic(), result)
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
