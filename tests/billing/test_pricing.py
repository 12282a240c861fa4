"""Cost per GPU-hour (SPEC section 5): capex share, hosting, and energy measured or at default watts."""

from __future__ import annotations

from decimal import Decimal as D

import pytest

from app.billing.pricing import MissingPrice, PriceSheet, cents, describe_hours, fixed_hour_cost
from app.billing.rating import pool_costs, rate_period
from app.billing.types import RatingHour
from app.metrics.types import ModelEnergy
from app.policy.document import GpuPrice, Pricing
from tests.support.billing import POOL, policy_doc

A100 = "NVIDIA A100-SXM4-80GB"
L4 = "NVIDIA L4"
NOV = 1_793_491_200  # 2026-11-01T00:00Z

SPEC_A100 = GpuPrice(purchase_price=D("26280"), depreciation_years=D(3), hosting_per_hour=D("0.20"), default_power_watts=D(400))
SPEC_PRICING = Pricing(
    currency="USD",
    gpu_models={A100: SPEC_A100, L4: GpuPrice(purchase_price=D("8760"), depreciation_years=D(4), hosting_per_hour=D("0.05"), default_power_watts=D(72))},
    energy_price_per_kwh=D("0.20"),
    pue=D("1.25"),
)


def test_capex_share_is_price_over_depreciation_hours():
    assert fixed_hour_cost(SPEC_A100) == D("1.20")  # 26280 / (3 x 8760) + 0.20
    assert fixed_hour_cost(SPEC_PRICING.gpu_models[L4]) == D("0.30")  # 8760 / (4 x 8760) + 0.05


def one_gpu(kwh: D | None = None) -> ModelEnergy:
    """One A100 for one hour: measured at `kwh`, or None for default watts."""
    return ModelEnergy(A100, 1, 0, D(0)) if kwh is None else ModelEnergy(A100, 1, 1, kwh)


def test_gpu_hour_at_default_watts_as_in_the_worked_example():
    # 1.00 capex + 0.20 hosting + 0.4 kWh x 1.25 x 0.20
    assert PriceSheet.of(SPEC_PRICING).model_cost(one_gpu()) == D("1.30")


def test_gpu_hour_with_measured_energy():
    sheet = PriceSheet.of(SPEC_PRICING)
    # the counter said 0.3 kWh: 1.20 + 0.3 x 1.25 x 0.20 = 1.275
    assert sheet.model_cost(one_gpu(D("0.3"))) == D("1.275")
    assert sheet.model_cost(one_gpu(D(0))) == D("1.20")


def test_model_energy_mixes_measured_gpus_and_default_watts():
    sheet = PriceSheet.of(SPEC_PRICING)
    # 3 GPUs, 2 measured at 0.5 kWh together, the third at 400 W: 3 x 1.20 + (0.5 + 0.4) x 0.25
    assert sheet.model_cost(ModelEnergy(A100, 3, 2, D("0.5"))) == D("3.60") + D("0.9") * D("0.25")
    assert sheet.model_cost(ModelEnergy(A100, 3, 3, D("0.5"))) == D("3.60") + D("0.5") * D("0.25")
    assert sheet.model_cost(ModelEnergy(A100, 3, 0, D(0))) == D("3.60") + D("1.2") * D("0.25")


def test_pool_cost_counter_energy_versus_default_watts():
    sheet = PriceSheet.of(SPEC_PRICING)
    measured = ModelEnergy(A100, 2, 2, D("0.8"))  # the worked example: 0.4 kWh each, from the counter
    partly = ModelEnergy(A100, 2, 1, D("0.3"))  # one GPU read 0.3 kWh, the other at 400 W
    assert pool_costs([("p", sheet, [measured])], currency="USD") == {"p": D("2.60")}
    assert pool_costs([("p", sheet, [partly])], currency="USD") == {"p": D("2.58")}  # 2 x 1.20 + 0.7 x 0.25 = 2.575, half-even
    # a pool mixing models sums them: + 4 L4s at 0.30 + 4 x 0.072 kWh x 0.25
    mixed = [measured, ModelEnergy(L4, 4, 0, D(0))]
    assert pool_costs([("p", sheet, mixed)], currency="USD") == {"p": D("2.60") + D("1.20") + D("0.07")}


def test_pue_and_energy_price_scale_only_the_energy():
    pricier = SPEC_PRICING.model_copy(update={"pue": D("1.5"), "energy_price_per_kwh": D("0.40")})
    assert PriceSheet.of(pricier).model_cost(one_gpu()) == D("1.20") + D("0.4") * D("1.5") * D("0.40")


def test_unpriced_models_are_named_every_one():
    hour = RatingHour(hour=NOV, pool=POOL, policy_version=1, policy=policy_doc(), gpus=3, capacity_gpu_seconds=D(3 * 3600),
                      models=(ModelEnergy("RTX 4090", 1, 0, D(0)), ModelEnergy(A100, 1, 0, D(0)), ModelEnergy("L40S", 1, 0, D(0))),
                      usage=())
    with pytest.raises(MissingPrice) as err:
        rate_period([hour], period_start=NOV, period_end=NOV + 3600)
    assert err.value.models == ["L40S", "RTX 4090"]
    assert err.value.hours == [NOV]
    assert err.value.status == 422
    assert "'L40S'" in err.value.detail and "'RTX 4090'" in err.value.detail
    assert err.value.problem()["errors"][0]["path"] == "pricing.gpu_models.L40S"


def test_describe_hours_folds_runs():
    hours = [NOV + 3600 * i for i in (5, 0, 1, 2, 9, 1)]
    assert describe_hours(hours) == "2026-11-01T00:00Z..2026-11-01T02:00Z, 2026-11-01T05:00Z, 2026-11-01T09:00Z"
    assert describe_hours([]) == ""


@pytest.mark.parametrize("currency, quantum", [("USD", D("0.01")), ("EUR", D("0.01")), ("CNY", D("0.01")), ("JPY", D(1)), ("KRW", D(1))])
def test_currency_rounding_quantum(currency, quantum):
    assert cents(currency) == quantum
