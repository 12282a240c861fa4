"""Lines worth exactly half a cent are rounded half-even, once, on both rating paths (SPEC 5.7; issue 24 item 4).

An H200 at its default watts costs exactly 343/60 per GPU-hour (140379 / (3 x 8760) + 0.20 + 0.7 kWh x 1.25 x
0.20), so its rate is 343/216000 per GPU-second: 1080 x j GPU-seconds at that rate are worth 1.715 x j, a half
cent for every odd j (dark time at 0.6: 1800 x j; above a 30 % cover of one tenant: 1080 x j over it).
Hypothesis spreads such a total over many hours of a pool of N GPUs, with other tenants' use beside it, and
the line must be the exact value rounded half-even (1.715 -> 1.72, 5.145 -> 5.14, 204.085 -> 204.08): any
quantisation of C or the rate before the sum moves some of these a cent. Conservation holds to the cent.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal as D
from fractions import Fraction as F

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from app.billing import rating_sql
from app.billing.rating import rate_period
from app.billing.rating_sql import rate_stored
from app.billing.types import BALANCE_KINDS, CHARGE_KINDS, LineKind, RatingHour, RatingResult
from app.core.timeutil import from_epoch
from app.metrics.types import ModelEnergy, UsageRow
from app.policy.document import PolicyDocument
from tests.billing.test_rating_properties import HOUR, NOV
from tests.billing.test_rating_sql import _no_fallback, _store

H200 = "NVIDIA H200"
DEC = NOV + 30 * 24 * HOUR
CENT = D("0.01")
POOL = "h200"
RATE = F(343, 60 * 3600)  # per GPU-second
DARK = F(6, 10)
# the half-cent line's kind -> (its tenant, class, dark, GPU-seconds worth 343/200 = 1.715 a unit of j)
KINDS = {
    LineKind.USAGE_BUSY: ("t0", "training", False, 1080),
    LineKind.USAGE_DARK: ("t0", "training", True, 1800),
    LineKind.INFERENCE_OVERAGE: ("i0", "inference", False, 1080),
}

SETTINGS = settings(max_examples=40, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture])


def half_even(value: F) -> D:
    """To the cent, half-even, from the exact value (written here, not taken from the code under test)."""
    whole, rest = divmod(value * 100, 1)
    if rest > F(1, 2) or (rest == F(1, 2) and whole % 2):
        whole += 1
    return D(int(whole)) / 100


def policy(reserved: str) -> PolicyDocument:
    tenants = [{"name": t, "department": "d", "namespaces": [f"ns-{t}"], "class": k}
               for t, k in (("i0", "inference"), ("t0", "training"), ("t1", "training"))]
    return PolicyDocument.model_validate({
        "tenants": tenants,
        "pools": [{"name": POOL, "nodes": ["h200-n"], "reserved_fraction": reserved, "reservations": {"i0": 1}}],
        "pricing": {"currency": "USD", "energy_price_per_kwh": "0.20", "pue": "1.25", "dark_time_multiplier": "0.6",
                    "gpu_models": {H200: {"purchase_price": 140379, "depreciation_years": 3, "hosting_per_hour": "0.20",
                                          "default_power_watts": 700}}},
    })


@dataclass(frozen=True)
class Case:
    kind: LineKind
    j: int  # odd: the line is worth 1.715 x j exactly
    gpus: int
    hours: tuple[RatingHour, ...]


@st.composite
def cases(draw) -> Case:
    kind = draw(st.sampled_from(sorted(KINDS)))
    tenant, klass, dark, unit = KINDS[kind]
    gpus = draw(st.integers(1, 4))
    capacity = gpus * HOUR
    cover = capacity * 3 // 10 if kind == LineKind.INFERENCE_OVERAGE else 0  # the 30 % reserve: all i0's
    room = capacity - cover  # micro-GPU-seconds a line may take in an hour, above the cover
    j = 2 * draw(st.integers(0, 150)) + 1
    n = max(draw(st.integers(1, 60)), -(-j * unit // room))  # enough hours to hold it
    doc = policy("0.30" if kind == LineKind.INFERENCE_OVERAGE else "0")
    # split j x unit GPU-seconds (in micro-GPU-seconds) over the n hours, at most `room` each
    left = j * unit * 10**6
    parts = []
    for i in range(n):
        most = min(left, room * 10**6)
        least = max(0, left - (n - 1 - i) * room * 10**6)
        share = most if i == n - 1 else draw(st.integers(least, most))
        parts.append(share)
        left -= share
    assert left == 0
    hours = []
    for i, micro in enumerate(parts):
        gs = D(micro).scaleb(-6)
        rows = [UsageRow(POOL, tenant, klass, dark, gs + cover if klass == "inference" else gs, 0.0, 0)]
        other = draw(st.integers(0, (capacity * 10**6 - micro - cover * 10**6) // 10**3))  # t1 beside it, in ms
        if other:
            rows.append(UsageRow(POOL, "t1", "training", not dark, D(other).scaleb(-3), 0.0, 0))
        hours.append(RatingHour(NOV + 2 * HOUR * i, POOL, 1, doc, gpus, D(capacity), (ModelEnergy(H200, gpus, 0, D(0)),),
                                tuple(rows), ()))
    return Case(kind, j, gpus, tuple(hours))


def expected(case: Case) -> D:
    value = F(343, 200) * case.j
    assert (value * 200).denominator == 1 and (value * 200).numerator % 2 == 1  # exactly a half cent
    return half_even(value)


def check(case: Case, result: RatingResult) -> None:
    tenant = KINDS[case.kind][0]
    (line,) = [x for x in result.lines if x.account == tenant and x.kind == case.kind]
    assert line.amount == expected(case), (case.kind, case.j)
    c = F(343, 60) * case.gpus * len(case.hours)
    assert result.cost_by_pool[POOL] == half_even(c)
    assert sum(x.amount for x in result.lines if x.kind in CHARGE_KINDS + BALANCE_KINDS) == result.cost_by_pool[POOL]


def test_the_readme_example_and_both_directions():
    from app.billing.rating import round_half_even

    assert [half_even(F(343, 200) * j) for j in (1, 3, 119)] == [D("1.72"), D("5.14"), D("204.08")]
    assert [round_half_even(F(343, 200) * j, CENT) for j in (1, 3, 119)] == [D("1.72"), D("5.14"), D("204.08")]
    assert round_half_even(F(-1, 200), CENT) == D("0.00") and round_half_even(F(-3, 200), CENT) == D("-0.02")
    assert round_half_even(F(1, 3), D("1e-20")) == D("0.33333333333333333333")


@SETTINGS
@given(cases())
@example(Case(LineKind.USAGE_BUSY, 119, 1, tuple(
    RatingHour(NOV + HOUR * i, POOL, 1, policy("0"), 1, D(HOUR), (ModelEnergy(H200, 1, 0, D(0)),),
               (UsageRow(POOL, "t0", "training", False, D(3570), 0.0, 0),), ()) for i in range(36))))
def test_a_half_cent_line_rounds_half_even_on_the_reference_path(case):
    check(case, rate_period(case.hours, period_start=NOV, period_end=DEC))


@SETTINGS
@given(case=cases())
def test_a_half_cent_line_rounds_half_even_in_sql(session, monkeypatch, case):
    nested = session.begin_nested()
    try:
        doc = case.hours[0].policy
        _store(session, (doc, policy("0.5"), list(case.hours), {POOL: "east"}, []))
        with monkeypatch.context() as m:
            m.setattr(rating_sql, "rate_period", _no_fallback)
            got = rate_stored(session=session, start=from_epoch(NOV), end=from_epoch(DEC))
        check(case, got)
    finally:
        nested.rollback()
