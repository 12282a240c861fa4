"""The simulator's series, rendered line by line: dcgm-exporter device metrics and vLLM metrics.

Shared by the live exposition (one instant, Prometheus text format 0.0.4) and the OpenMetrics
backfill (many instants, with timestamps). Label names are exactly dcgm-exporter's (SPEC 2).
Whole GPUs carry their pods' labels on every metric, as dcgm-exporter's Kubernetes mapping does;
a time-sliced GPU repeats each series once per pod. On a MIG GPU the device-level metrics
(power, energy, temperature) are one series per physical GPU, without instance or pod labels.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from decimal import Decimal

from app.metrics.histograms import VLLM_E2E_LATENCY_S
from app.metrics.simulator.cluster import Gpu, Unit
from app.metrics.simulator.workload import (
    MODEL_NAMES,
    NAMESPACES,
    SLOTS,
    SLOW_FROM_S,
    deploy_slot,
    inference_pod,
)

# vLLM's own e2e latency buckets; fast requests land in (0, 0.3], slow ones in (0.5, 0.8] (workload.py).
LE = (*VLLM_E2E_LATENCY_S, "+Inf")
FAST_LE = tuple(Decimal(le) <= SLOW_FROM_S for le in VLLM_E2E_LATENCY_S) + (False,)
MEM_PCT = {"vllm": 78, "trainer": 92, "worker": 40, "notebook": 22}
PROF = [repr(p / 100) for p in range(101)]
PCT = [str(p) for p in range(101)]


@dataclass(frozen=True)
class Family:
    name: str  # the family name in the 0.0.4 text format (= sample name, histograms aside)
    help: str
    prom_type: str
    scope: str  # util | prof | unit | gpu | requests | latency
    om_name: str = ""  # OpenMetrics family name when it differs (counters drop `_total`)
    om_type: str = ""

    @property
    def openmetrics_name(self) -> str:
        return self.om_name or self.name

    @property
    def openmetrics_type(self) -> str:
        return self.om_type or self.prom_type


FAMILIES = (
    Family("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", "gauge", "util"),
    Family("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "Ratio of time the graphics engine is active.", "gauge", "prof"),
    Family("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", "gauge", "fb_used"),
    Family("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).", "gauge", "fb_free"),
    Family("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", "gauge", "power"),
    # OpenMetrics requires counter samples to end in `_total`; dcgm-exporter's name does not, and
    # queries use that exact name, so the backfill declares it a gauge (PromQL ignores the type).
    Family("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "Total energy consumption since boot (in mJ).", "counter",
           "energy", om_type="gauge"),
    Family("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", "gauge", "temp"),
    Family("vllm:request_success_total", "Count of successfully processed requests.", "counter", "requests",
           om_name="vllm:request_success"),
    Family("vllm:e2e_request_latency_seconds", "Histogram of end to end request latency in seconds.",
           "histogram", "latency"),
)
FAMILY_NAMES = tuple(f.name for f in FAMILIES)


def fb_used_mib(unit: Unit, pods: tuple) -> int:
    """DCGM_FI_DEV_FB_USED of a unit held by `pods` (0 when free)."""
    return unit.memory_mib * min(98, sum(MEM_PCT[p.container] for p in pods)) // 100


def jitter(key: int, t: int, spread: int) -> int:
    """A deterministic wobble in [-spread, spread] for one sample (cheap: runs per sample)."""
    return ((key + t * 2654435761) >> 13) % (2 * spread + 1) - spread


def wobble(key: int, slot: int, t: int, step: int) -> int:
    """Activity wobble of the sample at t: +-2 points in pairs that cancel within the slot, so a
    slot's samples sum to exactly its activity (an odd last sample does not move)."""
    per, i = 60 // step, -(-(t - slot * 60) // step) - 1
    if per % 2 and i == per - 1:
        return 0
    j = ((key + (slot * 8 + i // 2) * 2654435761) >> 13) % 5 - 2
    return j if i % 2 == 0 else -j


def _labels(pairs: Iterable[tuple[str, str]]) -> str:
    return ",".join(f'{k}="{v}"' for k, v in pairs)


def pod_heads(name: str, base: str, pods: tuple, empty_labels: bool) -> list[str]:
    """`name{labels}` once per pod holding the device (or once, unmapped, when none does)."""
    if not pods:
        tail = ',container="",namespace="",pod=""' if empty_labels else ""
        return [f"{name}{{{base}{tail}}}"]
    return [f'{name}{{{base},container="{p.container}",namespace="{p.namespace}",pod="{p.name}"}}' for p in pods]


def _slot(t: float) -> int:
    return -int(-t // 60) - 1


def slot_groups(times: Iterable[float], *, stamp: bool) -> list[tuple[int, int, int, list[tuple[int, str]]]]:
    """Instants grouped by minute slot: (slot, day, slot of day, [(t, line suffix)])."""
    groups: list = []
    for t in times:
        s = _slot(t)
        if not groups or groups[-1][0] != s:
            groups.append((s, *divmod(s, SLOTS), []))
        groups[-1][3].append((t, f" {int(t)}\n" if stamp else "\n"))
    return groups


class Renderer:
    """Produces a family's sample lines for instants grouped by slot, one list of lines per slot."""

    def __init__(self, sim, *, empty_labels: bool) -> None:
        self.sim = sim
        self.workload = sim.workload
        self.energy = sim.energy
        self.empty_labels = empty_labels
        self._base = {u.index: _labels(u.base_labels()) for u in sim.topology.units}

    def streams(self, family: Family) -> list:
        """The independent streams of a family (units, GPUs or replicas), in output order."""
        topo = self.sim.topology
        if family.scope == "util":
            return [u for u in topo.units if not u.gpu_instance]
        if family.scope == "prof":
            return [u for u in topo.units if u.node.model.datacenter]
        if family.scope in ("fb_used", "fb_free"):
            return list(topo.units)
        if family.scope in ("power", "energy", "temp"):
            return list(topo.gpus)
        return [(s, r) for s, count in sorted(topo.replicas.items()) for r in range(count)]

    def lines(self, family: Family, stream, groups: Iterable) -> Iterator[list[str]]:
        if family.scope in ("power", "energy", "temp"):
            return self._gpu_lines(family, stream, groups)
        if family.scope in ("requests", "latency"):
            return self._vllm_lines(family, *stream, groups)
        return self._unit_lines(family, stream, groups)

    def _heads(self, heads: dict, name: str, unit: Unit, pods: tuple) -> list[str]:
        hs = heads.get(pods)
        if hs is None:
            hs = heads[pods] = [h + " " for h in pod_heads(name, self._base[unit.index], pods, self.empty_labels)]
        return hs

    # ---- device metrics ----

    def _unit_lines(self, family: Family, unit: Unit, groups: list) -> Iterator[str]:
        w, scope, name, key = self.workload, family.scope, family.name, unit.key
        step = self.sim.scrape_interval_s
        table = PCT if scope == "util" else PROF
        heads: dict[tuple, list[str]] = {}
        day = occ = None
        for s, d, k, ts in groups:
            if d != day:
                day, occ = d, w.unit_slots(unit.index, d)
            pods = occ[k]
            hs = self._heads(heads, name, unit, pods)
            out = []
            if scope in ("util", "prof"):
                pct = w.unit_pct(pods, d, k)
                for t, suffix in ts:
                    value = table[pct + wobble(key, s, t, step) if pct else 0]
                    for h in hs:
                        out.append(h + value + suffix)
            else:
                used = fb_used_mib(unit, pods)
                value = str(used if scope == "fb_used" else unit.memory_mib - used)
                for _, suffix in ts:
                    for h in hs:
                        out.append(h + value + suffix)
            yield out

    def _gpu_lines(self, family: Family, gpu: Gpu, groups: list) -> Iterator[str]:
        w, e, scope, name = self.workload, self.energy, family.scope, family.name
        unit = gpu.units[0]
        if gpu.mig:
            labels = [kv for kv in unit.base_labels() if kv[0] not in ("GPU_I_PROFILE", "GPU_I_ID")]
            fixed = [f"{name}{{{_labels(labels)}}} "]
        heads: dict[tuple, list[str]] = {}
        slot = None
        power = counter = 0
        for s, d, k, ts in groups:
            if scope == "energy":
                # The counter is the integral of power: carry it slot to slot, closed form after a gap.
                counter = counter + 60 * power if slot is not None and s == slot + 1 else e.counter_mj(gpu, s * 60)
            slot = s
            power = e.power_mw(gpu, d, k)
            hs = fixed if gpu.mig else self._heads(heads, name, unit, w.unit_slots(unit.index, d)[k])
            out = []
            for t, suffix in ts:
                if scope == "power":
                    value = f"{power // 1000}.{power % 1000:03d}"
                elif scope == "energy":
                    value = str(counter + int(power * (t - s * 60)))
                else:
                    value = str(28 + power // 12000 + jitter(gpu.key, int(t), 1))
                for h in hs:
                    out.append(h + value + suffix)
            yield out

    # ---- vLLM ----

    def _vllm_lines(self, family: Family, service: str, replica: int, groups: list) -> Iterator[str]:
        seed = self.sim.seed
        replicas = self.sim.topology.replicas[service]
        fixed = f'model_name="{MODEL_NAMES[service]}",namespace="{NAMESPACES[service]}"'
        gen = slot = None
        acc = [0, 0, 0, 0]  # fast1, fast2, slow, sum_ms of the pod's slots before `slot`
        for s, d, k, ts in groups:
            g = d if k >= deploy_slot(seed, service, d) else d - 1
            if g != gen or s < slot:
                # A new rollout: new pod name, counters from zero (the old pod's series ends).
                gen, slot, acc = g, self._gen_start(service, g), [0, 0, 0, 0]
                labels = f'{fixed},pod="{inference_pod(seed, service, g, replica).name}"'
                success = f"vllm:request_success_total{{{labels}}} "
                buckets = [f'{family.name}_bucket{{{labels},le="{le}"}} ' for le in LE]
                total_sum, total_count = f"{family.name}_sum{{{labels}}} ", f"{family.name}_count{{{labels}}} "
            while slot < s:
                for i, v in enumerate(self._replica_slot(service, replicas, replica, slot)):
                    acc[i] += v
                slot += 1
            cur = self._replica_slot(service, replicas, replica, s)
            out = []
            for t, suffix in ts:
                frac = (t - s * 60) / 60
                f1, f2, sl, ms = (a + int(c * frac) for a, c in zip(acc, cur))
                n = f1 + f2 + sl
                if family.scope == "requests":
                    out.append(success + str(n) + suffix)
                    continue
                v_fast, v_all = str(f1 + f2), str(n)
                for head, is_fast in zip(buckets, FAST_LE):
                    out.append(head + (v_fast if is_fast else v_all) + suffix)
                out.append(total_sum + repr(ms / 1000) + suffix)
                out.append(total_count + str(n) + suffix)
            yield out

    def _gen_start(self, service: str, generation: int) -> int:
        return generation * SLOTS + deploy_slot(self.sim.seed, service, generation)

    def _replica_slot(self, service: str, replicas: int, replica: int, slot: int) -> tuple[int, int, int, int]:
        d, k = divmod(slot, SLOTS)
        sd = self.workload.service_day(service, d)
        f1, f2, sl = (split(x, replicas, replica) for x in (sd.fast1[k], sd.fast2[k], sd.slow[k]))
        n = sd.fast1[k] + sd.fast2[k] + sd.slow[k]
        ms = sd.sum_ms[k] * (f1 + f2 + sl) // n if n else 0
        return f1, f2, sl, ms


def split(x: int, parts: int, i: int) -> int:
    """Part i of x requests spread over `parts` replicas as evenly as integers allow."""
    return x // parts + (1 if i < x % parts else 0)
