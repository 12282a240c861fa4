"""Kueue objects (kueue.x-k8s.io/v1beta2) rendered from a policy version.

Layout: one ResourceFlavor and one Cohort per pool; one ClusterQueue per (tenant, pool) quota,
member of its pool's cohort; one LocalQueue per (tenant namespace, quota); one
WorkloadPriorityClass per priority tier. Field names follow v1beta2, where a ClusterQueue joins a
cohort through `spec.cohortName` (v1beta1 called it `spec.cohort`) and Cohort is a v1beta2 kind
(it was v1alpha1 before).

With MIG in mixed mode a pool's ClusterQueues cover `nvidia.com/gpu` and each
`nvidia.com/mig-<profile>` its layouts advertise, in one resource group: Kueue requires every flavor
of a group to list exactly the group's `coveredResources`, in the same order. A quota of G GPUs is
the instances worth G GPUs of each profile (render_k8s.tenant_caps says how).
"""

from __future__ import annotations

from app.policy.document import PolicyDocument, Quota
from app.policy.gpus import GPU_RESOURCE
from app.policy.render_k8s import DOMAIN, POOL_LABEL, k8s_name, meta, pool_taints
from app.policy.render_mig import pool_mig_slices, slices_for

API_VERSION = "kueue.x-k8s.io/v1beta2"


def flavor_name(pool: str) -> str:
    """The ResourceFlavor (and Cohort) name of a pool."""
    return k8s_name(pool)


def cluster_queue_name(quota: Quota) -> str:
    """The ClusterQueue name of a (tenant, pool) quota."""
    return k8s_name(quota.tenant, quota.pool)


def _sorted_quotas(doc: PolicyDocument) -> list[Quota]:
    return sorted(doc.quotas, key=lambda q: (q.tenant, q.pool))


def resource_flavors(doc: PolicyDocument, version: int) -> list[dict]:
    """One ResourceFlavor per pool (one GPU model each), selecting its nodes by the label the node patches set."""
    out = []
    for pool in sorted(doc.pools, key=lambda p: p.name):
        taints = pool_taints(doc, pool.name)
        spec: dict = {"nodeLabels": {POOL_LABEL: k8s_name(pool.name)}}
        if taints:
            spec["nodeTaints"] = taints
            # Workloads admitted to this pool are co-located on purpose: Kueue adds these tolerations
            # to their pods so the isolation taints keep out only pods that did not go through Kueue.
            spec["tolerations"] = [
                {"key": t["key"], "operator": "Equal", "value": t["value"], "effect": t["effect"]}
                if "value" in t
                else {"key": t["key"], "operator": "Exists", "effect": t["effect"]}
                for t in taints
            ]
        notes = {f"{DOMAIN}/pool": pool.name, f"{DOMAIN}/gpus": str(len(pool.nodes) * pool.gpus_per_node)}
        model = pool.gpu_model or (next(iter(doc.pricing.gpu_models)) if len(doc.pricing.gpu_models) == 1 else None)
        if model:
            notes[f"{DOMAIN}/gpu-model"] = model
        mig = pool_mig_slices(doc, pool.name)
        if mig:
            notes[f"{DOMAIN}/mig-instances"] = ",".join(f"{s.resource}={s.count}" for s in mig)
        out.append(
            {
                "apiVersion": API_VERSION,
                "kind": "ResourceFlavor",
                "metadata": meta(flavor_name(pool.name), version, annotations=notes),
                "spec": spec,
            }
        )
    return out


def cohorts(doc: PolicyDocument, version: int) -> list[dict]:
    """One root Cohort per pool: its ClusterQueues lend and borrow unused GPUs among themselves."""
    return [
        {"apiVersion": API_VERSION, "kind": "Cohort", "metadata": meta(flavor_name(p.name), version), "spec": {}}
        for p in sorted(doc.pools, key=lambda p: p.name)
    ]


def _preemption(doc: PolicyDocument, klass: str) -> dict:
    if klass == "inference":
        # Inference takes back its guaranteed GPUs from any borrower, and when it borrows it may
        # preempt only preemptible tiers (never another inference tier).
        batch = [p.value for p in doc.priorities if p.preemptible]
        borrow: dict = {"policy": "LowerPriority"}
        if batch:
            borrow["maxPriorityThreshold"] = max(batch)
        else:
            borrow = {"policy": "Never"}
        return {"reclaimWithinCohort": "Any", "borrowWithinCohort": borrow, "withinClusterQueue": "LowerPriority"}
    # Batch tenants reclaim lent quota only from lower priorities (so never from inference) and
    # never preempt anyone to borrow: dark time is whatever is idle, not what can be taken.
    return {
        "reclaimWithinCohort": "LowerPriority",
        "borrowWithinCohort": {"policy": "Never"},
        "withinClusterQueue": "LowerPriority",
    }


def quota_resources(doc: PolicyDocument, quota: Quota) -> list[dict]:
    """The flavor's resource quotas of a (tenant, pool) quota: whole GPUs, then each MIG profile of the pool.

    Per profile: nominal = the instances worth the guaranteed GPUs, borrowing up to the instances worth
    guaranteed + borrowing GPUs, lending at most nominal (Kueue rejects a larger lendingLimit); all
    bounded by the instances the pool has.
    """
    out = [{
        "name": GPU_RESOURCE,
        "nominalQuota": quota.guaranteed_gpus,
        "borrowingLimit": quota.borrowing_limit,
        "lendingLimit": quota.lending_limit,
    }]
    for slices in pool_mig_slices(doc, quota.pool):
        nominal = slices_for(quota.guaranteed_gpus, slices)
        out.append({
            "name": slices.resource,
            "nominalQuota": nominal,
            "borrowingLimit": slices_for(quota.guaranteed_gpus + quota.borrowing_limit, slices) - nominal,
            "lendingLimit": min(nominal, slices_for(quota.lending_limit, slices)),
        })
    return out


def cluster_queues(doc: PolicyDocument, version: int) -> list[dict]:
    """One ClusterQueue per (tenant, pool) quota: nominal = guaranteed, with borrowing and lending limits."""
    out = []
    for quota in _sorted_quotas(doc):
        tenant = doc.tenant(quota.tenant)
        namespaces = sorted(tenant.namespaces) if tenant else []
        klass = tenant.klass if tenant else "training"
        resources = quota_resources(doc, quota)
        out.append(
            {
                "apiVersion": API_VERSION,
                "kind": "ClusterQueue",
                "metadata": meta(
                    cluster_queue_name(quota),
                    version,
                    annotations={f"{DOMAIN}/tenant": quota.tenant, f"{DOMAIN}/pool": quota.pool},
                ),
                "spec": {
                    "cohortName": flavor_name(quota.pool),
                    # Every namespace carries the automatic kubernetes.io/metadata.name label.
                    "namespaceSelector": {
                        "matchExpressions": [
                            {"key": "kubernetes.io/metadata.name", "operator": "In", "values": namespaces}
                        ]
                    },
                    "queueingStrategy": "BestEffortFIFO",
                    "resourceGroups": [
                        {
                            "coveredResources": [r["name"] for r in resources],
                            "flavors": [{"name": flavor_name(quota.pool), "resources": resources}],
                        }
                    ],
                    "preemption": _preemption(doc, klass),
                },
            }
        )
    return out


def local_queues(doc: PolicyDocument, version: int) -> list[dict]:
    """A LocalQueue named after the pool in each of the tenant's namespaces, per quota."""
    out = []
    for quota in _sorted_quotas(doc):
        tenant = doc.tenant(quota.tenant)
        for namespace in sorted(tenant.namespaces) if tenant else []:
            out.append(
                {
                    "apiVersion": API_VERSION,
                    "kind": "LocalQueue",
                    "metadata": meta(flavor_name(quota.pool), version, namespace=namespace),
                    "spec": {"clusterQueue": cluster_queue_name(quota)},
                }
            )
    return out


def workload_priority_classes(doc: PolicyDocument, version: int) -> list[dict]:
    """One WorkloadPriorityClass per tier, same name and value as its PriorityClass."""
    return [
        {
            "apiVersion": API_VERSION,
            "kind": "WorkloadPriorityClass",
            "metadata": meta(k8s_name(p.name), version),
            "value": p.value,
            "description": f"{p.klass} tier '{p.name}' ({'preemptible' if p.preemptible else 'non-preemptible'})",
        }
        for p in sorted(doc.priorities, key=lambda p: (-p.value, p.name))
    ]
