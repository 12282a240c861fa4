"""Who runs where, minute by minute: schedules that are pure functions of (seed, entity, day).

Time is cut into minute *slots*: slot s covers (60 s, 60 s + 60], so a sample at t belongs to
slot ceil(t / 60) - 1, the same rule as `app.metrics.types`. Pods change only at slot edges.
Every decision of day D is drawn from a hash of (seed, entity, D mod 28): the cluster's behaviour
repeats every four weeks (names do not), which keeps the energy counter a closed-form sum at any
date instead of an integral from the beginning of time. Within a day, per-minute draws come from
one generator per (entity, day), so any day is computed alone: random access in time.

Timeline of a UTC day (the seed policy's peak is 09:00-21:00 Asia/Shanghai = 01:00-13:00 UTC):
inference load is high through the peak, falls off in the evening and is idle at night with
rare bursts; training starts filling the dark time at 13:00 and checkpoints at 00:45, except on
nights when a job runs on into the peak (escalated, non-preemptible): its pool's inference
requests are then slow, the SLA breaches. Preprocessing and notebooks come and go by the hour.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from functools import lru_cache
from itertools import accumulate
from random import Random

from app.metrics.simulator.cluster import Topology, Unit, h64

SLOTS = 1440  # minute slots per day
SLOT_S = 60
CYCLE_DAYS = 28
PEAK_START, PEAK_END = 60, 780  # slots 01:00-13:00 UTC
SUSPEND = 45  # training checkpoints and suspends at 00:45, 15 minutes before the peak
NIGHT = 780  # training starts filling dark time after 13:00
DEPLOY_FROM = 960  # inference rolls out new pods between 16:00 and 20:00 (deep night in Shanghai)
IDLE, ACTIVE, SLOW = 0, 1, 2
INFERENCE_PCT = (3, 62, 78)  # engine activity of an inference replica in an idle/active/slow minute
PCT_CAP = 97  # so that a sample's +-2 wobble never clips
SLOW_FROM_S = Decimal("0.5")  # slow requests take more than this (and at most 0.8 s)
IDLE_COUNTS = (0, 0, 1, 1, 2, 3)  # requests in an idle minute: at most 0.05 per second
EMPTY: tuple = ()

NAMESPACES = {"search-chat": "search-prod", "assist-chat": "assist-prod"}
MODEL_NAMES = {"search-chat": "meta-llama/Llama-3.1-8B-Instruct", "assist-chat": "Qwen/Qwen2.5-32B-Instruct"}
TRAINING_NS = {"vision": "vision-train", "nlp": "nlp-train"}
JOB_MODELS = {"vision": ("resnet152", "vit-l16", "yolov8x", "sam-b"),
              "nlp": ("llama-8b-sft", "mistral-7b-dpo", "bert-xl", "t5-3b")}
ETL_KINDS = ("ingest", "dedup", "tokenize", "shard")
NOTEBOOK_USERS = ("alice", "bo", "chen", "dara", "eve")
ETL_NS, SCRATCH_NS = "data-prep", "scratch"
_B36 = "0123456789abcdefghijklmnopqrstuvwxyz"


@dataclass(frozen=True, slots=True)
class Pod:
    name: str
    namespace: str
    container: str
    pct: int  # engine activity in percent; -1 = an inference replica (follows its service's minute)
    service: str = ""


def b36(x: int, n: int) -> str:
    """n base-36 characters of x: Kubernetes-style name suffixes."""
    out = []
    for _ in range(n):
        x, r = divmod(x, 36)
        out.append(_B36[r])
    return "".join(out)


def p_active(k: int) -> float:
    """Probability that slot k of a day is an active inference minute (diurnal load, UTC)."""
    if PEAK_START <= k < PEAK_END:
        return 0.96
    if k < PEAK_START:
        return 0.6
    if k < NIGHT + 120:
        return 0.5
    return 0.04


P_ACTIVE = [int(p_active(k) * 65536) for k in range(SLOTS)]  # thresholds for a 16-bit draw


def deploy_slot(seed: int, service: str, day: int) -> int:
    """Slot of the day at which the service's replicas restart under new pod names."""
    return DEPLOY_FROM + Random(h64(seed, "deploy", service, day % CYCLE_DAYS)).randint(0, 239)


def inference_pod(seed: int, service: str, generation: int, replica: int) -> Pod:
    """The replica's pod of the rollout that started on day `generation`."""
    name = f"{service}-{b36(h64(seed, 'rs', service, generation), 10)}-{b36(h64(seed, 'pod', service, generation, replica), 5)}"
    return Pod(name, NAMESPACES[service], "vllm", -1, service)


def night_jobs(seed: int, group: str, tenant: str, night: int) -> list[tuple[int, int, Pod]]:
    """Training jobs of one gang from 13:00 of day `night` to the next morning (absolute slots)."""
    r = Random(h64(seed, "night", group, night % CYCLE_DAYS))
    if r.random() < 0.06:
        return []
    start = night * SLOTS + NIGHT + r.randint(5, 30)
    end = (night + 1) * SLOTS + SUSPEND
    if r.random() < 0.35:  # escalated after repeated preemptions: runs on into the peak
        end += r.randint(25, 120)
    count = r.randint(1, 3)
    cuts = sorted(r.sample(range(start + 60, end - 60), count - 1)) + [end]
    jobs, at = [], start
    for j, cut in enumerate(cuts):
        model = r.choice(JOB_MODELS[tenant])
        pct = r.randint(82, 97)
        gap = r.randint(2, 8)
        job = f"{tenant}-{model}-{b36(h64(seed, 'job', group, night, j), 5)}"
        if cut > at:
            jobs.append((at, cut, Pod(f"{job}-worker-0", TRAINING_NS[tenant], "trainer", pct)))
        at = cut + gap
    return jobs


def _hourly(seed: int, salt: str, key: int, day: int, block: int, chance: float, span: tuple[int, int, int],
            make) -> list[tuple[int, int, Pod]]:
    """Jobs that come and go: in each block of `span[0]` minutes, maybe one job."""
    size, latest_start, longest = span
    out = []
    for b in range(SLOTS // size):
        r = Random(h64(seed, salt, key, day % CYCLE_DAYS, b))
        if r.random() >= chance:
            continue
        a = r.randint(0, latest_start)
        e = min(size, a + r.randint(longest // 6, longest))
        out.append((b * size + a, b * size + e, make(r, h64(seed, salt + "-pod", key, day, b))))
    return out


def etl_jobs(seed: int, key: int, day: int) -> list[tuple[int, int, Pod]]:
    return _hourly(seed, "etl", key, day, 0, 0.45, (60, 39, 50), lambda r, x: Pod(
        f"etl-{r.choice(ETL_KINDS)}-{b36(x, 5)}-{b36(x >> 30, 5)}", ETL_NS, "worker", r.randint(30, 60)))


def notebook_jobs(seed: int, key: int, day: int) -> list[tuple[int, int, Pod]]:
    return _hourly(seed, "nb", key, day, 0, 0.5, (180, 119, 170), lambda r, x: Pod(
        f"jupyter-{r.choice(NOTEBOOK_USERS)}-{b36(x, 5)}", SCRATCH_NS, "notebook", r.randint(5, 40)))


@dataclass
class ServiceDay:
    """One inference service's minutes of one day, across all its replicas."""

    state: list[int]
    n: list[int]  # requests completed in the slot
    fast1: list[int]  # ... with latency in 18-45 ms
    fast2: list[int]  # ... in 55-95 ms (both in vLLM's first bucket, <= 0.3 s)
    slow: list[int]  # ... in 510-800 ms: vLLM's bucket (0.5, 0.8]
    sum_ms: list[int]  # total latency of the slot's requests, ms
    deploy: int  # slot of today's rollout
    prefix: list[int]  # prefix[k] = requests in slots before k
    states_before: list[tuple[int, int, int]]  # counts of (idle, active, slow) slots before k


def _runs(slots: list[tuple]) -> list[tuple[int, int, tuple]]:
    out, start = [], 0
    for k in range(1, SLOTS + 1):
        if k == SLOTS or slots[k] != slots[start]:
            if slots[start]:
                out.append((start, k, slots[start]))
            start = k
    return out


class Workload:
    """Cached day-by-day schedules of a topology; every answer depends only on (seed, day)."""

    def __init__(self, seed: int, topology: Topology) -> None:
        self.seed = seed
        self.topology = topology
        self.groups: dict[str, list[str]] = {}  # pool -> training gangs in it
        self.gang_tenant: dict[str, str] = {}
        for unit in topology.units:
            if unit.role.kind == "training" and unit.role.group not in self.gang_tenant:
                self.groups.setdefault(unit.pool, []).append(unit.role.group)
                self.gang_tenant[unit.role.group] = unit.role.name
        self.scale = {s: max(1, -(-r // 8)) for s, r in topology.replicas.items()}
        self.service_pool = {}
        for unit in topology.units:
            if unit.role.kind == "inference":
                self.service_pool[unit.role.name] = unit.pool
        # Days are cached generously: backfills walk time once per series, so a window's days are
        # revisited thousands of times (segments are small; per-slot expansions are per unit).
        self.segments = lru_cache(maxsize=48)(self._segments)
        self.occupancy = lru_cache(maxsize=2)(self._occupancy)
        self.unit_slots = lru_cache(maxsize=4096)(self._unit_slots)
        self.service_day = lru_cache(maxsize=128)(self._service_day)
        self.gang_jobs = lru_cache(maxsize=4096)(self._gang_jobs)
        # unit index -> (first absolute slot, pods): a state set from outside (live views' tests), replacing the schedule.
        self.overrides: dict[int, tuple[int, tuple]] = {}

    def override(self, index: int, since_slot: int, pods: tuple) -> None:
        """From slot `since_slot` on, unit `index` is held by `pods` (none: free) instead of its schedule."""
        self.overrides[index] = (since_slot, pods)
        for cached in (self.segments, self.occupancy, self.unit_slots):
            cached.cache_clear()

    # ---- schedules ----

    def _gang_jobs(self, group: str, day: int) -> list[tuple[int, int, Pod]]:
        """Training jobs of a gang that overlap `day`, clipped to it, in day-relative slots."""
        lo, out = day * SLOTS, []
        for night in (day - 1, day):
            for a, b, pod in night_jobs(self.seed, group, self.gang_tenant[group], night):
                a, b = max(a, lo) - lo, min(b, lo + SLOTS) - lo
                if a < b:
                    out.append((a, b, pod))
        return out

    def _segments(self, day: int) -> list[list[tuple[int, int, tuple]]]:
        """Per unit: (first slot, end slot, pods) runs of the day; gaps are unoccupied."""
        out = []
        for unit in self.topology.units:
            role = unit.role
            if role.kind == "inference":
                dep = deploy_slot(self.seed, role.name, day)
                out.append([(0, dep, (inference_pod(self.seed, role.name, day - 1, role.replica),)),
                            (dep, SLOTS, (inference_pod(self.seed, role.name, day, role.replica),))])
            elif role.kind == "training":
                out.append([(a, b, (pod,)) for a, b, pod in self.gang_jobs(role.group, day)])
            elif role.kind == "etl":
                out.append([(a, b, (pod,)) for a, b, pod in etl_jobs(self.seed, unit.key, day)])
            elif role.kind == "scratch":
                out.append([(a, b, (pod,)) for a, b, pod in notebook_jobs(self.seed, unit.key, day)])
            elif role.kind == "shared":  # one GPU time-sliced by a preprocessing job and a notebook
                slots: list[tuple] = [EMPTY] * SLOTS
                for jobs in (etl_jobs(self.seed, unit.key, day), notebook_jobs(self.seed, unit.key ^ 1, day)):
                    for a, b, pod in jobs:
                        for k in range(a, b):
                            slots[k] = slots[k] + (pod,)
                out.append(_runs(slots))
            else:
                out.append([])
        for index, (since, pods) in self.overrides.items():
            cut = min(max(since - day * SLOTS, 0), SLOTS)
            runs = [(a, min(b, cut), p) for a, b, p in out[index] if a < cut]
            out[index] = runs + ([(cut, SLOTS, pods)] if pods and cut < SLOTS else [])
        return out

    def _occupancy(self, day: int) -> list[list[tuple]]:
        """Per unit, per slot of the day: the pods holding it."""
        return [self._unit_slots(i, day) for i in range(len(self.topology.units))]

    def _unit_slots(self, index: int, day: int) -> list[tuple]:
        """Per slot of the day: the pods holding unit `index`."""
        slots: list[tuple] = [EMPTY] * SLOTS
        for a, b, pods in self.segments(day)[index]:
            slots[a:b] = [pods] * (b - a)
        return slots

    def training_in_pool(self, pool: str, day: int) -> list[bool]:
        flags = [False] * SLOTS
        for group in self.groups.get(pool, ()):
            for a, b, _ in self.gang_jobs(group, day):
                flags[a:b] = [True] * (b - a)
        return flags

    def _service_day(self, service: str, day: int) -> ServiceDay:
        r = Random(h64(self.seed, "svc", service, day % CYCLE_DAYS))
        dep = deploy_slot(self.seed, service, day)
        training = self.training_in_pool(self.service_pool[service], day)
        scale = self.scale[service]
        state, n, f1, f2, sl, sums = ([0] * SLOTS for _ in range(6))
        bits = r.getrandbits
        for k in range(SLOTS):
            x = bits(64)  # one draw per minute, sliced (randint is too slow for 1440 x 7 calls)
            if training[k] and PEAK_START <= k < PEAK_END:
                st = SLOW  # training co-located through the peak: every request is slow
            elif dep - 3 <= k <= dep + 3:
                st = IDLE  # rollouts wait for a quiet spell
            else:
                st = ACTIVE if (x & 0xFFFF) < P_ACTIVE[k] else IDLE
            if st == IDLE:
                count = IDLE_COUNTS[(x >> 26) % 6]
            else:
                count = (240 + (x >> 16) % 241) * scale
            if st == SLOW:
                sl[k] = count
                sums[k] = count * (510 + (x >> 49) % 291)
            else:
                a = int(count * (0.55 + ((x >> 30) & 0xFF) / 1024))
                f1[k], f2[k] = a, count - a
                sums[k] = a * (18 + (x >> 38) % 28) + (count - a) * (55 + (x >> 43) % 41)
            state[k], n[k] = st, count
        prefix = [0, *accumulate(n)]
        flags = [[int(st == i) for st in state] for i in (IDLE, ACTIVE, SLOW)]
        before = list(zip(*([0, *accumulate(f)] for f in flags)))
        return ServiceDay(state, n, f1, f2, sl, sums, dep, prefix, before)

    # ---- derived per slot ----

    def unit_pct(self, pods: tuple, day: int, k: int) -> int:
        """Engine activity (percent) of a unit held by `pods` in slot k of `day`."""
        total = 0
        for pod in pods:
            total += INFERENCE_PCT[self.service_day(pod.service, day).state[k]] if pod.pct < 0 else pod.pct
        return min(PCT_CAP, total)

    def requests_until(self, service: str, t: float) -> int:
        """Requests the service completed in its day up to time t (exclusive of later ones)."""
        slot = -int(-t // 60) - 1
        day, k = divmod(slot, SLOTS)
        sd = self.service_day(service, day)
        return sd.prefix[k] + int(sd.n[k] * (t - slot * 60) / 60)

    def requests_between(self, service: str, t0: int, t1: int) -> int:
        """Requests the service completed in (t0, t1]."""
        d0, d1 = (-(-t0 // 60) - 1) // SLOTS, (-(-t1 // 60) - 1) // SLOTS
        total = self.requests_until(service, t1) - self.requests_until(service, t0)
        for day in range(d0, d1):
            total += self.service_day(service, day).prefix[SLOTS]
        return total


def unit_power_mw(unit: Unit, pct: int) -> int:
    """A unit's share of its GPU's dynamic power at `pct` activity (mW; integer so sums are exact)."""
    return unit.slices * pct * unit.node.model.span_mw // 700
