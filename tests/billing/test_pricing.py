"""Cost per GPU-hour (SPEC section 5): capex share, hosting, and energy measured or at default watts."""

from __future__ import annotations

from decimal import Decimal as D

import pytest

from app.billing.pricing import (
    MissingPrice,
    PriceSheet,
    cents,
    describe_hours,
    fixed_hour_cost,
    gpu_hour_cost,
    model_hour_kwh,
    pool_hour_cost,
)
from app.metrics.types import ModelEnergy
from app.policy.document import GpuPrice, Pricing

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


def test_gpu_hour_cost_default_watts_as_in_the_worked_example():
    # 1.00 capex + 0.20 hosting + 0.4 kWh x 1.25 x 0.20
    assert gpu_hour_cost(SPEC_A100, SPEC_PRICING) == D("1.30")


def test_gpu_hour_cost_with_measured_energy():
    # the counter said 0.3 kWh: 1.20 + 0.3 x 1.25 x 0.20 = 1.275
    assert gpu_hour_cost(SPEC_A100, SPEC_PRICING, kwh=D("0.3")) == D("1.275")
    assert gpu_hour_cost(SPEC_A100, SPEC_PRICING, kwh=D(0)) == D("1.20")


def test_model_kwh_mixes_measured_gpus_and_default_watts():
    # 3 GPUs, 2 measured at 0.5 kWh together, the third at 400 W for the hour
    assert model_hour_kwh(ModelEnergy(A100, 3, 2, D("0.5")), SPEC_A100) == D("0.9")
    assert model_hour_kwh(ModelEnergy(A100, 3, 3, D("0.5")), SPEC_A100) == D("0.5")
    assert model_hour_kwh(ModelEnergy(A100, 3, 0, D(0)), SPEC_A100) == D("1.2")


def test_pool_hour_cost_counter_energy_versus_default_watts():
    measured = ModelEnergy(A100, 2, 2, D("0.8"))  # the worked example: 0.4 kWh each, from the counter
    partly = ModelEnergy(A100, 2, 1, D("0.3"))  # one GPU read 0.3 kWh, the other at 400 W
    assert pool_hour_cost([measured], SPEC_PRICING) == D("2.60")
    assert pool_hour_cost([partly], SPEC_PRICING) == D("2.575")  # 2 x 1.20 + 0.7 x 0.25
    # a pool mixing models sums them: + 4 L4s at 0.30 + 4 x 0.072 kWh x 0.25
    assert pool_hour_cost([measured, ModelEnergy(L4, 4, 0, D(0))], SPEC_PRICING) == D("2.60") + D("1.20") + D("0.072")


def test_pue_and_energy_price_scale_only_the_energy():
    pricier = SPEC_PRICING.model_copy(update={"pue": D("1.5"), "energy_price_per_kwh": D("0.40")})
    assert gpu_hour_cost(SPEC_A100, pricier) == D("1.20") + D("0.4") * D("1.5") * D("0.40")


def test_price_sheet_matches_gpu_hour_cost():
    sheet = PriceSheet.of(SPEC_PRICING)
    assert sheet.model_cost(ModelEnergy(A100, 1, 0, D(0))) == gpu_hour_cost(SPEC_A100, SPEC_PRICING)
    assert sheet.model_cost(ModelEnergy(A100, 1, 1, D("0.3"))) == gpu_hour_cost(SPEC_A100, SPEC_PRICING, kwh=D("0.3"))


def test_pool_hour_cost_names_every_unpriced_model():
    with pytest.raises(MissingPrice) as err:
        pool_hour_cost([ModelEnergy("RTX 4090", 1, 0, D(0)), ModelEnergy(A100, 1, 0, D(0)), ModelEnergy("L40S", 1, 0, D(0))], SPEC_PRICING, hour=NOV)
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
