"""The nvidia mig-parted configuration (`version: v1`, `mig-configs`) for the document's MIG layouts.

One named config per MIG node, named after the node; the node patch labels each node with
`nvidia.com/mig.config=<node>` so the GPU operator's mig-manager applies exactly that layout.
An `all-disabled` config is always present as the way back to whole GPUs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction

from app.core.errors import FieldError, Invalid
from app.policy import gpus
from app.policy.document import MigNode, PolicyDocument
from app.policy.validation import pool_model

ALL_DISABLED = "all-disabled"
_RANGE = re.compile(r"^\s*(\d+)\s*(?:-\s*(\d+)\s*)?$")


def expand_devices(spec: str, *, path: str = "devices") -> list[int]:
    """GPU indices from "0-3", "5" or "0,2,4-5" (sorted, unique); Invalid naming `path` otherwise."""
    indices: set[int] = set()
    for part in spec.split(","):
        match = _RANGE.match(part)
        if not match:
            raise Invalid("bad GPU index range", [FieldError(path, f"'{spec}' is not an index or range like 0-3")])
        low = int(match.group(1))
        high = int(match.group(2)) if match.group(2) is not None else low
        if high < low:
            raise Invalid("bad GPU index range", [FieldError(path, f"range '{part.strip()}' runs backwards")])
        indices.update(range(low, high + 1))
    return sorted(indices)


def node_config(node: str, layout: MigNode, gpus_per_node: int | None = None) -> list[dict]:
    """The mig-parted device entries of one node, ordered by first GPU index.

    GPUs of the node that the layout leaves out stay whole (`mig-enabled: false`), so applying the
    config also turns MIG off on a GPU a previous version had partitioned.
    """
    entries = []
    covered: set[int] = set()
    for spec, profiles in layout.gpus.items():
        devices = expand_devices(spec, path=f'isolation.mig["{node}"].gpus["{spec}"]')
        covered.update(devices)
        counts = {p: n for p, n in sorted(profiles.items()) if n > 0}
        if counts:
            entries.append({"devices": devices, "mig-enabled": True, "mig-devices": counts})
        else:
            entries.append({"devices": devices, "mig-enabled": False})
    whole = [i for i in range(gpus_per_node or 0) if i not in covered]
    if whole:
        entries.append({"devices": whole, "mig-enabled": False})
    return sorted(entries, key=lambda e: e["devices"])


def mig_parted_config(doc: PolicyDocument) -> dict:
    """The whole mig-parted config file as a dict."""
    configs: dict = {ALL_DISABLED: [{"devices": "all", "mig-enabled": False}]}
    for node in sorted(doc.isolation.mig):
        pool = doc.pool_for_node(node)
        configs[node] = node_config(node, doc.isolation.mig[node], pool.gpus_per_node if pool else None)
    return {"version": "v1", "mig-configs": configs}


@dataclass(frozen=True)
class MigSlices:
    """The instances of one MIG profile a pool's mixed-strategy layouts create."""

    profile: str
    resource: str  # nvidia.com/mig-<profile>
    count: int  # instances across the pool's nodes
    share: Fraction  # of a whole GPU per instance: k/7 (k/4 on A30), as SPEC section 4 bills them


def pool_mig_slices(doc: PolicyDocument, pool: str) -> list[MigSlices]:
    """The mixed-strategy MIG instances of a pool, by resource name.

    Single-strategy nodes are left out: the device plugin advertises their instances as
    `nvidia.com/gpu`, which the GPU quotas already cover (one unit = one instance there).
    """
    counts: dict[str, int] = {}
    shares: dict[str, Fraction] = {}
    for node, layout in doc.isolation.mig.items():
        owner = doc.pool_for_node(node)
        if owner is None or owner.name != pool or layout.mode != "mixed":
            continue
        model_name = layout.model or pool_model(doc, owner) or ""
        for spec, profiles in layout.gpus.items():
            devices = len(expand_devices(spec, path=f'isolation.mig["{node}"].gpus["{spec}"]'))
            for profile, count in profiles.items():
                if count > 0:
                    counts[profile] = counts.get(profile, 0) + devices * count
                    shares[profile] = gpus.unit_fraction(model_name, profile)
    found = [MigSlices(p, gpus.mig_resource(p), n, shares[p]) for p, n in counts.items()]
    return sorted(found, key=lambda s: s.resource)


def slices_for(gpu_count: int, slices: MigSlices) -> int:
    """Instances of a profile worth at most `gpu_count` GPUs, never more than the pool has."""
    return min(slices.count, int(gpu_count / slices.share))
