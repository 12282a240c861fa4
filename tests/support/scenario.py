"""A hand-written dcgm-exporter + vLLM history, as OpenMetrics for promtool, with its expected first hour.

Hour H (2026-11-20 10:00 UTC) at a 30 s scrape interval, data from H - 10 min to the end of the
last hour + 5 min:
- gpu-a100-01 (label `Hostname`): GPU-A0 whole A100 reporting GPU_UTIL *and* GR_ENGINE_ACTIVE, held by
  search-prod/search-0; GPU-A1 time-sliced by vision-train/train-a and data-prep/etl-a.
- gpu-a100-02 (label `hostname`): GPU-B0 MIG, instance 1 (3g.40gb) held by vision-train/train-b,
  instance 2 (3g.40gb) empty; GPU-B1 idle.
- gpu-4090-01: an RTX 4090 (GPU_UTIL only): namespace `mystery` (no tenant) until H+30 min, then
  vision-train with `workload_class=preprocessing` until H+40 min, then nobody.
- stray-01 (in no pool): data-prep/etl-s during H's first 10 minutes.
- search-chat: 2 req/s until H+30 min, then none (dark from the minute ending H+33 min);
  slow requests (vLLM's 0.5-0.8 s bucket) in the samples H+10:30 .. H+15:00 -> breach minutes H+11 .. H+19.
"""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from fractions import Fraction

from app.metrics.attribution import quantize_micro
from app.metrics.histograms import VLLM_E2E_LATENCY_S
from tests.support.policies import A100, RTX4090
from tests.support.prometheus import openmetrics

H = int(datetime(2026, 11, 20, 10, tzinfo=UTC).timestamp())
STEP = 30
UTIL, PROF = "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_PROF_GR_ENGINE_ACTIVE"


def _dcgm(host_label, host, uuid, gpu, model, gi="", profile="", ns="", pod="", **extra):
    labels = {"gpu": gpu, "UUID": uuid, "pci_bus_id": f"00000000:{int(gpu) + 7:02X}:00.0", "device": f"nvidia{gpu}",
              "modelName": model, host_label: host, "DCGM_FI_DRIVER_VERSION": "550.54.15"}
    if gi:
        labels |= {"GPU_I_ID": gi, "GPU_I_PROFILE": profile}
    labels |= {"namespace": ns, "pod": pod, "container": "main" if pod else ""}
    labels |= extra
    return labels


def families(hours: int = 1) -> list:
    """The OpenMetrics families of the scenario for `hours` hours from H."""
    times = list(range(H - 600 + STEP, H + hours * 3600 + 300 + 1, STEP))
    always = lambda t: True  # noqa: E731
    a01 = lambda **kw: _dcgm("Hostname", "gpu-a100-01", gpu=kw.pop("gpu"), model=A100, **kw)  # noqa: E731
    a02 = lambda **kw: _dcgm("hostname", "gpu-a100-02", gpu=kw.pop("gpu"), model=A100, **kw)  # noqa: E731
    util = [
        (a01(uuid="GPU-A0", gpu="0", ns="search-prod", pod="search-0"), always, 50),
        (a01(uuid="GPU-A1", gpu="1", ns="vision-train", pod="train-a"), always, 90),
        (a01(uuid="GPU-A1", gpu="1", ns="data-prep", pod="etl-a"), always, 90),
        (a02(uuid="GPU-B1", gpu="1"), always, 0),
        (_dcgm("Hostname", "gpu-4090-01", "GPU-R0", "0", RTX4090, ns="mystery", pod="m-0"), lambda t: t <= H + 1800, 70),
        (_dcgm("Hostname", "gpu-4090-01", "GPU-R0", "0", RTX4090, ns="vision-train", pod="v-pre",
               workload_class="preprocessing"), lambda t: H + 1800 < t <= H + 2400, 40),
        (_dcgm("Hostname", "gpu-4090-01", "GPU-R0", "0", RTX4090), lambda t: t > H + 2400, 0),
        (_dcgm("Hostname", "stray-01", "GPU-S0", "0", A100, ns="data-prep", pod="etl-s"), lambda t: H < t <= H + 600, 20),
    ]
    prof = [
        (a01(uuid="GPU-A0", gpu="0", ns="search-prod", pod="search-0"), always, 0.8),
        (a01(uuid="GPU-A1", gpu="1", ns="vision-train", pod="train-a"), always, 0.9),
        (a01(uuid="GPU-A1", gpu="1", ns="data-prep", pod="etl-a"), always, 0.9),
        (a02(uuid="GPU-B0", gpu="0", gi="1", profile="3g.40gb", ns="vision-train", pod="train-b"), always, 0.7),
        (a02(uuid="GPU-B0", gpu="0", gi="2", profile="3g.40gb"), always, 0.0),
        (a02(uuid="GPU-B1", gpu="1"), always, 0.0),
    ]

    def series(spec):
        return [(labels, [(t, value) for t in times if present(t)]) for labels, present, value in spec]

    k = {t: i for i, t in enumerate(times)}
    energy = [(a01(uuid="GPU-A0", gpu="0"), [(t, 1e6 * (1000 + k[t])) for t in times])]
    power = [(a01(uuid="GPU-A0", gpu="0"), [(t, 300.0) for t in times]),
             (a01(uuid="GPU-A1", gpu="1"), [(t, 250.0) for t in times])]
    served = lambda t: min(t, H + 1800)  # noqa: E731
    requests = [({"namespace": "search-prod", "model_name": "chat"}, [(t, 2 * (served(t) - (H - 600))) for t in times])]
    slow = lambda t: 2 * len([s for s in range(H + 630, H + 901, STEP) if s <= t])  # noqa: E731
    # vLLM's own boundaries; the slow requests take 0.5-0.8 s.
    buckets = [({"namespace": "search-prod", "le": le}, [(t, slow(t) if le not in ("0.3", "0.5") else 0) for t in times])
               for le in (*VLLM_E2E_LATENCY_S, "+Inf")]
    return [
        (UTIL, "gauge", series(util)),
        (PROF, "gauge", series(prof)),
        ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "gauge", energy),
        ("DCGM_FI_DEV_POWER_USAGE", "gauge", power),
        ("vllm:request_success_total", "gauge", requests),
        ("vllm:e2e_request_latency_seconds_bucket", "gauge", buckets),
    ]


def text(hours: int = 1) -> str:
    return openmetrics(families(hours))


# ---- what hour H must give ----
BUSY, DARK = 32, 28  # minutes; dark from the minute ending H+33 min
MIG_MINUTE = Fraction(3, 7) * 60  # GPU-seconds of a 3g.40gb instance per minute

EXPECTED_USAGE = {
    ("mixed-a100", "search", "inference", False): Decimal(BUSY * 60),
    ("mixed-a100", "search", "inference", True): Decimal(DARK * 60),
    ("mixed-a100", "vision", "training", False): quantize_micro(BUSY * 30 + BUSY * MIG_MINUTE),
    ("mixed-a100", "vision", "training", True): quantize_micro(DARK * 30 + DARK * MIG_MINUTE),
    ("mixed-a100", "etl", "preprocessing", False): Decimal(BUSY * 30),
    ("mixed-a100", "etl", "preprocessing", True): Decimal(DARK * 30),
    ("rtx", "unallocated", "unallocated", False): Decimal(1800),
    ("rtx", "vision", "preprocessing", False): Decimal(600),
    ("unpooled", "etl", "preprocessing", False): Decimal(600),
}
EXPECTED_POOLS = {"mixed-a100": (4, DARK), "rtx": (1, 0), "unpooled": (1, 0)}  # gpus, dark minutes
EXPECTED_BREACH_MINUTES = [H + 60 * m for m in range(11, 20)]
EXPECTED_P99_MS = Decimal("797.000")  # histogram_quantile's interpolation inside (0.5, 0.8]
EXPECTED_COLOCATED = (("etl", Decimal(30)), ("vision", quantize_micro(30 + MIG_MINUTE)))
# GPU-A0 by its energy counter (120 x 1e6 mJ), GPU-A1 by mean power (250 W); GPU-B0/B1 unmeasured.
EXPECTED_A100_ENERGY = (4, 2, Decimal("0.283333333"))
