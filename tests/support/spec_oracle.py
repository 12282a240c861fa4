"""A month that goes wrong in the field, and what SPEC sections 4 and 5 say it costs, written from SPEC alone.

Two clusters, each its own Prometheus, six hours of November 2026 from 2026-11-02 00:00 UTC:
- `east`: node e-node-1, two L40S (no energy counter: priced by mean `POWER_USAGE`). Pods come and go
  mid-hour, each with its own series (dcgm-exporter puts the pod's labels on the GPU's series), at
  different power draws; one GPU is time-sliced by two pods for part of the time; an unclaimed namespace
  uses a GPU. An SLA service is busy throughout (so no minute is dark). Hour 5 answers successfully
  with no GPU series at all (a relabelling that dropped the exporter): a gap, never zero use.
- `west`: node w-node-1, one H200 cut into two 3g.71gb MIG instances, no power series at all (priced
  at the model's default watts). The exporter is down in hours 2 and 3 (gaps in one of two clusters).
  The pool has no SLA service and a reserved fraction, so every minute is dark. The H200 costs exactly
  343/60 USD an hour, so the training line there is worth exactly 0.735 USD: 0.74 by the half-even rule.

Samples are 30 s apart, 15 s past the minute, so no sample sits on an hour's edge and every engine
puts each sample in the same hour.

The oracle below reads none of the portal's code: it walks the scenario's own description (who held
which unit at which sample, at what power) and applies SPEC's arithmetic with exact fractions, rounding
each line once, half-even, to the cent.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from fractions import Fraction

from app.metrics.histograms import VLLM_E2E_LATENCY_S
from tests.support.prometheus import openmetrics

H0 = int(datetime(2026, 11, 2, tzinfo=UTC).timestamp())
HOURS = 6
STEP = 30
OFFSET = 15  # seconds past the minute of every sample
DATA_FROM, DATA_TO = H0 - 1800, H0 + HOURS * 3600 + 600
MINUTE = 60
L40S, H200 = "NVIDIA L40S", "NVIDIA H200"
EAST_POOL, WEST_POOL = "east-l40s", "west-h200"
EAST_NODE, WEST_NODE = "e-node-1", "w-node-1"
GAPS = {("east", 5), ("west", 2), ("west", 3)}  # (cluster, hour index): no GPU series in the source

TENANTS = {"search-prod": ("search", "inference"), "vision-train": ("vision", "training"),
           "data-prep": ("etl", "preprocessing")}
PRICING = {
    # 9000 / 26280 + 0.10 + watts / 1000 x 1.25 x 0.20 per hour
    L40S: {"purchase_price": 9000, "depreciation_years": 3, "hosting_per_hour": "0.10", "default_power_watts": 350},
    # 140379 / 26280 + 0.20 + 0.7 x 1.25 x 0.20 = 343/60 per hour
    H200: {"purchase_price": 140379, "depreciation_years": 3, "hosting_per_hour": "0.20", "default_power_watts": 700},
}
ENERGY_PRICE, PUE, DARK_MULTIPLIER, RESERVED = Fraction("0.20"), Fraction("1.25"), Fraction("0.6"), Fraction("0.30")
REQUESTS_PER_S = 10


@dataclass(frozen=True)
class Unit:
    cluster: str
    node: str
    uuid: str
    gpu: str
    model: str
    mig: str = ""  # GPU instance id
    profile: str = ""

    @property
    def fraction(self) -> Fraction:
        return Fraction(int(self.profile[0]), 7) if self.profile else Fraction(1)


@dataclass(frozen=True)
class Segment:
    """From `start` (inclusive) to `end` (exclusive) the unit is held by `pods` ((namespace, pod) pairs; none:
    idle), and its GPU draws `watts` on each of the held pods' series (None: no power series)."""

    unit: Unit
    start: int
    end: int
    pods: tuple[tuple[str, str], ...]
    watts: float | None


E0 = Unit("east", EAST_NODE, "GPU-E0", "0", L40S)
E1 = Unit("east", EAST_NODE, "GPU-E1", "1", L40S)
W_TRAIN = Unit("west", WEST_NODE, "GPU-W0", "0", H200, mig="1", profile="3g.71gb")
W_SERVE = Unit("west", WEST_NODE, "GPU-W0", "0", H200, mig="2", profile="3g.71gb")


def _at(hour: int, minute: float = 0) -> int:
    return H0 + hour * 3600 + int(minute * 60)


def segments() -> list[Segment]:
    search, train_a, train_b = ("search-prod", "search-0"), ("vision-train", "train-a"), ("vision-train", "train-b")
    etl_a, etl_b, stray = ("data-prep", "etl-a"), ("data-prep", "etl-b"), ("mystery", "m-0")
    out = [
        # GPU-E0: search until 00:50 at 60 W, vision's train-a until 03:00 at 300 W, idle 20 minutes at 30 W,
        # then time-sliced by search and etl at 200 W.
        Segment(E0, DATA_FROM, _at(0, 50), (search,), 60.0),
        Segment(E0, _at(0, 50), _at(3), (train_a,), 300.0),
        Segment(E0, _at(3), _at(3, 20), (), 30.0),
        Segment(E0, _at(3, 20), DATA_TO, (search, etl_a), 200.0),
        # GPU-E1: etl until 01:10 at 150 W, vision's train-b until 04:30 at 250 W, then an unclaimed namespace at 100 W.
        Segment(E1, DATA_FROM, _at(1, 10), (etl_b,), 150.0),
        Segment(E1, _at(1, 10), _at(4, 30), (train_b,), 250.0),
        Segment(E1, _at(4, 30), DATA_TO, (stray,), 100.0),
        # The H200: one instance serves search throughout; the other trains for 7.5 minutes of each hour
        # (15 samples: 60 over the four hours west reports, 0.735 USD at the dark rate), else idle.
        Segment(W_SERVE, DATA_FROM, DATA_TO, (("search-prod", "search-w"),), None),
    ]
    for hour in range(-1, HOURS + 1):
        out.append(Segment(W_TRAIN, _at(hour), _at(hour, 7.5), (("vision-train", "train-w"),), None))
        out.append(Segment(W_TRAIN, _at(hour, 7.5), _at(hour + 1), (), None))
    return [_clip(s) for s in out if _clip(s).start < _clip(s).end]


def _clip(s: Segment) -> Segment:
    return Segment(s.unit, max(s.start, DATA_FROM), min(s.end, DATA_TO), s.pods, s.watts)


def sample_times(start: int, end: int) -> list[int]:
    first = start - (start - OFFSET) % STEP
    first = first if first >= start else first + STEP
    return list(range(first, end, STEP))


def _hour_of(t: int) -> int:
    return (t - H0) // 3600


def _reported(unit: Unit, t: int) -> bool:
    """Whether the source holds the unit's sample at t (no: an exporter outage or a dropped exporter)."""
    return (unit.cluster, _hour_of(t)) not in GAPS


# ---- the source, as dcgm-exporter and vLLM publish it ----

def _labels(unit: Unit, pod: tuple[str, str] | None) -> dict[str, str]:
    labels = {"gpu": unit.gpu, "UUID": unit.uuid, "pci_bus_id": f"00000000:{int(unit.gpu) + 7:02X}:00.0",
              "device": f"nvidia{unit.gpu}", "modelName": unit.model, "Hostname": unit.node,
              "DCGM_FI_DRIVER_VERSION": "550.54.15"}
    if unit.mig:
        labels |= {"GPU_I_ID": unit.mig, "GPU_I_PROFILE": unit.profile}
    namespace, name = pod or ("", "")
    return labels | {"namespace": namespace, "pod": name, "container": "main" if name else ""}


def families(cluster: str) -> list:
    util, power = defaultdict(list), defaultdict(list)
    for s in segments():
        if s.unit.cluster != cluster:
            continue
        for pod in s.pods or (None,):
            key = tuple(_labels(s.unit, pod).items())
            for t in sample_times(s.start, s.end):
                if _reported(s.unit, t):
                    util[key].append((t, 90.0 if pod else 0.0))
                    if s.watts is not None:
                        power[tuple((k, v) for k, v in key if k not in ("GPU_I_ID", "GPU_I_PROFILE"))].append((t, s.watts))
    out = [("DCGM_FI_DEV_GPU_UTIL", "gauge", [(dict(k), v) for k, v in util.items()])]
    if power:
        out.append(("DCGM_FI_DEV_POWER_USAGE", "gauge", [(dict(k), v) for k, v in power.items()]))
    if cluster == "east":
        times = sample_times(DATA_FROM, DATA_TO)
        served = {"namespace": "search-prod", "model_name": "chat"}
        out.append(("vllm:request_success_total", "gauge",
                    [(served, [(t, REQUESTS_PER_S * (t - DATA_FROM)) for t in times])]))
        # Every request answers within 0.3 s: no breach.
        out.append(("vllm:e2e_request_latency_seconds_bucket", "gauge",
                    [({"namespace": "search-prod", "le": le}, [(t, REQUESTS_PER_S * (t - DATA_FROM)) for t in times])
                     for le in (*VLLM_E2E_LATENCY_S, "+Inf")]))
    return out


def openmetrics_text(cluster: str) -> str:
    return openmetrics(families(cluster))


def policy_data() -> dict:
    tenants = [{"name": name, "department": "dept-" + name, "namespaces": [ns], "class": klass}
               for ns, (name, klass) in TENANTS.items()]
    return {
        "tenants": tenants,
        "pools": [
            {"name": EAST_POOL, "cluster": "east", "nodes": [EAST_NODE], "reserved_fraction": "0.30",
             "reservations": {"search": 1}, "gpus_per_node": 2, "gpu_model": L40S},
            {"name": WEST_POOL, "cluster": "west", "nodes": [WEST_NODE], "reserved_fraction": "0.30",
             "reservations": {"search": 1}, "gpus_per_node": 1, "gpu_model": H200},
        ],
        "pricing": {"currency": "USD", "gpu_models": PRICING, "energy_price_per_kwh": "0.20", "pue": "1.25",
                    "dark_time_multiplier": "0.6"},
        "sla": [{"service": "search-chat", "tenant": "search", "pool": EAST_POOL,
                 "requests": 'vllm:request_success_total{namespace="search-prod"}',
                 "latency_histogram": 'vllm:e2e_request_latency_seconds_bucket{namespace="search-prod"}',
                 "p99_ms": 300, "penalty_per_breach_minute": "0.50"}],
        "colocation": {"idle_request_interval_s": 3, "idle_window_s": 180},
        "priorities": [
            {"name": "inference-core", "value": 1000000, "class": "inference", "preemptible": False},
            {"name": "training", "value": 10000, "class": "training", "preemptible": True},
            {"name": "preprocessing", "value": 1000, "class": "preprocessing", "preemptible": True},
        ],
        "eviction_order": ["preprocessing", "shrink-training-batch", "suspend-training"],
        "isolation": {"mig": {WEST_NODE: {"mode": "mixed", "gpus": {"0": {"3g.71gb": 2}}}}},
    }


# ---- SPEC sections 4 and 5, by hand ----

POOL_OF = {"east": EAST_POOL, "west": WEST_POOL}
DARK_POOLS = {WEST_POOL}  # no SLA service and a reserved fraction: every minute dark; east's service never idles


def _cost_per_hour(model: str, watts: Fraction | None) -> Fraction:
    p = PRICING[model]
    capex = Fraction(p["purchase_price"]) / (Fraction(p["depreciation_years"]) * 8760)
    kwh = (watts if watts is not None else Fraction(p["default_power_watts"])) / 1000
    return capex + Fraction(p["hosting_per_hour"]) + kwh * PUE * ENERGY_PRICE


def hour_inputs(hour: int) -> dict[str, tuple[Fraction, int, dict[tuple[str, str], Fraction]]]:
    """Per pool in hour `hour`: C, N and the GPU-seconds per (account, class) - SPEC section 4."""
    lo, hi = H0 + hour * 3600, H0 + (hour + 1) * 3600
    power: dict[str, list[float]] = defaultdict(list)
    gpus: dict[str, set[tuple[str, str]]] = defaultdict(set)
    holders: dict[tuple[Unit, int], list[tuple[str, str]]] = defaultdict(list)
    for s in segments():
        for t in sample_times(max(s.start, lo), min(s.end, hi)):
            if not _reported(s.unit, t):
                continue
            pool = POOL_OF[s.unit.cluster]
            gpus[pool].add((s.unit.node, s.unit.uuid))
            holders[(s.unit, t)] += list(s.pods)
            if s.watts is not None:
                power[s.unit.uuid] += [s.watts] * max(1, len(s.pods))  # one sample per series
    out = {}
    for pool in gpus:
        cost = Fraction(0)
        for _node, uuid in sorted(gpus[pool]):
            model = L40S if uuid.startswith("GPU-E") else H200
            watts = Fraction(sum(map(Fraction, power[uuid])), len(power[uuid])) if power[uuid] else None
            cost += _cost_per_hour(model, watts)
        use: dict[tuple[str, str], Fraction] = defaultdict(Fraction)
        for (unit, _t), pods in holders.items():
            if POOL_OF[unit.cluster] != pool or not pods:
                continue
            for namespace, _pod in pods:
                account, klass = TENANTS.get(namespace, ("unallocated", "unallocated"))
                use[(account, klass)] += Fraction(STEP) * unit.fraction / len(pods)
        out[pool] = (cost, len(gpus[pool]), dict(use))
    return out


def _cents(value: Fraction) -> Decimal:
    """Round once to the cent, half-even (SPEC 5.7), from the exact value."""
    whole, rest = divmod(value * 100, 1)
    if rest > Fraction(1, 2) or (rest == Fraction(1, 2) and whole % 2 == 1):
        whole += 1
    return Decimal(int(whole)) / 100


def expected_lines() -> tuple[dict[tuple[str, str, str], Decimal], dict[tuple[str, str, str], Fraction]]:
    """{(account, pool, kind): amount}: SPEC section 5 lines 1-3 and 6 summed exactly over the hours the
    source holds, each rounded once (half-even); and the same lines' exact values."""
    exact: dict[tuple[str, str, str], Fraction] = defaultdict(Fraction)
    for hour in range(HOURS):
        for pool, (cost, n, use) in hour_inputs(hour).items():
            capacity = n * 3600
            rate = cost / capacity
            dark = pool in DARK_POOLS
            exact[("search", pool, "reserved_fee")] += RESERVED * cost  # one inference tenant, weight 1
            for (account, klass), seconds in use.items():
                if klass == "inference":
                    covered = RESERVED * capacity
                    if seconds > covered:
                        exact[(account, pool, "inference_overage")] += (seconds - covered) * rate
                elif klass == "unallocated":
                    exact[("platform", pool, "unallocated_usage")] += seconds * rate * (DARK_MULTIPLIER if dark else 1)
                else:
                    kind = "usage_dark" if dark else "usage_busy"
                    exact[(account, pool, kind)] += seconds * rate * (DARK_MULTIPLIER if dark else 1)
    return {k: _cents(v) for k, v in exact.items()}, dict(exact)


def half_cent_lines() -> list[tuple[str, str, str]]:
    """The lines worth exactly half a cent (where any quantisation before the sum would move a cent)."""
    _, exact = expected_lines()
    return [k for k, v in exact.items() if (v * 200).denominator == 1 and (v * 200).numerator % 2 == 1]
