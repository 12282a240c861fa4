"""Policy documents for tests: the SPEC example and a larger layout as plain data, rendered-bundle readers."""

from __future__ import annotations

import yaml

from app.policy.document import PolicyDocument
from app.policy.render import MIG_FILE, RULES_FILE

PROMTOOL = "/usr/bin/promtool"

# The SPEC section 3 example, kept here so these tests do not depend on examples/policy.yaml.
SPEC_EXAMPLE = """
tenants:
  - {name: search, department: consumer, namespaces: [search-prod], class: inference}
  - {name: vision, department: research, namespaces: [vision-train], class: training}
  - {name: etl,    department: data,     namespaces: [data-prep],   class: preprocessing}
pools:
  - name: mixed-a100
    nodes: [gpu-a100-01, gpu-a100-02]
    reserved_fraction: 0.30
    reservations: {search: 1}
pricing:
  currency: USD
  gpu_models:
    "NVIDIA A100-SXM4-80GB": {purchase_price: 26280, depreciation_years: 3, hosting_per_hour: 0.20, default_power_watts: 400}
  energy_price_per_kwh: 0.20
  pue: 1.25
  dark_time_multiplier: 0.6
sla:
  - service: search-chat
    tenant: search
    pool: mixed-a100
    requests: 'vllm:request_success_total{namespace="search-prod"}'
    latency_histogram: 'vllm:e2e_request_latency_seconds_bucket{namespace="search-prod"}'
    p99_ms: 300
    penalty_per_breach_minute: 0.50
colocation:
  idle_request_interval_s: 3
  idle_window_s: 180
  check_interval_s: 30
  max_batch_shrinks: 2
  min_runtime_s: 1800
  preemption_escalation_after: 5
  reschedule_cooldown_s: 300
  peak_windows: [{start: "09:00", end: "21:00", tz: "Asia/Shanghai", pre_suspend_minutes: 15}]
priorities:
  - {name: inference-core, value: 1000000, class: inference, preemptible: false}
  - {name: inference-aux,  value: 900000,  class: inference, preemptible: false}
  - {name: training,       value: 10000,   class: training, preemptible: true}
  - {name: preprocessing,  value: 1000,    class: preprocessing, preemptible: true}
eviction_order: [preprocessing, shrink-training-batch, suspend-training]
quotas:
  - {tenant: vision, pool: mixed-a100, guaranteed_gpus: 4, borrowing_limit: 4, lending_limit: 2}
isolation:
  mig:
    gpu-a100-02: {mode: mixed, gpus: {"0-3": {"3g.40gb": 2}, "4-7": {"7g.80gb": 1}}}
  inference: {memory_reserve_factor: 1.2, memory_buffer_fraction: 0.2, cpu_pinning: cpuset, numa_affinity: true}
  training:  {network_cap_fraction: 0.7, cpu_policy: cfs-quota}
  node_taints: {mixed-a100: [{key: workload, value: inference, effect: NoSchedule}]}
"""


def spec_data() -> dict:
    """The SPEC example as plain data (fresh copy each call)."""
    return yaml.safe_load(SPEC_EXAMPLE)


def larger_data() -> dict:
    """The SPEC example plus a second pool, tenants with several namespaces and quotas, two SLAs."""
    data = spec_data()
    data["tenants"].append({"name": "nlp", "department": "research", "namespaces": ["nlp-b", "nlp-a"], "class": "training"})
    data["tenants"].append({"name": "ads", "department": "consumer", "namespaces": ["ads-serve"], "class": "inference"})
    data["pools"].append(
        {"name": "train-h100", "nodes": ["gpu-h100-01", "gpu-h100-02", "gpu-h100-03"], "reserved_fraction": 0,
         "gpus_per_node": 4, "gpu_model": "NVIDIA H100 80GB HBM3"}
    )
    data["pricing"]["gpu_models"]["NVIDIA H100 80GB HBM3"] = {
        "purchase_price": 40000, "depreciation_years": 4, "hosting_per_hour": 0.3, "default_power_watts": 700}
    data["pools"][0]["gpu_model"] = "NVIDIA A100-SXM4-80GB"
    data["sla"].append(
        {"service": "ads-rank", "tenant": "ads", "pool": "mixed-a100", "requests": "rank_requests_total",
         "latency_histogram": 'rank_latency_seconds_bucket{job="ads"}', "p99_ms": "87.5",
         "penalty_per_breach_minute": 2}
    )
    data["quotas"] += [
        {"tenant": "nlp", "pool": "train-h100", "guaranteed_gpus": 6, "borrowing_limit": 2, "lending_limit": 6},
        {"tenant": "nlp", "pool": "mixed-a100", "guaranteed_gpus": 2, "borrowing_limit": 0, "lending_limit": 0},
        {"tenant": "ads", "pool": "mixed-a100", "guaranteed_gpus": 2, "borrowing_limit": 1, "lending_limit": 0},
    ]
    data["isolation"]["mig"]["gpu-h100-03"] = {"gpus": {"0-1": {"1g.10gb": 7}, "3": {"3g.40gb": 1, "4g.40gb": 1}}}
    data["isolation"]["node_taints"]["train-h100"] = [
        {"key": "gpu", "effect": "NoExecute"}, {"key": "dedicated", "value": "training", "effect": "NoSchedule"}]
    return data


def doc_of(data: dict) -> PolicyDocument:
    return PolicyDocument.model_validate(data)


# libyaml's loader when present: parsing is what these tests spend their time on.
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def objects_of(bundle: dict[str, str], name: str) -> list[dict]:
    return [d for d in yaml.load_all(bundle[name], Loader=_Loader) if d is not None]


def all_objects(bundle: dict[str, str]) -> list[dict]:
    return [o for name in bundle if name.endswith(".yaml") and name not in (MIG_FILE, RULES_FILE) for o in objects_of(bundle, name)]


def by_kind(bundle: dict[str, str], kind: str) -> list[dict]:
    return [o for o in all_objects(bundle) if o["kind"] == kind]


def laughs(levels: int, fanout: int = 9) -> str:
    """The "billion laughs" document: each level an anchored list of `fanout` aliases of the one before."""
    lines = ['l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * fanout)}]" for i in range(1, levels)]
    return "\n".join(lines)
