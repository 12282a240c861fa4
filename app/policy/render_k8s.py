"""Core Kubernetes objects rendered from a policy version: PriorityClass, ResourceQuota, LimitRange, Node patches.

Every renderer here is a pure function of (document, version) returning plain dicts in a fixed order,
so that the same version always yields the same bytes. Named lists are sorted by their key, so a
document that only reorders tenants or pools renders identically.
"""

from __future__ import annotations

import re
from decimal import Decimal

from app.policy.document import PolicyDocument, Quota, Taint, Tenant
from app.policy.gpus import GPU_RESOURCE
from app.policy.render_mig import pool_mig_slices, slices_for

# One label domain for everything the portal owns on the cluster side.
DOMAIN = "gpu-chargeback.io"
POOL_LABEL = f"{DOMAIN}/pool"
VERSION_LABEL = f"{DOMAIN}/policy-version"
MANAGED_BY = {"app.kubernetes.io/managed-by": "gpu-chargeback"}
# Kubernetes allows only the `requests.` prefix in a quota for extended resources (no overcommit).
QUOTA_PREFIX = "requests."
GPU_QUOTA_KEY = f"{QUOTA_PREFIX}{GPU_RESOURCE}"
# Label the NVIDIA GPU operator's mig-manager reads to pick a named mig-parted config for a node.
MIG_CONFIG_LABEL = "nvidia.com/mig.config"

_INVALID = re.compile(r"[^a-z0-9.-]+")


def k8s_name(*parts: str) -> str:
    """A DNS-1123 object name built from document names (lower-cased, other characters -> '-')."""
    raw = "-".join(parts).lower()
    name = _INVALID.sub("-", raw).strip("-.")
    return name[:253] or "unnamed"


def meta(name: str, version: int, *, namespace: str | None = None, annotations: dict | None = None) -> dict:
    """Object metadata carrying the managed-by and policy-version labels."""
    out: dict = {"name": name}
    if namespace is not None:
        out["namespace"] = namespace
    out["labels"] = {**MANAGED_BY, VERSION_LABEL: str(version)}
    if annotations:
        out["annotations"] = dict(sorted(annotations.items()))
    return out


def dec(value: Decimal) -> str:
    """A Decimal as plain positional text (no exponent), trailing zeros removed."""
    return format(value.normalize(), "f")


def tenant_quotas(doc: PolicyDocument, tenant: str) -> list[Quota]:
    """The tenant's quotas, ordered by pool."""
    return sorted((q for q in doc.quotas if q.tenant == tenant), key=lambda q: q.pool)


def mig_resources(doc: PolicyDocument) -> list[str]:
    """Every `nvidia.com/mig-<profile>` resource the document's mixed-strategy layouts advertise, sorted."""
    return sorted({s.resource for pool in doc.pools for s in pool_mig_slices(doc, pool.name)})


def gpu_resources(doc: PolicyDocument) -> list[str]:
    """The GPU resources a tenant namespace is governed on: whole GPUs, then each MIG profile."""
    return [GPU_RESOURCE, *mig_resources(doc)]


def tenant_caps(doc: PolicyDocument, tenant: str) -> dict[str, int] | None:
    """Most of each GPU resource the tenant may hold at once, None when it has no quotas.

    A quota of G GPUs in a pool allows, of each MIG profile the pool's layouts offer, the instances
    worth G GPUs (k/7 of a GPU each, as they are billed), at most as many as the pool has. Each
    resource is capped on its own: Kubernetes and Kueue cannot cap a weighted sum across resources.
    A profile the tenant's pools do not offer is capped at 0, so no MIG resource is left ungoverned.
    """
    quotas = tenant_quotas(doc, tenant)
    if not quotas:
        return None
    caps = dict.fromkeys(gpu_resources(doc), 0)
    for quota in quotas:
        gpus = quota.guaranteed_gpus + quota.borrowing_limit
        caps[GPU_RESOURCE] += gpus
        for slices in pool_mig_slices(doc, quota.pool):
            caps[slices.resource] += slices_for(gpus, slices)
    return caps


def priority_classes(doc: PolicyDocument, version: int) -> list[dict]:
    """One scheduling.k8s.io/v1 PriorityClass per priority tier, highest first."""
    out = []
    for tier in sorted(doc.priorities, key=lambda p: (-p.value, p.name)):
        # preemptionPolicy says whether pods of this class may evict others, not whether they can be
        # evicted: protection from eviction comes from the value being above every preemptible tier.
        # Inference tiers must be able to push training off a GPU, so they preempt lower priorities.
        # Preemptible batch tiers never evict through the kube-scheduler: Kueue decides their
        # admission and preemption by quota, and the co-location controller shrinks/suspends at
        # checkpoints; a scheduler eviction would bypass both.
        policy = "PreemptLowerPriority" if not tier.preemptible else "Never"
        kind = "non-preemptible" if not tier.preemptible else "preemptible"
        out.append(
            {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": meta(k8s_name(tier.name), version, annotations={f"{DOMAIN}/class": tier.klass}),
                "value": tier.value,
                "globalDefault": False,
                "preemptionPolicy": policy,
                "description": f"{tier.klass} tier '{tier.name}' ({kind}), policy version {version}",
            }
        )
    return out


def _tenants(doc: PolicyDocument) -> list[Tenant]:
    return sorted(doc.tenants, key=lambda t: t.name)


def resource_quotas(doc: PolicyDocument, version: int) -> list[dict]:
    """A ResourceQuota capping `requests.nvidia.com/gpu` and every MIG resource in each namespace of a tenant with quotas."""
    out = []
    for tenant in _tenants(doc):
        caps = tenant_caps(doc, tenant.name)
        # A tenant without quotas (typically inference, entitled by pool reservations) is uncapped in
        # the document; a zero quota would block serving, so it gets no ResourceQuota at all.
        if caps is None:
            continue
        # A namespace quota cannot see the tenant's other namespaces, so each carries the tenant-wide
        # cap as a hard backstop; Kueue's ClusterQueue enforces the exact per-pool split across them.
        pools = ",".join(q.pool for q in tenant_quotas(doc, tenant.name))
        for namespace in sorted(tenant.namespaces):
            out.append(
                {
                    "apiVersion": "v1",
                    "kind": "ResourceQuota",
                    "metadata": meta(
                        "gpu-quota",
                        version,
                        namespace=namespace,
                        annotations={f"{DOMAIN}/tenant": tenant.name, f"{DOMAIN}/pools": pools},
                    ),
                    "spec": {"hard": {f"{QUOTA_PREFIX}{r}": str(n) for r, n in caps.items()}},
                }
            )
    return out


def _isolation_annotations(doc: PolicyDocument, tenant: Tenant) -> dict[str, str]:
    iso = doc.isolation
    notes = {f"{DOMAIN}/tenant": tenant.name, f"{DOMAIN}/class": tenant.klass}
    if tenant.klass == "inference":
        # Read by the serving side's admission hook: reserve factor x measured peak of GPU memory.
        notes[f"{DOMAIN}/memory-reserve-factor"] = dec(iso.inference.memory_reserve_factor)
        notes[f"{DOMAIN}/memory-buffer-fraction"] = dec(iso.inference.memory_buffer_fraction)
        notes[f"{DOMAIN}/cpu-pinning"] = iso.inference.cpu_pinning
        notes[f"{DOMAIN}/numa-affinity"] = "true" if iso.inference.numa_affinity else "false"
    else:
        notes[f"{DOMAIN}/network-cap-fraction"] = dec(iso.training.network_cap_fraction)
        notes[f"{DOMAIN}/cpu-policy"] = iso.training.cpu_policy
    return notes


def limit_ranges(doc: PolicyDocument, version: int) -> list[dict]:
    """A LimitRange per tenant namespace: GPU per-container bounds plus isolation settings as annotations."""
    out = []
    for tenant in _tenants(doc):
        # No `default` GPU request: a defaulted extended resource would hand a GPU to every sidecar
        # and init container. Requests must equal limits for GPUs (ratio 1), capped by the quota.
        container: dict = {"type": "Container"}
        caps = tenant_caps(doc, tenant.name)
        if caps is not None:
            container["max"] = {r: str(n) for r, n in caps.items()}
        container["maxLimitRequestRatio"] = dict.fromkeys(gpu_resources(doc), "1")
        for namespace in sorted(tenant.namespaces):
            out.append(
                {
                    "apiVersion": "v1",
                    "kind": "LimitRange",
                    "metadata": meta(
                        "gpu-limits", version, namespace=namespace, annotations=_isolation_annotations(doc, tenant)
                    ),
                    "spec": {"limits": [container]},
                }
            )
    return out


def _taint(t: Taint) -> dict:
    out = {"key": t.key}
    if t.value:
        out["value"] = t.value
    out["effect"] = t.effect
    return out


def pool_taints(doc: PolicyDocument, pool: str) -> list[dict]:
    """The pool's isolation taints as Kubernetes taint dicts, sorted by (key, effect)."""
    taints = doc.isolation.node_taints.get(pool, [])
    return [_taint(t) for t in sorted(taints, key=lambda t: (t.key, t.effect, t.value))]


def node_patches(doc: PolicyDocument, version: int) -> list[dict]:
    """A partial `kind: Node` per node: pool label, mig-parted config label, and the pool's taints.

    Apply with `kubectl apply --server-side --field-manager=gpu-chargeback` or as a strategic-merge
    patch. The taint list is the pool's full isolation set (empty when the document lists none), so
    removing a taint from the policy removes it from the node too.
    """
    nodes: dict[str, str | None] = {}
    for pool in doc.pools:
        for node in pool.nodes:
            nodes.setdefault(node, pool.name)
    for node in doc.isolation.mig:
        nodes.setdefault(node, None)
    out = []
    for node in sorted(nodes):
        pool = nodes[node]
        m = meta(node, version)
        if pool is not None:
            m["labels"][POOL_LABEL] = k8s_name(pool)
        if node in doc.isolation.mig:
            m["labels"][MIG_CONFIG_LABEL] = node
        m["labels"] = dict(sorted(m["labels"].items()))
        out.append(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": m,
                "spec": {"taints": pool_taints(doc, pool) if pool is not None else []},
            }
        )
    return out
