"""SPEC section 5's worked example to the cent, and one worked example per rating formula."""

from __future__ import annotations

from decimal import Decimal as D

import pytest

from app.billing.rating import CurrencyMismatch, MissingPrice, RatingInputError, rate_period
from app.billing.types import BALANCE_KINDS, CHARGE_KINDS, PLATFORM, TRANSFER_KINDS, LineKind, RatingHour
from app.metrics.types import BreachMinute, ModelEnergy, UsageRow
from app.policy.document import PolicyDocument

NOV = 1_793_491_200  # 2026-11-01T00:00Z
DEC = 1_796_083_200  # 2026-12-01T00:00Z
HOUR = 3600
POOL = "mixed-a100"
A100 = "NVIDIA A100-SXM4-80GB"


def policy(
    *,
    reserved_fraction: str = "0.30",
    reservations: dict[str, str] | None = None,
    purchase_price: str = "26280",
    hosting: str = "0.20",
    energy_price: str = "0.20",
    dark_multiplier: str = "0.6",
    penalty: str = "0.50",
    currency: str = "USD",
    pools: tuple[str, ...] = (POOL,),
) -> PolicyDocument:
    """SPEC section 3's document, trimmed to what rating reads; keyword overrides per test."""
    return PolicyDocument.model_validate(
        {
            "tenants": [
                {"name": "search", "department": "consumer", "namespaces": ["search-prod"], "class": "inference"},
                {"name": "chat", "department": "consumer", "namespaces": ["chat-prod"], "class": "inference"},
                {"name": "vision", "department": "research", "namespaces": ["vision-train"], "class": "training"},
                {"name": "etl", "department": "data", "namespaces": ["data-prep"], "class": "preprocessing"},
            ],
            "pools": [
                {
                    "name": name,
                    "nodes": [f"{name}-01"],
                    "reserved_fraction": reserved_fraction,
                    "reservations": {"search": "1"} if reservations is None else reservations,
                }
                for name in pools
            ],
            "pricing": {
                "currency": currency,
                "gpu_models": {
                    A100: {"purchase_price": purchase_price, "depreciation_years": 3, "hosting_per_hour": hosting, "default_power_watts": 400}
                },
                "energy_price_per_kwh": energy_price,
                "pue": "1.25",
                "dark_time_multiplier": dark_multiplier,
            },
            "sla": [
                {
                    "service": "search-chat",
                    "tenant": "search",
                    "pool": name,
                    "requests": 'vllm:request_success_total{namespace="search-prod"}',
                    "latency_histogram": 'vllm:e2e_request_latency_seconds_bucket{namespace="search-prod"}',
                    "p99_ms": 300,
                    "penalty_per_breach_minute": penalty,
                }
                for name in pools
            ],
        }
    )


def gpu_hours(tenant: str, klass: str, hours: str, *, dark: bool = False, pool: str = POOL, samples: int = 0, activity: float = 0.0) -> UsageRow:
    return UsageRow(pool, tenant, klass, dark, D(hours) * HOUR, activity_sum=activity, activity_samples=samples)


def breach(minute: int, *colocated: tuple[str, str], hour: int = NOV, pool: str = POOL) -> BreachMinute:
    return BreachMinute("search-chat", "search", pool, hour + 60 * minute, D("450"), tuple((t, D(gs)) for t, gs in colocated))


def pool_hour(
    usage: tuple[UsageRow, ...] = (),
    breaches: tuple[BreachMinute, ...] = (),
    *,
    doc: PolicyDocument | None = None,
    version: int = 1,
    hour: int = NOV,
    pool: str = POOL,
    gpus: int = 2,
    models: tuple[ModelEnergy, ...] | None = None,
) -> RatingHour:
    """Two A100s that drew 0.4 kWh each, as in the worked example, unless told otherwise."""
    models = (ModelEnergy(A100, gpus, gpus, D("0.4") * gpus),) if models is None else models
    return RatingHour(hour, pool, version, doc or policy(), gpus, D(gpus * HOUR), models, usage, breaches)


def rate(*hours: RatingHour):
    return rate_period(hours, period_start=NOV, period_end=DEC)


def table(result, *, with_quantity: bool = True) -> dict[tuple[str, str, str], tuple[D, D] | D]:
    """(account, kind, service) -> (quantity, amount) for single-pool, single-version results."""
    out = {}
    for line in result.lines:
        key = (line.account, line.kind, line.service)
        assert key not in out, f"unexpected second line {key}"
        out[key] = (line.quantity, line.amount) if with_quantity else line.amount
    return out


def pool_total(result, pool: str = POOL) -> D:
    """Charges plus platform balance of one pool: must equal C to the cent."""
    kinds = CHARGE_KINDS + BALANCE_KINDS
    return sum((x.amount for x in result.lines if x.pool == pool and x.kind in kinds), D(0))


# ---- SPEC section 5: the worked example ----


def worked_example() -> RatingHour:
    usage = (
        gpu_hours("search", "inference", "0.5"),
        gpu_hours("vision", "training", "0.7"),
        gpu_hours("vision", "training", "0.5", dark=True),
        gpu_hours("etl", "preprocessing", "0.1"),
    )
    return pool_hour(usage, (breach(10, ("vision", "60")), breach(11, ("vision", "60"))))


def test_worked_example_every_line_to_the_cent():
    result = rate(worked_example())
    assert result.currency == "USD"
    assert result.cost_by_pool == {POOL: D("2.60")}
    assert table(result) == {
        ("search", LineKind.RESERVED_FEE, ""): (D("0.600000"), D("0.78")),  # covers 0.3 x 2 GPU-h
        ("search", LineKind.INFERENCE_OVERAGE, ""): (D("0.000000"), D("0.00")),
        ("vision", LineKind.USAGE_BUSY, ""): (D("0.700000"), D("0.91")),
        ("vision", LineKind.USAGE_DARK, ""): (D("0.500000"), D("0.39")),
        ("etl", LineKind.USAGE_BUSY, ""): (D("0.100000"), D("0.13")),
        ("vision", LineKind.SLA_PENALTY, "search-chat"): (D("2.000000"), D("1.00")),
        ("search", LineKind.SLA_CREDIT, "search-chat"): (D("2"), D("-1.00")),
        (PLATFORM, LineKind.IDLE, ""): (D("0.200000"), D("0.26")),
        (PLATFORM, LineKind.DARK_DISCOUNT, ""): (D("0.500000"), D("0.26")),
        (PLATFORM, LineKind.RESERVED_UNUSED, ""): (D("0.100000"), D("-0.13")),
        (PLATFORM, LineKind.ROUNDING, ""): (D("0.000000"), D("0.00")),
    }
    platform = sum((x.amount for x in result.lines if x.kind in BALANCE_KINDS), D(0))
    assert platform == D("0.39")
    assert pool_total(result) == D("2.60")
    assert result.unattributed == []


def test_worked_example_line_metadata():
    result = rate(worked_example())
    for line in result.lines:
        assert (line.pool, line.policy_version, line.charge_start, line.charge_end) == (POOL, 1, NOV, NOV + HOUR)
        assert line.unit == ("breach-minute" if line.kind in TRANSFER_KINDS else "GPU-hour")
    klass = {(x.account, x.kind): x.klass for x in result.lines}
    assert klass[("search", LineKind.RESERVED_FEE)] == "inference"
    assert klass[("vision", LineKind.USAGE_DARK)] == "training"
    assert klass[("etl", LineKind.USAGE_BUSY)] == "preprocessing"
    assert klass[("vision", LineKind.SLA_PENALTY)] == "training"
    assert klass[(PLATFORM, LineKind.IDLE)] == ""
    assert [x.kind for x in result.lines if x.account == "search"] == sorted(x.kind for x in result.lines if x.account == "search")


def test_worked_example_usage_report():
    usage = (
        gpu_hours("search", "inference", "0.5", samples=60, activity=45.0),
        gpu_hours("vision", "training", "0.7", samples=80, activity=72.0),
        gpu_hours("vision", "training", "0.5", dark=True, samples=20, activity=8.0),
        gpu_hours("etl", "preprocessing", "0.1"),
    )
    by_tenant = {u.tenant: u for u in rate(pool_hour(usage)).usage}
    assert (by_tenant["vision"].busy_gpu_hours, by_tenant["vision"].dark_gpu_hours) == (D("0.7"), D("0.5"))
    assert by_tenant["vision"].efficiency == pytest.approx(0.8)  # (72 + 8) / (80 + 20)
    assert by_tenant["search"].efficiency == pytest.approx(0.75)
    assert by_tenant["etl"].efficiency is None  # no samples: unmeasured, not zero
    assert (by_tenant["etl"].pool, by_tenant["etl"].klass) == (POOL, "preprocessing")


# ---- one worked example per formula ----


def test_inference_overage_above_the_covered_share():
    # search uses 0.9 GPU-h against 0.6 covered: 0.3 GPU-h x 1.30 = 0.39 overage, nothing unused
    result = rate(pool_hour((gpu_hours("search", "inference", "0.9"),)))
    lines = table(result)
    assert lines[("search", LineKind.RESERVED_FEE, "")] == (D("0.6"), D("0.78"))
    assert lines[("search", LineKind.INFERENCE_OVERAGE, "")] == (D("0.3"), D("0.39"))
    assert (PLATFORM, LineKind.RESERVED_UNUSED, "") not in lines
    assert lines[(PLATFORM, LineKind.IDLE, "")] == (D("1.1"), D("1.43"))
    assert pool_total(result) == D("2.60")


def test_inference_without_reservation_is_all_overage():
    # chat holds no reservation in this pool: every GPU-second it uses is overage
    result = rate(pool_hour((gpu_hours("chat", "inference", "0.2"),)))
    lines = table(result)
    assert lines[("chat", LineKind.INFERENCE_OVERAGE, "")] == (D("0.2"), D("0.26"))
    assert ("chat", LineKind.RESERVED_FEE, "") not in lines
    # search's reservation is paid but unused in full: 0.6 GPU-h x 1.30
    assert lines[(PLATFORM, LineKind.RESERVED_UNUSED, "")] == (D("0.6"), D("-0.78"))
    assert pool_total(result) == D("2.60")


def test_unallocated_usage_billed_to_the_platform_like_training():
    usage = (gpu_hours("ns-orphan", "unallocated", "0.5"), gpu_hours("ns-orphan", "unallocated", "0.5", dark=True))
    result = rate(pool_hour(usage, doc=policy(reservations={})))
    lines = table(result)
    assert lines[(PLATFORM, LineKind.UNALLOCATED, "")] == (D("1.0"), D("1.04"))  # 0.65 busy + 0.39 dark
    assert lines[(PLATFORM, LineKind.DARK_DISCOUNT, "")] == (D("0.5"), D("0.26"))
    assert lines[(PLATFORM, LineKind.IDLE, "")] == (D("1.0"), D("1.30"))
    assert not [x for x in result.lines if x.kind == LineKind.RESERVED_FEE]  # no reservations: no fee
    assert [(u.tenant, u.klass) for u in result.usage] == [("ns-orphan", "unallocated")]
    assert pool_total(result) == D("2.60")


def test_unattributed_breach_moves_no_money():
    result = rate(pool_hour((gpu_hours("search", "inference", "0.5"),), (breach(5), breach(6, ("vision", "0")))))
    assert [(u.service, u.pool, u.minute_end, u.penalty) for u in result.unattributed] == [
        ("search-chat", POOL, NOV + 300, D("0.50")),
        ("search-chat", POOL, NOV + 360, D("0.50")),
    ]
    assert not [x for x in result.lines if x.kind in TRANSFER_KINDS]


def test_penalty_split_by_colocated_gpu_seconds():
    # one breach minute while vision had 40 GPU-s and etl 20: the 0.50 penalty splits 2:1
    result = rate(pool_hour(breaches=(breach(1, ("vision", "40"), ("etl", "20")),)))
    lines = table(result)
    assert lines[("vision", LineKind.SLA_PENALTY, "search-chat")] == (D("0.666667"), D("0.33"))
    assert lines[("etl", LineKind.SLA_PENALTY, "search-chat")] == (D("0.333333"), D("0.17"))
    assert lines[("search", LineKind.SLA_CREDIT, "search-chat")] == (D("1"), D("-0.50"))
    assert pool_total(result) == D("2.60")  # transfers do not touch conservation


def test_penalty_credit_is_minus_the_rounded_penalties():
    # split three ways each share rounds up (0.1667 -> 0.17): the credit follows the rounded lines, 0.51
    result = rate(pool_hour(breaches=(breach(2, ("vision", "10"), ("etl", "10"), ("unallocated", "10")),)))
    lines = table(result)
    for account in ("vision", "etl", PLATFORM):  # the platform pays for unallocated use, penalties included
        assert lines[(account, LineKind.SLA_PENALTY, "search-chat")] == (D("0.333333"), D("0.17"))
    assert lines[("search", LineKind.SLA_CREDIT, "search-chat")] == (D("1"), D("-0.51"))
    assert sum(x.amount for x in result.lines if x.kind in TRANSFER_KINDS) == 0


def test_reservation_weights_two_to_one():
    # weights 2:1 (sum 3, not 1): fee 0.78 splits 0.52 / 0.26; covers 0.4 and 0.2 GPU-h
    doc = policy(reservations={"search": "2", "chat": "1"})
    result = rate(pool_hour((gpu_hours("search", "inference", "0.5"),), doc=doc))
    lines = table(result)
    assert lines[("search", LineKind.RESERVED_FEE, "")] == (D("0.4"), D("0.52"))
    assert lines[("chat", LineKind.RESERVED_FEE, "")] == (D("0.2"), D("0.26"))
    assert lines[("search", LineKind.INFERENCE_OVERAGE, "")] == (D("0.1"), D("0.13"))
    assert ("chat", LineKind.INFERENCE_OVERAGE, "") not in lines  # no use, no overage line
    assert lines[(PLATFORM, LineKind.RESERVED_UNUSED, "")] == (D("0.2"), D("-0.26"))  # chat's unused cover
    assert pool_total(result) == D("2.60")


def test_zero_weight_reservation_pays_nothing():
    doc = policy(reservations={"search": "1", "chat": "0"})
    lines = table(rate(pool_hour(doc=doc)))
    assert ("chat", LineKind.RESERVED_FEE, "") not in lines
    assert lines[("search", LineKind.RESERVED_FEE, "")] == (D("0.6"), D("0.78"))


def test_dark_multiplier_zero_and_reserved_fraction_one():
    doc = policy(reserved_fraction="1", dark_multiplier="0")
    usage = (gpu_hours("search", "inference", "1.5"), gpu_hours("vision", "training", "0.5", dark=True))
    result = rate(pool_hour(usage, doc=doc))
    lines = table(result)
    assert lines[("search", LineKind.RESERVED_FEE, "")] == (D("2"), D("2.60"))  # the whole pool
    assert lines[("vision", LineKind.USAGE_DARK, "")] == (D("0.5"), D("0.00"))  # dark time is free
    assert lines[(PLATFORM, LineKind.DARK_DISCOUNT, "")] == (D("0.5"), D("0.65"))
    assert lines[(PLATFORM, LineKind.RESERVED_UNUSED, "")] == (D("0.5"), D("-0.65"))
    assert pool_total(result) == D("2.60")


def test_rounding_residue_is_a_visible_platform_line():
    # one GPU at 1.00/h used by three tenants for 20 minutes each: 3 x 0.33 = 0.99, residue 0.01
    doc = policy(hosting="0", energy_price="0", reserved_fraction="0", reservations={})
    models = (ModelEnergy(A100, 1, 1, D("0")),)
    usage = tuple(UsageRow(POOL, t, "training", False, D(1200)) for t in ("a", "b", "c"))
    result = rate(pool_hour(usage, doc=doc, gpus=1, models=models))
    assert result.cost_by_pool == {POOL: D("1.00")}
    lines = table(result)
    assert [lines[(t, LineKind.USAGE_BUSY, "")][1] for t in "abc"] == [D("0.33")] * 3
    assert lines[(PLATFORM, LineKind.ROUNDING, "")] == (D("0"), D("0.01"))
    assert pool_total(result) == D("1.00")


def test_lines_aggregate_over_hours_and_round_once():
    # 0.001 GPU-h of etl each hour for ten hours: 0.0013/h rounds to 0.00 alone, 0.013 -> 0.01 in sum
    hours = [pool_hour((gpu_hours("etl", "preprocessing", "0.001"),), hour=NOV + i * HOUR) for i in range(10)]
    result = rate(*hours)
    etl = [x for x in result.lines if x.account == "etl"]
    assert [(x.quantity, x.amount, x.charge_start, x.charge_end) for x in etl] == [(D("0.01"), D("0.01"), NOV, NOV + 10 * HOUR)]
    assert result.cost_by_pool == {POOL: D("26.00")}
    assert pool_total(result) == D("26.00")


def test_mid_period_price_change_splits_lines_at_the_effective_hour():
    old, new = policy(), policy(purchase_price="52560")  # capex 1.00 -> 2.00 per GPU-hour: rate 1.30 -> 2.30
    effective = NOV + 5 * HOUR
    hours = [
        pool_hour((gpu_hours("vision", "training", "1"), gpu_hours("search", "inference", "0.6")), doc=old if h < effective else new, version=1 if h < effective else 2, hour=h)
        for h in range(NOV + 2 * HOUR, NOV + 9 * HOUR, HOUR)
    ]
    result = rate(*reversed(hours))
    vision = [(x.policy_version, x.charge_start, x.charge_end, x.quantity, x.amount) for x in result.lines if x.account == "vision"]
    assert vision == [(1, NOV + 2 * HOUR, effective, D("3"), D("3.90")), (2, effective, NOV + 9 * HOUR, D("4"), D("9.20"))]
    fees = [(x.policy_version, x.charge_start, x.charge_end, x.amount) for x in result.lines if x.kind == LineKind.RESERVED_FEE]
    assert fees == [(1, NOV + 2 * HOUR, effective, D("2.34")), (2, effective, NOV + 9 * HOUR, D("5.52"))]
    rounding = [x for x in result.lines if x.kind == LineKind.ROUNDING]
    assert [(x.policy_version, x.charge_start, x.charge_end) for x in rounding] == [(2, NOV + 2 * HOUR, NOV + 9 * HOUR)]
    assert result.cost_by_pool == {POOL: D("26.20")}  # 3 x 2.60 + 4 x 4.60
    assert pool_total(result) == D("26.20")


def test_hours_without_gpus_are_skipped():
    empty = pool_hour(gpus=0, models=(), hour=NOV + HOUR)
    result = rate(worked_example(), empty)
    assert result.cost_by_pool == {POOL: D("2.60")}
    assert all(x.charge_end == NOV + HOUR for x in result.lines)


def test_zero_decimal_currency_rounds_to_whole_units():
    doc = policy(currency="JPY", purchase_price="2628000")  # 100.00 capex per GPU-hour
    result = rate(pool_hour((gpu_hours("etl", "preprocessing", "0.333"),), doc=doc))
    assert result.currency == "JPY"
    etl = next(x for x in result.lines if x.account == "etl")
    assert etl.amount == D("33")  # 0.333 x 100.30
    assert pool_total(result) == result.cost_by_pool[POOL] == D("201")  # 200.60 rounded


def test_empty_period_rates_to_nothing():
    result = rate()
    assert (result.lines, result.usage, result.unattributed, result.cost_by_pool) == ([], [], [], {})


# ---- bad input: a clear error naming what is wrong, nothing partial ----


def test_missing_price_names_every_model_and_hour():
    h100 = "NVIDIA H100 80GB HBM3"
    doc = policy(pools=(POOL, "other"))
    hours = [
        pool_hour(models=(ModelEnergy(h100, 1, 0, D(0)), ModelEnergy(A100, 1, 0, D(0))), doc=doc, hour=NOV + i * HOUR) for i in (0, 1, 2, 7)
    ]
    hours.append(pool_hour(models=(ModelEnergy("L40S", 2, 0, D(0)),), pool="other", hour=NOV, doc=doc))
    with pytest.raises(MissingPrice) as err:
        rate(*hours)
    assert err.value.status == 422
    assert err.value.missing == {"L40S": (NOV,), h100: (NOV, NOV + HOUR, NOV + 2 * HOUR, NOV + 7 * HOUR)}
    assert err.value.models == ["L40S", h100]
    text = str(err.value)
    assert h100 in text and "L40S" in text
    assert "2026-11-01T00:00Z..2026-11-01T02:00Z, 2026-11-01T07:00Z" in text
    assert [e.path for e in err.value.errors] == ["pricing.gpu_models.L40S", f'pricing.gpu_models["{h100}"]']


def test_differing_currencies_are_refused():
    with pytest.raises(CurrencyMismatch, match="USD.*EUR"):
        rate(pool_hour(), pool_hour(doc=policy(currency="EUR"), version=2, hour=NOV + HOUR))


@pytest.mark.parametrize(
    "hour, match",
    [
        (pool_hour(hour=DEC), "outside the period"),
        (pool_hour(pool="nowhere"), "not in policy version 1"),
        (pool_hour((gpu_hours("vision", "training", "0.1", pool="elsewhere"),)), "usage row of pool 'elsewhere'"),
        (pool_hour((UsageRow(POOL, "vision", "gaming", False, D(1)),)), "unknown workload class 'gaming'"),
        (pool_hour((UsageRow(POOL, "vision", "training", False, D(-1)),)), "negative GPU-seconds"),
        (pool_hour(breaches=(BreachMinute("nope", "search", POOL, NOV + 60, D(1), ()),)), "service 'nope' has no SLA"),
        (pool_hour(breaches=(breach(1, ("ghost", "5")),)), "tenant 'ghost' is not in policy"),
        (pool_hour((UsageRow(POOL, "vision", "training", False, D(1) / D(3)),)), "too many digits"),
    ],
)
def test_bad_input_is_a_422_naming_the_field(hour, match):
    with pytest.raises(RatingInputError, match=match) as err:
        rate(hour)
    assert err.value.status == 422 and err.value.errors[0].path.startswith("hours[")


def test_the_same_pool_hour_twice_is_refused():
    with pytest.raises(RatingInputError, match="given twice"):
        rate(worked_example(), worked_example())


def test_one_version_number_means_one_document():
    with pytest.raises(RatingInputError, match="two different documents given for policy version 1"):
        rate(pool_hour(), pool_hour(doc=policy(penalty="9"), hour=NOV + HOUR))
