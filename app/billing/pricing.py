"""Cost of GPU-hours (SPEC section 5): capex share + hosting + energy, in Decimal, no I/O.

`cost_per_hour = purchase_price / (depreciation_years x 8760) + hosting_per_hour + kWh x pue x energy_price`,
where the kWh of GPUs without an energy reading are priced at `default_power_watts` for the hour.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from fractions import Fraction
from math import lcm

from app.core.errors import FieldError, Invalid
from app.core.timeutil import SECONDS_PER_HOUR
from app.metrics.types import ModelEnergy
from app.policy.document import GpuPrice, Pricing
from app.policy.paths import path_of

HOURS_PER_YEAR = Decimal(8760)
WATT_HOURS_PER_KWH = Decimal(1000)
KWH_DIGITS = 9  # measured kWh as stored (Numeric(20, 9))

# ISO 4217 currencies without minor units; every other currency rounds to cents (the MONEY column
# stores two decimals, so three-decimal currencies are rounded to cents as well).
_ZERO_DECIMAL_CURRENCIES = frozenset({"BIF", "CLP", "DJF", "GNF", "ISK", "JPY", "KMF", "KRW", "PYG", "RWF", "UGX", "VND", "VUV", "XAF", "XOF", "XPF"})


def cents(currency: str) -> Decimal:
    """The quantum amounts are rounded to in `currency` (0.01, or 1 for zero-decimal currencies)."""
    return Decimal(1) if currency in _ZERO_DECIMAL_CURRENCIES else Decimal("0.01")


def _iso_hour(hour: int) -> str:
    return datetime.fromtimestamp(hour, UTC).strftime("%Y-%m-%dT%H:%MZ")


def describe_hours(hours: Iterable[int]) -> str:
    """Consecutive hours folded into ranges: '2026-11-01T00:00Z..2026-11-01T05:00Z, 2026-11-03T00:00Z'."""
    ordered = sorted(set(hours))
    runs: list[list[int]] = []
    for h in ordered:
        if runs and h == runs[-1][1] + SECONDS_PER_HOUR:
            runs[-1][1] = h
        else:
            runs.append([h, h])
    return ", ".join(_iso_hour(a) if a == b else f"{_iso_hour(a)}..{_iso_hour(b)}" for a, b in runs)


class MissingPrice(Invalid):
    """GPU models that appear in the rollups but have no entry in `pricing.gpu_models` (HTTP 422).

    `missing` maps each model to every hour (epoch seconds) it was seen without a price, so one
    error names them all instead of failing on the first.
    """

    def __init__(self, missing: Mapping[str, Iterable[int]], versions: Mapping[str, Iterable[int]] | None = None):
        self.missing: dict[str, tuple[int, ...]] = {m: tuple(sorted(set(h))) for m, h in sorted(missing.items())}
        self.versions: dict[str, tuple[int, ...]] = {m: tuple(sorted(set(v))) for m, v in sorted((versions or {}).items())}
        errors = []
        for model, hours in self.missing.items():
            in_versions = self.versions.get(model)
            where = f" in policy version {', '.join(map(str, in_versions))}" if in_versions else ""
            errors.append(
                FieldError(
                    path=path_of("pricing", "gpu_models", model),
                    message=f"GPU model {model!r} has no price{where}; affected hours ({len(hours)}): {describe_hours(hours)}",
                )
            )
        names = ", ".join(repr(m) for m in self.missing)
        super().__init__(detail=f"GPU model(s) missing from pricing.gpu_models: {names}", errors=errors)

    @property
    def models(self) -> list[str]:
        return list(self.missing)

    @property
    def hours(self) -> list[int]:
        """Every affected hour, across models."""
        return sorted({h for hs in self.missing.values() for h in hs})


def fixed_hour_cost(price: GpuPrice) -> Decimal:
    """Capex share plus hosting of one GPU for one hour (everything but energy)."""
    return price.purchase_price / (price.depreciation_years * HOURS_PER_YEAR) + price.hosting_per_hour


def default_hour_kwh(price: GpuPrice) -> Decimal:
    """kWh one GPU is assumed to draw in an hour when it has no energy reading."""
    return price.default_power_watts / WATT_HOURS_PER_KWH


@dataclass(frozen=True)
class PriceSheet:
    """Per-version constants precomputed once, so rating a pool-hour is a few multiplications."""

    fixed: dict[str, Decimal]  # model -> capex + hosting per GPU-hour
    default_kwh: dict[str, Decimal]  # model -> kWh per GPU-hour at default watts
    energy_cost_per_kwh: Decimal  # pue x energy price
    # the same, exactly: numerators over one denominator common to every model and to kWh in 1e-9
    denominator: int
    terms: dict[str, tuple[int, int]]  # model -> (capex + hosting, default watts' energy) per GPU-hour
    energy_per_nano_kwh: int  # pue x energy price per 1e-9 kWh
    energy: Fraction  # pue x energy price per kWh

    @classmethod
    def of(cls, pricing: Pricing) -> PriceSheet:
        energy = Fraction(pricing.pue) * Fraction(pricing.energy_price_per_kwh)
        fixed = {m: Fraction(p.purchase_price) / (Fraction(p.depreciation_years) * 8760) + Fraction(p.hosting_per_hour)
                 for m, p in pricing.gpu_models.items()}
        default = {m: Fraction(p.default_power_watts) / 1000 * energy for m, p in pricing.gpu_models.items()}
        den = lcm(energy.denominator * 10**KWH_DIGITS, *(f.denominator for f in fixed.values()),
                  *(f.denominator for f in default.values()))
        return cls(
            fixed={m: fixed_hour_cost(p) for m, p in pricing.gpu_models.items()},
            default_kwh={m: default_hour_kwh(p) for m, p in pricing.gpu_models.items()},
            energy_cost_per_kwh=pricing.pue * pricing.energy_price_per_kwh,
            denominator=den,
            terms={m: (int(fixed[m] * den), int(default[m] * den)) for m in fixed},
            energy_per_nano_kwh=int(energy * den / 10**KWH_DIGITS),
            energy=energy,
        )

    def hour_cost(self, models: Iterable[ModelEnergy]) -> tuple[int, int]:
        """C of one pool-hour exactly, as (numerator, denominator): over `denominator` unless a measured kWh
        carries more digits than stored ones do. KeyError when a model has no price."""
        numerator, finer = 0, Fraction(0)
        for m in models:
            fixed, default = self.terms[m.model]
            numerator += m.gpus * fixed + (m.gpus - m.measured_gpus) * default
            if -m.measured_kwh.as_tuple().exponent <= KWH_DIGITS:
                numerator += int(m.measured_kwh.scaleb(KWH_DIGITS)) * self.energy_per_nano_kwh
            else:
                finer += Fraction(m.measured_kwh) * self.energy
        if not finer:
            return numerator, self.denominator
        exact = Fraction(numerator, self.denominator) + finer
        den = lcm(self.denominator, exact.denominator)
        return exact.numerator * (den // exact.denominator), den

    def model_cost(self, m: ModelEnergy) -> Decimal:
        """Cost of one model's GPUs in one pool-hour; KeyError when the model has no price."""
        kwh = m.measured_kwh + (m.gpus - m.measured_gpus) * self.default_kwh[m.model]
        return m.gpus * self.fixed[m.model] + kwh * self.energy_cost_per_kwh
