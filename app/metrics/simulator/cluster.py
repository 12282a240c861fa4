"""Topology of the simulated fleet: nodes, physical GPUs and GPU units, a pure function of (seed, gpus).

Eight GPUs per node (fewer on the last). Node 0 is a whole-GPU A100 node, node 1 an A100 node
partitioned with MIG (GPUs 0-3 as two 3g.40gb, 4-7 as one 7g.80gb; every 16th node after it
too), the last node is a developer RTX 4090 box, and the rest alternate H100 and whole A100.
H100 nodes run a newer dcgm-exporter that spells the host label `hostname`.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from fractions import Fraction

GPUS_PER_NODE = 8
MIN_GPUS = 25  # four nodes: every kind of node (and so every pool and service) exists


def h64(*parts: object) -> int:
    """A stable 64-bit hash of the parts (the simulator's only source of randomness)."""
    text = "\x1f".join(str(p) for p in parts).encode()
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "big")


@dataclass(frozen=True)
class ModelSpec:
    name: str  # the modelName label, as the driver spells it
    memory_mib: int
    idle_mw: int  # power draw with nothing running
    span_mw: int  # extra draw at 100 % activity
    driver: str
    datacenter: bool  # reports DCGM_FI_PROF_* (GeForce cards do not)
    bus_ids: tuple[int, ...]


A100 = ModelSpec("NVIDIA A100-SXM4-80GB", 81920, 58_000, 342_000, "535.183.01", True,
                 (0x07, 0x0F, 0x47, 0x4E, 0x87, 0x90, 0xB7, 0xBD))
H100 = ModelSpec("NVIDIA H100 80GB HBM3", 81559, 72_000, 628_000, "550.90.07", True,
                 (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB))
RTX4090 = ModelSpec("NVIDIA GeForce RTX 4090", 24564, 18_000, 432_000, "550.54.14", False,
                    (0x01, 0x21, 0x41, 0x61, 0x81, 0xA1, 0xC1, 0xE1))

POOL_A100, POOL_H100, POOL_DEV = "mixed-a100", "h100", "dev"
# MIG layout of a partitioned A100 node: GPU index -> [(GPU_I_ID, profile, compute slices, MiB)].
MIG_LAYOUT = {g: [(1, "3g.40gb", 3, 40960), (2, "3g.40gb", 3, 40960)] for g in range(4)} | {
    g: [(0, "7g.80gb", 7, 81920)] for g in range(4, 8)
}
MIG_POLICY_LAYOUT = {"0-3": {"3g.40gb": 2}, "4-7": {"7g.80gb": 1}}


@dataclass(frozen=True)
class Role:
    """What runs on a unit: an inference replica, a training gang, preprocessing, notebooks."""

    kind: str  # inference | training | etl | scratch | shared | none
    name: str = ""  # service (inference) or tenant (training)
    replica: int = 0  # inference replica index within the service
    group: str = ""  # training gang (one pod per node and job)


@dataclass(eq=False)
class Unit:
    """A whole GPU or a MIG instance: what one occupancy series describes."""

    index: int
    key: int  # hash used for per-unit schedules and sample jitter
    node: Node
    gpu: Gpu
    gpu_instance: str  # GPU_I_ID, "" for a whole GPU
    profile: str  # GPU_I_PROFILE, "" for a whole GPU
    slices: int  # compute slices out of 7 (7 for a whole GPU)
    memory_mib: int
    role: Role

    @property
    def fraction(self) -> Fraction:
        return Fraction(self.slices, 7)

    @property
    def pool(self) -> str:
        return self.node.pool

    def base_labels(self) -> list[tuple[str, str]]:
        """dcgm-exporter's device labels in its own order, without the pod mapping."""
        labels = [("gpu", str(self.gpu.index)), ("UUID", self.gpu.uuid), ("pci_bus_id", self.gpu.pci_bus_id),
                  ("device", f"nvidia{self.gpu.index}"), ("modelName", self.node.model.name),
                  (self.node.host_label, self.node.name), ("DCGM_FI_DRIVER_VERSION", self.node.model.driver)]
        if self.gpu_instance:
            labels += [("GPU_I_PROFILE", self.profile), ("GPU_I_ID", self.gpu_instance)]
        return labels


@dataclass(eq=False)
class Gpu:
    index: int  # position on its node (the `gpu` label)
    key: int
    node: Node
    uuid: str
    pci_bus_id: str
    units: list[Unit] = field(default_factory=list)

    @property
    def mig(self) -> bool:
        return bool(self.units and self.units[0].gpu_instance)


@dataclass(eq=False)
class Node:
    name: str
    kind: str  # a100 | a100-mig | h100 | 4090
    model: ModelSpec
    pool: str
    host_label: str  # "Hostname" or "hostname"
    gpus: list[Gpu] = field(default_factory=list)


@dataclass
class Topology:
    nodes: list[Node]
    gpus: list[Gpu]
    units: list[Unit]
    replicas: dict[str, int]  # inference service -> replica count

    def pool_nodes(self, pool: str) -> list[Node]:
        return [n for n in self.nodes if n.pool == pool]

    def pool_gpus(self, pool: str) -> int:
        return sum(len(n.gpus) for n in self.nodes if n.pool == pool)


def _uuid(seed: int, node: str, index: int) -> str:
    x = f"{h64(seed, 'uuid', node, index):016x}{h64(seed, 'uuid2', node, index):016x}"
    return f"GPU-{x[:8]}-{x[8:12]}-{x[12:16]}-{x[16:20]}-{x[20:32]}"


def _node_kinds(count: int) -> list[str]:
    kinds = []
    for i in range(count):
        if i == count - 1:
            kinds.append("4090")
        elif i == 0:
            kinds.append("a100")
        elif i % 16 == 1:
            kinds.append("a100-mig")
        else:
            kinds.append("h100" if i % 2 == 0 else "a100")
    return kinds


# Role of each GPU index on a node of a kind (MIG instances: per instance, see _roles_for).
WHOLE_ROLES = {
    "a100": ["training"] * 6 + ["etl"] * 2,
    "h100": ["inference"] * 2 + ["training"] * 5 + ["scratch"],
    "4090": ["shared", "etl", "etl", "etl", "scratch", "scratch", "none", "none"],
}
TRAINING_TENANT = {POOL_A100: "vision", POOL_H100: "nlp"}
POOL_SERVICE = {POOL_A100: "search-chat", POOL_H100: "assist-chat"}


def build_topology(seed: int, gpus: int) -> Topology:
    """Lay out `gpus` GPUs on nodes, pools and units (see the module docstring)."""
    if gpus < MIN_GPUS:
        raise ValueError(f"the simulator needs at least {MIN_GPUS} GPUs (four nodes), got {gpus}")
    count = -(-gpus // GPUS_PER_NODE)
    numbers: dict[str, int] = {}
    nodes, all_gpus, units = [], [], []
    replicas: dict[str, int] = {}
    for i, kind in enumerate(_node_kinds(count)):
        family = {"a100": "a100", "a100-mig": "a100", "h100": "h100", "4090": "4090"}[kind]
        numbers[family] = numbers.get(family, 0) + 1
        name = f"gpu-{family}-{numbers[family]:02d}"
        model = {"a100": A100, "h100": H100, "4090": RTX4090}[family]
        pool = {"a100": POOL_A100, "h100": POOL_H100, "4090": POOL_DEV}[family]
        node = Node(name, kind, model, pool, "hostname" if family == "h100" else "Hostname")
        nodes.append(node)
        size = gpus - GPUS_PER_NODE * (count - 1) if i == count - 1 else GPUS_PER_NODE
        for g in range(size):
            gpu = Gpu(g, h64(seed, "gpu", name, g), node, _uuid(seed, name, g), f"00000000:{model.bus_ids[g]:02X}:00.0")
            node.gpus.append(gpu)
            all_gpus.append(gpu)
            if kind == "a100-mig":
                layout = MIG_LAYOUT[g]
            else:
                layout = [("", "", 7, model.memory_mib)]
            for gi, profile, slices, mib in layout:
                if kind == "a100-mig":
                    kind_of = "inference" if slices == 3 else "training"
                else:
                    kind_of = WHOLE_ROLES[family][g]
                role = Role(kind_of)
                if kind_of == "inference":
                    service = POOL_SERVICE[pool]
                    role = Role("inference", service, replicas.get(service, 0))
                    replicas[service] = role.replica + 1
                elif kind_of == "training":
                    role = Role("training", TRAINING_TENANT[pool], group=name)
                unit = Unit(len(units), h64(seed, "unit", name, g, gi), node, gpu, str(gi) if gi != "" else "",
                            profile, slices, mib, role)
                gpu.units.append(unit)
                units.append(unit)
    return Topology(nodes, all_gpus, units, replicas)
