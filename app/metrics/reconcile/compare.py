"""One cluster-hour's stored rollups against the figures derived again from the source: a verdict. Pure.

Tolerances ("beyond rounding"): every stored usage row is rounded to 1e-6 GPU-seconds and every
(pool, model) energy row to 1e-9 kWh, so a pool-hour of a few thousand rows is off by at most a few
thousandths of a GPU-second and a few millionths of a kWh; one sample is at least 2 GPU-seconds (15 s
on a 1g MIG slice of 7) and the smallest energy slip that moves a cent is far above 1e-6 kWh. So a
pool-hour agrees when its GPUs are equal, its occupied GPU-seconds (and each tenant's, where sample
counts decide them) within 0.01 GPU-seconds, and its kWh as the rating uses it (counter, else mean
power, else the model's default watts) within 0.000001 kWh.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import ROUND_HALF_EVEN, Decimal
from fractions import Fraction

from app.metrics.reconcile.derive import DerivedHour, PoolFigures
from app.metrics.reconcile.models import MISSING_STATUS, HourVerdict
from app.policy.document import PolicyDocument

GPU_SECONDS_TOLERANCE = Decimal("0.01")
KWH_TOLERANCE = Decimal("0.000001")
MICRO = Decimal("0.000001")
NANO = Decimal("0.000000001")
SHOWN = 5  # nodes named in a detail


@dataclass(frozen=True)
class StoredModel:
    model: str
    gpus: int
    measured_gpus: int
    measured_kwh: Decimal


@dataclass
class StoredPool:
    pool: str
    gpus: int = 0
    gpu_seconds: Decimal = Decimal(0)
    models: list[StoredModel] = field(default_factory=list)
    tenants: dict[str, Decimal] = field(default_factory=dict)


@dataclass
class StoredHour:
    hour: int  # hour start, epoch seconds
    status: str  # ok | gap | missing
    attempts: int = 0
    error: str = ""
    pools: dict[str, StoredPool] = field(default_factory=dict)


@dataclass(frozen=True)
class PoolCheck:
    pool: str
    agrees: bool
    stored_gpus: int | None
    source_gpus: int
    stored_gpu_seconds: Decimal | None
    source_gpu_seconds: Decimal
    stored_kwh: Decimal | None
    source_kwh: Decimal
    tenants: dict[str, tuple[Decimal, Decimal]]  # tenants whose GPU-seconds differ: (stored, source)
    note: str = ""


@dataclass(frozen=True)
class HourCheck:
    hour: int
    verdict: HourVerdict
    stored_status: str
    attempts: int
    detail: str
    pools: list[PoolCheck]


def rated_kwh(pool: StoredPool, policy: PolicyDocument) -> Decimal:
    """The pool-hour's kWh as the rating takes it: measured GPUs' kWh, the rest at their model's default watts."""
    total = Decimal(0)
    for m in pool.models:
        total += Decimal(m.measured_kwh)
        price = policy.pricing.gpu_models.get(m.model)
        if price is not None:
            total += (m.gpus - m.measured_gpus) * price.default_power_watts / 1000
    return total


def _micro(value: Fraction) -> Decimal:
    return (Decimal(value.numerator) / Decimal(value.denominator)).quantize(MICRO, ROUND_HALF_EVEN)


def _nano(value: Fraction) -> Decimal:
    return (Decimal(value.numerator) / Decimal(value.denominator)).quantize(NANO, ROUND_HALF_EVEN)


def _off(stored: Decimal, source: Fraction, tolerance: Decimal) -> bool:
    return abs(Fraction(stored) - source) > Fraction(tolerance)


def _pool_check(name: str, stored: StoredPool | None, source: PoolFigures | None, policy: PolicyDocument) -> PoolCheck:
    source = source or PoolFigures(pool=name)
    stored_pool = stored or StoredPool(pool=name)
    kwh = rated_kwh(stored_pool, policy)
    agrees = (stored_pool.gpus == source.gpus and not _off(stored_pool.gpu_seconds, source.gpu_seconds, GPU_SECONDS_TOLERANCE)
              and not _off(kwh, source.kwh, KWH_TOLERANCE))
    tenants: dict[str, tuple[Decimal, Decimal]] = {}
    notes = []
    if source.tenants_exact:
        for tenant in sorted(stored_pool.tenants.keys() | source.tenants.keys()):
            have = stored_pool.tenants.get(tenant, Decimal(0))
            got = source.tenants.get(tenant, Fraction(0))
            if _off(have, got, GPU_SECONDS_TOLERANCE):
                tenants[tenant] = (have, _micro(got))
    else:
        notes.append("tenants not compared: a unit was shared by pods in the hour")
    if source.unpriced:
        notes.append(f"no default watts for {', '.join(sorted(source.unpriced))}")
    return PoolCheck(pool=name, agrees=agrees and not tenants, stored_gpus=stored_pool.gpus,
                     source_gpus=source.gpus, stored_gpu_seconds=Decimal(stored_pool.gpu_seconds).quantize(MICRO),
                     source_gpu_seconds=_micro(source.gpu_seconds), stored_kwh=kwh.quantize(NANO, ROUND_HALF_EVEN),
                     source_kwh=_nano(source.kwh), tenants=tenants, note="; ".join(notes))


def _source_only(figures: PoolFigures) -> PoolCheck:
    return PoolCheck(pool=figures.pool, agrees=False, stored_gpus=None, source_gpus=figures.gpus,
                     stored_gpu_seconds=None, source_gpu_seconds=_micro(figures.gpu_seconds), stored_kwh=None,
                     source_kwh=_nano(figures.kwh), tenants={})


def describe(check: PoolCheck) -> str:
    """What differs in one pool-hour, both figures."""
    parts = []
    if check.stored_gpus != check.source_gpus:
        parts.append(f"GPUs stored {check.stored_gpus}, source {check.source_gpus}")
    if check.stored_gpu_seconds is not None and abs(check.stored_gpu_seconds - check.source_gpu_seconds) > GPU_SECONDS_TOLERANCE:
        parts.append(f"GPU-seconds stored {check.stored_gpu_seconds}, source {check.source_gpu_seconds}")
    if check.stored_kwh is not None and abs(check.stored_kwh - check.source_kwh) > KWH_TOLERANCE:
        parts.append(f"kWh stored {check.stored_kwh}, source {check.source_kwh}")
    parts += [f"tenant {t} GPU-seconds stored {a}, source {b}" for t, (a, b) in check.tenants.items()]
    return f"pool {check.pool}: " + "; ".join(parts)


def _named(nodes: set[str]) -> str:
    shown = sorted(nodes)
    return ", ".join(shown[:SHOWN]) + (f" and {len(shown) - SHOWN} more" if len(shown) > SHOWN else "")


def judge(stored: StoredHour, derived: DerivedHour | None, *, policy: PolicyDocument | None,
          around: tuple[set[str], set[str]] = (set(), set())) -> HourCheck:
    """The verdict of one cluster-hour. `around` = hosts reporting in the hour before and the hour after."""
    def done(verdict: HourVerdict, detail: str, pools: list[PoolCheck] = ()) -> HourCheck:
        return HourCheck(hour=stored.hour, verdict=verdict, stored_status=stored.status, attempts=stored.attempts,
                         detail=detail, pools=list(pools))

    if derived is None or policy is None:
        why = "no policy version was in effect"
        if stored.status == MISSING_STATUS:
            return done(HourVerdict.MISSING, why)
        return done(HourVerdict.GAP if stored.status != "ok" else HourVerdict.DIFFERS, why)
    pooled = {n for p in policy.pools for n in p.nodes}
    reporting = derived.reporting & pooled if pooled else derived.reporting
    before, after = around
    expected = (before | after) & pooled
    if stored.status == "ok":
        names = sorted(stored.pools.keys() | derived.pools.keys())
        checks = [_pool_check(p, stored.pools.get(p), derived.pools.get(p), policy) for p in names]
        if pooled and not reporting:
            return done(HourVerdict.SOURCE_EMPTY, (
                f"stored ok, but the source holds no occupancy series for any of the {len(pooled)} pooled node(s) in this "
                "hour" + (" though they report in the hours around it" if expected else "")
                + ": an empty answer billed as zero use"), checks)
        silent = (before & after & pooled) - derived.reporting
        if silent:
            return done(HourVerdict.SOURCE_EMPTY, (
                f"stored ok, but node(s) {_named(silent)} report in the hours before and after and not in this one"), checks)
        differing = [c for c in checks if not c.agrees]
        if differing:
            return done(HourVerdict.DIFFERS, "; ".join(describe(c) for c in differing), checks)
        return done(HourVerdict.AGREES, "", checks)
    figures = [_source_only(f) for _, f in sorted(derived.pools.items())]
    if stored.status == MISSING_STATUS:
        if reporting:
            return done(HourVerdict.UNSTORED, f"never ingested, but the source holds data for {len(reporting)} pooled "
                                              "node(s) in this hour: ingest it", figures)
        return done(HourVerdict.MISSING, "never ingested; the source holds no data for it either")
    lacking = expected - derived.reporting
    if reporting and not lacking:
        return done(HourVerdict.UNSTORED, "stored as a gap, but the source now holds data for every pooled node seen "
                                          f"around it ({stored.error[:200]}): ingest it again", figures)
    why = f"node(s) {_named(lacking)} have no data in the source either" if lacking else "the source holds no data for it either"
    return done(HourVerdict.GAP, f"a gap; {why}")
