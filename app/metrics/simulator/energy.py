"""Power and the energy counter of each physical GPU, in integer mW and mJ so that sums are exact.

A GPU draws idle power plus each unit's share of dynamic power at its activity; power is
constant within a slot, so the counter (`DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION`) is exactly the
integral of the reported power. Because schedules repeat every 28 days (see workload), the
counter at any instant is a closed form: whole cycles + days of this cycle + the day so far.
"""

from __future__ import annotations

import threading

from app.metrics.simulator.cluster import Gpu, Unit, h64
from app.metrics.simulator.workload import CYCLE_DAYS, INFERENCE_PCT, PCT_CAP, SLOTS, Workload, unit_power_mw


class Energy:
    def __init__(self, workload: Workload) -> None:
        self.workload = workload
        self._cycle: dict[int, list[int]] | None = None  # gpu key -> energy (mJ) before each day of a cycle
        self._lock = threading.Lock()

    def power_mw(self, gpu: Gpu, day: int, k: int) -> int:
        """Power of the GPU during slot k of `day`."""
        total = gpu.node.model.idle_mw
        for unit in gpu.units:
            total += unit_power_mw(unit, self.workload.unit_pct(self.workload.unit_slots(unit.index, day)[k], day, k))
        return total

    def _unit_dynamic(self, unit: Unit, day: int, end: int) -> int:
        """Sum over slots [0, end) of the unit's dynamic power (mW x slots)."""
        role = unit.role
        if role.kind == "inference":
            counts = self.workload.service_day(role.name, day).states_before[end]
            return sum(c * unit_power_mw(unit, INFERENCE_PCT[s]) for s, c in enumerate(counts))
        total = 0
        for a, b, pods in self.workload.segments(day)[unit.index]:
            if a >= end:
                break
            total += (min(b, end) - a) * unit_power_mw(unit, min(PCT_CAP, sum(p.pct for p in pods)))
        return total

    def day_so_far_mj(self, gpu: Gpu, day: int, end: int) -> int:
        """Energy of slots [0, end) of `day`."""
        dynamic = sum(self._unit_dynamic(u, day, end) for u in gpu.units)
        return 60 * (gpu.node.model.idle_mw * end + dynamic)

    def _cycle_table(self) -> dict[int, list[int]]:
        with self._lock:
            if self._cycle is None:
                table = {g.key: [0] * (CYCLE_DAYS + 1) for g in self.workload.topology.gpus}
                for day in range(CYCLE_DAYS):  # Unix days 0..27 are the cycle's shapes 0..27
                    for gpu in self.workload.topology.gpus:
                        row = table[gpu.key]
                        row[day + 1] = row[day] + self.day_so_far_mj(gpu, day, SLOTS)
                self._cycle = table
            return self._cycle

    def counter_mj(self, gpu: Gpu, t: float) -> int:
        """The energy counter at time t (mJ since the simulated driver load)."""
        slot = -int(-t // 60) - 1
        day, k = divmod(slot, SLOTS)
        row = self._cycle_table()[gpu.key]
        cycles, shape = divmod(day, CYCLE_DAYS)
        base = 10**9 + h64(self.workload.seed, "energy", gpu.key) % 10**12
        partial = int(self.power_mw(gpu, day, k) * (t - slot * 60))
        return base + cycles * row[CYCLE_DAYS] + row[shape] + self.day_so_far_mj(gpu, day, k) + partial
