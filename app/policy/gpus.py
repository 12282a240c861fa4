"""The GPU catalogue: what a `modelName` label value means (family, memory, MIG profiles).

dcgm-exporter reports `modelName` as the driver spells it ("NVIDIA A100-SXM4-80GB",
"NVIDIA A800 80GB PCIe", "NVIDIA H100 80GB HBM3"), so matching works on the family token and
the memory figure in the name, not on exact strings.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache

# MIG profile names: "<compute slices>g.<memory>gb", optionally "+me" (media extensions).
PROFILE_RE = re.compile(r"^(\d+)g\.(\d+)gb(\+me)?$")


@dataclass(frozen=True)
class GpuModel:
    family: str  # "A100", "H100", "RTX 4090", ...
    memory_gb: int
    mig: bool
    slices: int = 0  # compute slices per GPU when MIG-capable (7, or 4 on A30)
    memory_slices: int = 0  # memory slices per GPU (8, or 4 on A30)
    profiles: tuple[str, ...] = ()

    @property
    def memory_mib(self) -> int:
        return self.memory_gb * 1024

    def profile_slices(self, profile: str) -> tuple[int, int]:
        """(compute slices, memory slices) that `profile` occupies on this GPU."""
        k, mem_gb, _ = parse_profile(profile)
        return k, max(1, round(mem_gb * self.memory_slices / self.memory_gb))


# The NVIDIA device plugin (and the GPU Operator) advertises each MIG profile under the mixed strategy as
# `nvidia.com/mig-<profile>`, with "+" (media extensions) written as "." since a resource name cannot
# hold "+": `nvidia.com/mig-3g.40gb`, `nvidia.com/mig-1g.10gb.me` (k8s-device-plugin internal/rm/rm.go,
# `strings.ReplaceAll("mig-"+p.String(), "+", ".")`). The single strategy advertises them as `nvidia.com/gpu`.
GPU_RESOURCE = "nvidia.com/gpu"


def mig_resource(profile: str) -> str:
    """The extended resource name a MIG profile is advertised under with the mixed strategy."""
    return f"nvidia.com/mig-{profile.strip().lower().replace('+', '.')}"


def parse_profile(profile: str) -> tuple[int, int, bool]:
    """Split "3g.40gb" / "1g.10gb+me" into (compute slices, memory GB, media extensions)."""
    match = PROFILE_RE.match(profile.strip().lower())
    if not match:
        raise ValueError(f"{profile!r} is not a MIG profile name like '3g.40gb'")
    return int(match.group(1)), int(match.group(2)), bool(match.group(3))


def _mig(family: str, memory_gb: int, profiles: list[str], me: str, slices: int = 7, memory_slices: int = 8) -> GpuModel:
    return GpuModel(family, memory_gb, True, slices, memory_slices, tuple(profiles) + (me,))


_A100_40 = ["1g.5gb", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"]
_A100_80 = ["1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"]

# (family, memory in GB) -> model; memory None = the family's only (or default) size.
_CATALOGUE: dict[tuple[str, int], GpuModel] = {
    ("A100", 40): _mig("A100", 40, _A100_40, "1g.5gb+me"),
    ("A100", 80): _mig("A100", 80, _A100_80, "1g.10gb+me"),
    ("A800", 40): _mig("A800", 40, _A100_40, "1g.5gb+me"),
    ("A800", 80): _mig("A800", 80, _A100_80, "1g.10gb+me"),
    ("H100", 80): _mig("H100", 80, _A100_80, "1g.10gb+me"),
    ("H100", 94): _mig("H100", 94, ["1g.12gb", "1g.24gb", "2g.24gb", "3g.47gb", "4g.47gb", "7g.94gb"], "1g.12gb+me"),
    ("H800", 80): _mig("H800", 80, _A100_80, "1g.10gb+me"),
    ("H200", 141): _mig("H200", 141, ["1g.18gb", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"], "1g.18gb+me"),
    ("H20", 96): _mig("H20", 96, ["1g.12gb", "1g.24gb", "2g.24gb", "3g.48gb", "4g.48gb", "7g.96gb"], "1g.12gb+me"),
    ("A30", 24): _mig("A30", 24, ["1g.6gb", "2g.12gb", "4g.24gb"], "1g.6gb+me", slices=4, memory_slices=4),
    ("RTX 4090", 24): GpuModel("RTX 4090", 24, False),
    ("RTX 3090", 24): GpuModel("RTX 3090", 24, False),
    ("L40S", 48): GpuModel("L40S", 48, False),
    ("L40", 48): GpuModel("L40", 48, False),
    ("L4", 24): GpuModel("L4", 24, False),
    ("A10", 24): GpuModel("A10", 24, False),
    ("A40", 48): GpuModel("A40", 48, False),
    ("T4", 16): GpuModel("T4", 16, False),
    ("V100", 32): GpuModel("V100", 32, False),
}
# Memory assumed when the label names none (the family's first or only size).
_DEFAULT_MEMORY = {"A100": 40, "A800": 80, "H100": 80, "H800": 80, "H200": 141, "H20": 96, "A30": 24,
                   "RTX 4090": 24, "RTX 3090": 24, "L40S": 48, "L40": 48, "L4": 24, "A10": 24, "A40": 48,
                   "T4": 16, "V100": 32}
# Longest tokens first so that "H200" is not read as "H20" nor "L40S" as "L40".
_FAMILY_RE = re.compile(r"\b(RTX 4090|RTX 3090|H200|H100|H800|H20|A100|A800|A30|A40|A10|L40S|L40|L4|T4|V100)\b")
_MEMORY_RE = re.compile(r"\b(\d{2,3})\s*GB\b")


@lru_cache(maxsize=256)
def lookup(model_name: str) -> GpuModel | None:
    """The catalogue entry for a `modelName` label value, or None when the model is unknown."""
    text = re.sub(r"[-_/]+", " ", model_name.upper())
    text = re.sub(r"\s+", " ", text).replace("GEFORCE ", "")
    family_match = _FAMILY_RE.search(text)
    if not family_match:
        return None
    family = family_match.group(1)
    memory_match = _MEMORY_RE.search(text)
    memory = int(memory_match.group(1)) if memory_match else _DEFAULT_MEMORY[family]
    if family == "H100" and "NVL" in text.split() and not memory_match:
        memory = 94
    found = _CATALOGUE.get((family, memory))
    if found is None:
        # A size the catalogue does not list (e.g. "H200 NVL 143GB"): the family's entry, if only one.
        sizes = [m for (f, _), m in _CATALOGUE.items() if f == family]
        found = sizes[0] if len(sizes) == 1 else None
    return found


def supports_mig(model_name: str) -> bool:
    """Whether the model can be MIG-partitioned (unknown models: no)."""
    found = lookup(model_name)
    return bool(found and found.mig)


def profiles(model_name: str) -> tuple[str, ...]:
    """The MIG profiles the model offers (empty for non-MIG or unknown models)."""
    found = lookup(model_name)
    return found.profiles if found else ()


def unit_fraction(model_name: str, profile: str | None) -> Fraction:
    """The share of a whole GPU one device is: 1 for a whole GPU, k/7 for a kg.* instance (k/4 on A30)."""
    if not profile:
        return Fraction(1)
    k, _, _ = parse_profile(profile)
    found = lookup(model_name)
    slices = found.slices if found and found.mig else 7
    return Fraction(min(k, slices), slices)
