"""Money invariants of rating over random rollups, pools, prices, weights and fractions (hypothesis).

Each scenario has up to three pools, a policy version change at a random hour, GPUs of two models,
random usage never above capacity, and random breach minutes. An independent reference written with
`fractions.Fraction` straight from SPEC section 5 checks the tenant lines; the other properties are
conservation per pool to the cent, transfers netting to zero, order independence and monotonicity.
"""

from __future__ import annotations

import random
from collections import defaultdict
from dataclasses import dataclass, replace
from decimal import ROUND_DOWN
from decimal import Decimal as D
from fractions import Fraction as F

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.billing.rating import rate_period
from app.billing.types import BALANCE_KINDS, CHARGE_KINDS, PLATFORM, TRANSFER_KINDS, LineKind, RatingHour, RatingResult
from app.metrics.types import BreachMinute, ModelEnergy, UsageRow
from app.policy.document import PolicyDocument

NOV = 1_793_491_200  # 2026-11-01T00:00Z
DEC = 1_796_083_200
HOUR = 3600
MODELS = ("NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3")
INFERENCE = ("i0", "i1", "i2")
TRAINING = ("t0", "t1")
PREPROCESSING = ("e0",)
# candidate rows: (tenant, class, dark); i2 never holds a reservation-free guarantee, any may be absent
ROW_KEYS = (
    [(t, "inference", d) for t in INFERENCE for d in (False, True)]
    + [(t, "training", d) for t in TRAINING for d in (False, True)]
    + [(t, "preprocessing", d) for t in PREPROCESSING for d in (False, True)]
    + [("unallocated", "unallocated", d) for d in (False, True)]
)
COLOCATED = ("t0", "t1", "e0", "unallocated")
MICRO = D("0.000001")
CENT = D("0.01")

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# fractions and multipliers: the edges 0 and 1 explicitly, then anything in between
unit_interval = st.one_of(st.sampled_from([D(0), D(1)]), st.integers(0, 100).map(lambda n: D(n) / 100))
money = st.integers(0, 300).map(lambda n: D(n) / 100)


@st.composite
def policies(draw, pools: tuple[str, ...]) -> PolicyDocument:
    gpu_models = {
        m: {
            "purchase_price": draw(st.integers(0, 60_000)),
            "depreciation_years": draw(st.sampled_from(["1", "2.5", "3", "4", "7"])),
            "hosting_per_hour": str(draw(money)),
            "default_power_watts": draw(st.integers(0, 1000)),
        }
        for m in MODELS
    }
    tenants = [{"name": t, "department": "d", "namespaces": [f"ns-{t}"], "class": "inference"} for t in INFERENCE]
    tenants += [{"name": t, "department": "d", "namespaces": [f"ns-{t}"], "class": "training"} for t in TRAINING]
    tenants += [{"name": t, "department": "d", "namespaces": [f"ns-{t}"], "class": "preprocessing"} for t in PREPROCESSING]
    weights = st.dictionaries(st.sampled_from(INFERENCE[:2]), st.integers(0, 5).map(D), max_size=2)
    return PolicyDocument.model_validate(
        {
            "tenants": tenants,
            "pools": [
                {"name": p, "nodes": [f"{p}-n"], "reserved_fraction": str(draw(unit_interval)), "reservations": draw(weights)}
                for p in pools
            ],
            "pricing": {
                "currency": "EUR",
                "gpu_models": gpu_models,
                "energy_price_per_kwh": str(draw(st.integers(0, 600).map(lambda n: D(n) / 1000))),
                "pue": str(draw(st.integers(100, 200).map(lambda n: D(n) / 100))),
                "dark_time_multiplier": str(draw(unit_interval)),
            },
            "sla": [
                {
                    "service": f"svc-{p}",
                    "tenant": "i0",
                    "pool": p,
                    "requests": "r",
                    "latency_histogram": "h",
                    "p99_ms": 300,
                    "penalty_per_breach_minute": str(draw(money)),
                }
                for p in pools
            ],
        }
    )


@st.composite
def pool_hours(draw, hour: int, pool: str, version: int, doc: PolicyDocument) -> RatingHour:
    # the shape (GPUs, fill, edges) comes from hypothesis; the bulk detail from a drawn seed,
    # which keeps data generation cheap enough for many hours per example
    gpus = draw(st.integers(0, 4))
    fill = draw(st.sampled_from([D(0), D(1)]) | st.integers(0, 100).map(lambda n: D(n) / 100))
    rnd = random.Random(draw(st.integers(0, 2**32)))
    capacity = D(gpus * HOUR)
    first = rnd.randint(0, gpus)
    models = []
    for model, n in zip(MODELS, (first, gpus - first), strict=True):
        if n:
            measured = rnd.randint(0, n)
            models.append(ModelEnergy(model, n, measured, D(rnd.randint(0, 700 * measured)) / 1000))
    # usage: random weights over the candidate rows times the fill fraction of capacity, rounded down
    weights = [rnd.choice((0, 0, 0, 1, 2, 3, 5, 8, 13)) for _ in ROW_KEYS]
    total = sum(weights)
    rows = []
    if total and gpus:
        for (tenant, klass, dark), w in zip(ROW_KEYS, weights, strict=True):
            if w:
                gs = (capacity * fill * w / total).quantize(MICRO, rounding=ROUND_DOWN)
                samples = rnd.randint(0, 120)
                rows.append(UsageRow(pool, tenant, klass, dark, gs, activity_sum=samples * rnd.random(), activity_samples=samples))
    breaches = []
    for minute in sorted(rnd.sample(range(1, 61), rnd.choice((0, 0, 1, 2, 3)))):
        colocated = [(rnd.choice(COLOCATED), D(rnd.choice((0, 1, 7, 30, 60)))) for _ in range(rnd.randint(0, 3))]
        breaches.append(BreachMinute(f"svc-{pool}", "i0", pool, hour + 60 * minute, D(400), tuple(colocated)))
    return RatingHour(hour, pool, version, doc, gpus, capacity, tuple(models), tuple(rows), tuple(breaches))


@st.composite
def scenarios(draw) -> list[RatingHour]:
    pools = tuple(f"p{i}" for i in range(draw(st.integers(1, 3))))
    old, new = draw(policies(pools)), draw(policies(pools))
    n_hours = draw(st.integers(1, 8))
    change = draw(st.integers(0, n_hours))  # hours from `change` on are rated with version 2
    hours = []
    for i in range(n_hours):
        doc, version = (old, 1) if i < change else (new, 2)
        for pool in pools:
            hours.append(draw(pool_hours(NOV + HOUR * (3 * i), pool, version, doc)))  # gaps between hours are fine
    return hours


def rate(hours) -> RatingResult:
    return rate_period(hours, period_start=NOV, period_end=DEC)


# ---- an independent reference, exact in fractions, written straight from SPEC section 5 ----


def reference(hours: list[RatingHour]) -> tuple[dict[str, F], dict[tuple[str, str, str, int], F]]:
    """C per pool, and the unrounded amount per (account, pool, kind, version) for lines 1-4 and 6."""
    cost: dict[str, F] = defaultdict(F)
    amounts: dict[tuple[str, str, str, int], F] = defaultdict(F)
    for h in hours:
        if not h.gpus:
            continue
        pricing = h.policy.pricing
        c = F(0)
        for m in h.models:
            p = pricing.gpu_models[m.model]
            kwh = F(m.measured_kwh) + (m.gpus - m.measured_gpus) * F(p.default_power_watts) / 1000
            c += m.gpus * (F(p.purchase_price) / (F(p.depreciation_years) * 8760) + F(p.hosting_per_hour))
            c += kwh * F(pricing.pue) * F(pricing.energy_price_per_kwh)
        cost[h.pool] += c
        s = F(h.capacity_gpu_seconds)
        rate = c / s
        mult = F(pricing.dark_time_multiplier)
        pool = h.policy.pool(h.pool)
        f = F(pool.reserved_fraction)
        weights = {t: F(w) for t, w in pool.reservations.items() if w > 0}
        covered = {}
        for t, w in weights.items():
            share = w / sum(weights.values())
            if f:
                amounts[(t, h.pool, LineKind.RESERVED_FEE, h.policy_version)] += f * c * share
            covered[t] = f * s * share
        used: dict[str, F] = defaultdict(F)
        for r in h.usage:
            gs = F(r.gpu_seconds)
            price = rate * (mult if r.dark else 1)
            if r.klass == "inference":
                used[r.tenant] += gs
            elif r.klass == "unallocated":
                amounts[(PLATFORM, h.pool, LineKind.UNALLOCATED, h.policy_version)] += gs * price
            else:
                kind = LineKind.USAGE_DARK if r.dark else LineKind.USAGE_BUSY
                amounts[(r.tenant, h.pool, kind, h.policy_version)] += gs * price
        for t, gs in used.items():
            amounts[(t, h.pool, LineKind.INFERENCE_OVERAGE, h.policy_version)] += max(F(0), gs - covered.get(t, F(0))) * rate
        penalty = F(next(x for x in h.policy.sla if x.service == f"svc-{h.pool}").penalty_per_breach_minute)
        for b in h.breaches:
            total = sum(F(gs) for _, gs in b.colocated)
            for t, gs in b.colocated:
                if gs > 0:
                    account = PLATFORM if t == "unallocated" else t
                    amounts[(account, h.pool, LineKind.SLA_PENALTY, h.policy_version)] += penalty * F(gs) / total
    return cost, amounts


def round_cents(x: F) -> D:
    return (D(x.numerator) / D(x.denominator)).quantize(CENT)


# ---- properties ----


@SETTINGS
@given(scenarios())
def test_conservation_transfers_and_reference(hours):
    result = rate(hours)
    cost, expected = reference(hours)
    charge_and_balance = CHARGE_KINDS + BALANCE_KINDS

    assert set(result.cost_by_pool) == set(cost)
    for pool, c in cost.items():
        assert abs(result.cost_by_pool[pool] - round_cents(c)) <= CENT  # a tie may round either way once
        in_pool = [x for x in result.lines if x.pool == pool and x.kind in charge_and_balance]
        # conservation: charges + platform balance = C, to the cent, for the pool over the period
        assert sum(x.amount for x in in_pool) == result.cost_by_pool[pool]
        (rounding,) = [x for x in in_pool if x.kind == LineKind.ROUNDING]
        assert abs(rounding.amount) <= CENT * len(in_pool)

    # transfers net to zero per pool, service and version, and every breach minute is accounted for
    nets: dict[tuple, D] = defaultdict(D)
    for x in result.lines:
        if x.kind in TRANSFER_KINDS:
            nets[(x.pool, x.service, x.policy_version)] += x.amount
    assert all(v == 0 for v in nets.values())
    minutes = sum(len(h.breaches) for h in hours if h.gpus)
    credited = sum(x.quantity for x in result.lines if x.kind == LineKind.SLA_CREDIT)
    assert credited + len(result.unattributed) == minutes

    # every tenant line is the exact SPEC formula, rounded once
    got: dict[tuple, D] = defaultdict(D)
    for x in result.lines:
        if x.kind in CHARGE_KINDS or x.kind == LineKind.SLA_PENALTY:
            got[(x.account, x.pool, x.kind, x.policy_version)] += x.amount
    assert set(got) == set(expected)
    for key, amount in expected.items():
        assert abs(F(got[key]) - amount) <= F(1, 200), key


@SETTINGS
@given(scenarios(), st.integers(0, 2**32))
def test_result_does_not_depend_on_input_order(hours, seed: int):
    rnd = random.Random(seed)

    def shuffled(h: RatingHour) -> RatingHour:
        usage, models = list(h.usage), list(h.models)
        rnd.shuffle(usage)
        rnd.shuffle(models)
        breaches = [replace(b, colocated=tuple(rnd.sample(b.colocated, len(b.colocated)))) for b in h.breaches]
        rnd.shuffle(breaches)
        return replace(h, usage=tuple(usage), models=tuple(models), breaches=tuple(breaches))

    other = [shuffled(h) for h in hours]
    rnd.shuffle(other)
    a, b = rate(hours), rate(iter(other))  # any iterable, consumed once
    assert a.lines == b.lines
    assert a.usage == b.usage
    assert a.unattributed == b.unattributed
    assert a.cost_by_pool == b.cost_by_pool


@dataclass(frozen=True)
class Growth:
    hour: int  # index into the scenario's hours
    row: int  # index into that hour's usage
    share: int  # percent of the remaining headroom added


@SETTINGS
@given(scenarios(), st.builds(Growth, st.integers(0, 10_000), st.integers(0, 10_000), st.integers(1, 100)))
def test_more_usage_never_lowers_a_tenants_bill(hours, growth: Growth):
    candidates = [i for i, h in enumerate(hours) if h.usage and h.gpus]
    if not candidates:
        return  # nothing to grow; hypothesis has plenty of other examples
    i = candidates[growth.hour % len(candidates)]
    h = hours[i]
    j = growth.row % len(h.usage)
    headroom = h.capacity_gpu_seconds - sum(r.gpu_seconds for r in h.usage)
    extra = (headroom * growth.share / 100).quantize(MICRO, rounding=ROUND_DOWN) or (MICRO if headroom >= MICRO else D(0))
    usage = list(h.usage)
    usage[j] = replace(usage[j], gpu_seconds=usage[j].gpu_seconds + extra)
    grown = hours[:i] + [replace(h, usage=tuple(usage))] + hours[i + 1 :]

    def bills(result: RatingResult) -> dict[str, D]:
        out: dict[str, D] = defaultdict(D)
        for x in result.lines:
            if x.account != PLATFORM:
                out[x.account] += x.amount
        return out

    before, after = bills(rate(hours)), bills(rate(grown))
    for tenant in set(before) | set(after):
        assert after[tenant] >= before[tenant], tenant


@settings(max_examples=5, deadline=None)
@given(st.data())
def test_many_hours_several_pools(data):
    # a denser month slice: 48 hours x 3 pools under one version, same invariants
    pools = ("p0", "p1", "p2")
    doc = data.draw(policies(pools))
    hours = [data.draw(pool_hours(NOV + HOUR * i, p, 7, doc)) for i in range(48) for p in pools]
    result = rate(hours)
    for pool in {h.pool for h in hours if h.gpus}:
        kinds = CHARGE_KINDS + BALANCE_KINDS
        assert sum(x.amount for x in result.lines if x.pool == pool and x.kind in kinds) == result.cost_by_pool[pool]
    assert result.lines == sorted(result.lines, key=lambda x: (x.account, x.pool, x.kind, x.klass, x.service, x.policy_version, x.charge_start))
