"""The seed policy document for a simulated cluster (SPEC section 3, colocation defaults of seed 000)."""

from __future__ import annotations

from app.metrics.simulator.cluster import A100, H100, MIG_POLICY_LAYOUT, POOL_A100, POOL_DEV, POOL_H100, RTX4090
from app.metrics.simulator.workload import ETL_NS, NAMESPACES, TRAINING_NS
from app.policy.document import PolicyDocument

SLA = {  # service -> (tenant, p99_ms, penalty per breach minute)
    "search-chat": ("search", 300, "0.50"),
    "assist-chat": ("assist", 500, "0.40"),  # red lines on vLLM bucket boundaries (0.3 s, 0.5 s)
}
PRICES = {
    A100.name: {"purchase_price": 26280, "depreciation_years": 3, "hosting_per_hour": "0.20", "default_power_watts": 400},
    H100.name: {"purchase_price": 35040, "depreciation_years": 3, "hosting_per_hour": "0.30", "default_power_watts": 700},
    RTX4090.name: {"purchase_price": 2190, "depreciation_years": 3, "hosting_per_hour": "0.05", "default_power_watts": 450},
}


def seed_policy(sim) -> PolicyDocument:
    """A policy consistent with `sim`'s nodes, namespaces and services; `scratch` stays unclaimed."""
    topo = sim.topology
    pools = []
    for name, model, reserved, holder in ((POOL_A100, A100, "0.30", "search"), (POOL_H100, H100, "0.30", "assist"),
                                          (POOL_DEV, RTX4090, "0", None)):
        nodes = topo.pool_nodes(name)
        pools.append({
            "name": name, "nodes": [n.name for n in nodes], "reserved_fraction": reserved,
            "reservations": {holder: 1} if holder else {},
            "gpus_per_node": max(len(n.gpus) for n in nodes), "gpu_model": model.name,
        })
    a100_nodes = topo.pool_nodes(POOL_A100)
    whole = sum(1 for n in a100_nodes if n.kind == "a100")
    mig = len(a100_nodes) - whole
    h100 = len(topo.pool_nodes(POOL_H100))
    dev = topo.pool_gpus(POOL_DEV)
    quotas = [
        {"tenant": "vision", "pool": POOL_A100, "guaranteed_gpus": 6 * whole + 4 * mig, "borrowing_limit": 4,
         "lending_limit": 2},
        {"tenant": "etl", "pool": POOL_A100, "guaranteed_gpus": 2 * whole, "borrowing_limit": 2, "lending_limit": 1},
        {"tenant": "nlp", "pool": POOL_H100, "guaranteed_gpus": 5 * h100, "borrowing_limit": 2, "lending_limit": 2},
        {"tenant": "etl", "pool": POOL_DEV, "guaranteed_gpus": min(3, dev), "borrowing_limit": 1, "lending_limit": 0},
    ]
    data = {
        "tenants": [
            {"name": "search", "department": "consumer", "namespaces": [NAMESPACES["search-chat"]], "class": "inference"},
            {"name": "assist", "department": "support", "namespaces": [NAMESPACES["assist-chat"]], "class": "inference"},
            {"name": "vision", "department": "research", "namespaces": [TRAINING_NS["vision"]], "class": "training"},
            {"name": "nlp", "department": "research", "namespaces": [TRAINING_NS["nlp"]], "class": "training"},
            {"name": "etl", "department": "data", "namespaces": [ETL_NS], "class": "preprocessing"},
        ],
        "pools": pools,
        "pricing": {"currency": "USD", "gpu_models": PRICES, "energy_price_per_kwh": "0.20", "pue": "1.25",
                    "dark_time_multiplier": "0.6"},
        "sla": [
            {"service": service, "tenant": tenant, "pool": sim.workload.service_pool[service],
             "requests": f'vllm:request_success_total{{namespace="{NAMESPACES[service]}"}}',
             "latency_histogram": f'vllm:e2e_request_latency_seconds_bucket{{namespace="{NAMESPACES[service]}"}}',
             "p99_ms": p99, "penalty_per_breach_minute": penalty}
            for service, (tenant, p99, penalty) in SLA.items()
        ],
        "colocation": {
            "idle_request_interval_s": 3, "idle_window_s": 180, "check_interval_s": 30, "max_batch_shrinks": 2,
            "min_runtime_s": 1800, "preemption_escalation_after": 5, "reschedule_cooldown_s": 300,
            "peak_windows": [{"start": "09:00", "end": "21:00", "tz": "Asia/Shanghai", "pre_suspend_minutes": 15}],
        },
        "priorities": [
            {"name": "inference-core", "value": 1000000, "class": "inference", "preemptible": False},
            {"name": "inference-aux", "value": 900000, "class": "inference", "preemptible": False},
            {"name": "training", "value": 10000, "class": "training", "preemptible": True},
            {"name": "preprocessing", "value": 1000, "class": "preprocessing", "preemptible": True},
        ],
        "eviction_order": ["preprocessing", "shrink-training-batch", "suspend-training"],
        "quotas": quotas,
        "isolation": {
            "mig": {n.name: {"mode": "mixed", "gpus": MIG_POLICY_LAYOUT} for n in a100_nodes if n.kind == "a100-mig"},
            "inference": {"memory_reserve_factor": "1.2", "memory_buffer_fraction": "0.2", "cpu_pinning": "cpuset",
                          "numa_affinity": True},
            "training": {"network_cap_fraction": "0.7", "cpu_policy": "cfs-quota"},
            "node_taints": {POOL_A100: [{"key": "workload", "value": "inference", "effect": "NoSchedule"}],
                            POOL_H100: [{"key": "workload", "value": "inference", "effect": "NoSchedule"}]},
        },
    }
    return PolicyDocument.model_validate(data)


def clusters_policy(sims: dict) -> PolicyDocument:
    """One document for several simulated clusters (cluster name -> Simulator), for demos and tests of clusters.

    Tenants are shared (a namespace is the same tenant's in every cluster); with more than one cluster each
    pool is named `<cluster>-<pool>` and each SLA service `<service>-<cluster>` (pool and service names are
    unique across clusters), while node names stay as each simulator has them: the same names in two
    clusters are two sets of nodes.
    """
    parts = []
    several = len(sims) > 1
    for cluster, sim in sims.items():
        data = sim.policy().to_data()
        for pool in data["pools"]:
            pool["name"] = f"{cluster}-{pool['name']}" if several else pool["name"]
            pool["cluster"] = cluster
        if several:
            for sla in data["sla"]:
                sla["service"], sla["pool"] = f"{sla['service']}-{cluster}", f"{cluster}-{sla['pool']}"
            for quota in data["quotas"]:
                quota["pool"] = f"{cluster}-{quota['pool']}"
            data["isolation"]["node_taints"] = {f"{cluster}-{p}": t for p, t in data["isolation"]["node_taints"].items()}
        parts.append(data)
    merged = parts[0]
    for data in parts[1:]:
        for key in ("pools", "sla", "quotas"):
            merged[key] += data[key]
        merged["isolation"]["node_taints"].update(data["isolation"]["node_taints"])
        merged["isolation"]["mig"].update(data["isolation"]["mig"])  # the same layout on the same node names
    return PolicyDocument.model_validate(merged)
