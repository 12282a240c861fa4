"""Policy documents for ingestion tests, built by name."""

from __future__ import annotations

from app.policy.document import PolicyDocument

A100 = "NVIDIA A100-SXM4-80GB"
RTX4090 = "NVIDIA GeForce RTX 4090"
# SPEC section 3's three tenants, one of each class.
SPEC_TENANTS = (
    {"name": "search", "department": "consumer", "namespaces": ["search-prod"], "class": "inference"},
    {"name": "vision", "department": "research", "namespaces": ["vision-train"], "class": "training"},
    {"name": "etl", "department": "data", "namespaces": ["data-prep"], "class": "preprocessing"},
)


def mixed_policy(**overrides) -> PolicyDocument:
    """Two pools (a MIG-partitioned A100 pool with an SLA service, an RTX 4090 pool without), three tenants."""
    data = {
        "tenants": [{**t, "namespaces": list(t["namespaces"])} for t in SPEC_TENANTS],
        "pools": [
            {"name": "mixed-a100", "nodes": ["gpu-a100-01", "gpu-a100-02"], "reserved_fraction": "0.30",
             "reservations": {"search": 1}, "gpus_per_node": 2, "gpu_model": A100},
            {"name": "rtx", "nodes": ["gpu-4090-01"], "reserved_fraction": "0", "gpus_per_node": 1, "gpu_model": RTX4090},
        ],
        "pricing": {
            "currency": "USD",
            "gpu_models": {
                A100: {"purchase_price": 26280, "depreciation_years": 3, "hosting_per_hour": "0.20", "default_power_watts": 400},
                RTX4090: {"purchase_price": 1800, "depreciation_years": 3, "hosting_per_hour": "0.05", "default_power_watts": 450},
            },
            "energy_price_per_kwh": "0.20", "pue": "1.25", "dark_time_multiplier": "0.6",
        },
        "sla": [{
            "service": "search-chat", "tenant": "search", "pool": "mixed-a100",
            "requests": 'vllm:request_success_total{namespace="search-prod"}',
            "latency_histogram": 'vllm:e2e_request_latency_seconds_bucket{namespace="search-prod"}',
            "p99_ms": 300, "penalty_per_breach_minute": "0.50",
        }],
        "colocation": {"idle_request_interval_s": 3, "idle_window_s": 180},
        "priorities": [
            {"name": "inference-core", "value": 1000000, "class": "inference", "preemptible": False},
            {"name": "training", "value": 10000, "class": "training", "preemptible": True},
            {"name": "preprocessing", "value": 1000, "class": "preprocessing", "preemptible": True},
        ],
        "eviction_order": ["preprocessing", "shrink-training-batch", "suspend-training"],
        "isolation": {"mig": {"gpu-a100-02": {"mode": "mixed", "gpus": {"0": {"3g.40gb": 2}}}}},
    }
    data.update(overrides)
    return PolicyDocument.model_validate(data)
