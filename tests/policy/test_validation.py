"""Every validation rule of SPEC section 3: one mutation of the valid example, exactly the expected errors."""

from __future__ import annotations

from decimal import Decimal

import pytest

from app.policy.document import PolicyDocument, Pool
from app.policy.validation import validate

A100 = "NVIDIA A100-SXM4-80GB"
MIG = 'isolation.mig["gpu-a100-02"]'
PRICE = {"purchase_price": 30000, "depreciation_years": 3, "hosting_per_hour": "0.2", "default_power_watts": 700}


def problems(data: dict, severity: str = "error", **kwargs) -> list[tuple[str, str]]:
    doc = PolicyDocument.model_validate(data)
    return [(e.path, e.message) for e in validate(doc, **kwargs) if e.severity == severity]


def test_the_example_is_valid_with_one_warning(data):
    assert problems(data) == []
    assert problems(data, "warning") == [
        (
            "isolation.inference.memory_reserve_factor",
            "no measured peak memory (DCGM_FI_DEV_FB_USED, last 7 days): the inference reserve is not checked against it",
        )
    ]


def _set_layout(layout):
    def mutate(d):
        d["isolation"]["mig"]["gpu-a100-02"]["gpus"] = layout

    return mutate


def _price_only(model):
    def mutate(d):
        d["pricing"]["gpu_models"] = {model: PRICE}

    return mutate


def _add_price(model):
    def mutate(d):
        d["pricing"]["gpu_models"][model] = PRICE

    return mutate


def _seq(*mutations):
    def mutate(d):
        for m in mutations:
            m(d)

    return mutate


CASES = {
    # unknown references
    "reservation-unknown-tenant": (
        lambda d: d["pools"][0]["reservations"].update(ghost=1),
        [("pools[mixed-a100].reservations.ghost", "unknown tenant 'ghost'")],
    ),
    "reservation-non-inference-tenant": (
        lambda d: d["pools"][0]["reservations"].update(vision=1),
        [("pools[mixed-a100].reservations.vision", "tenant 'vision' is training: only inference tenants hold reservations")],
    ),
    "sla-unknown-tenant": (
        lambda d: d["sla"][0].update(tenant="ghost"),
        [("sla[search-chat].tenant", "unknown tenant 'ghost'")],
    ),
    "sla-training-tenant": (
        lambda d: d["sla"][0].update(tenant="vision"),
        [("sla[search-chat].tenant", "tenant 'vision' is training: SLAs apply to inference tenants")],
    ),
    "sla-unknown-pool": (
        lambda d: d["sla"][0].update(pool="ghost-pool"),
        [("sla[search-chat].pool", "unknown pool 'ghost-pool'")],
    ),
    "quota-unknown-tenant": (
        lambda d: d["quotas"][0].update(tenant="ghost"),
        [("quotas[ghost/mixed-a100].tenant", "unknown tenant 'ghost'")],
    ),
    "quota-unknown-pool": (
        lambda d: d["quotas"][0].update(pool="ghost-pool"),
        [("quotas[vision/ghost-pool].pool", "unknown pool 'ghost-pool'")],
    ),
    "taints-unknown-pool": (
        lambda d: d["isolation"]["node_taints"].update({"ghost-pool": [{"key": "a", "effect": "NoSchedule"}]}),
        [("isolation.node_taints[\"ghost-pool\"]", "unknown pool 'ghost-pool'")],
    ),
    "mig-node-in-no-pool": (
        lambda d: d["isolation"]["mig"].update({"gpu-x-99": d["isolation"]["mig"]["gpu-a100-02"]}),
        [("isolation.mig[\"gpu-x-99\"]", "node 'gpu-x-99' is not in any pool")],
    ),
    "eviction-unknown-step": (
        lambda d: d["eviction_order"].append("delete-everything"),
        [(
            "eviction_order[3]",
            "unknown eviction step 'delete-everything': name a training or preprocessing tier or tenant, "
            "or one of shrink-training-batch, suspend-training",
        )],
    ),
    "eviction-of-inference": (
        lambda d: d["eviction_order"].insert(0, "inference-aux"),
        [("eviction_order[0]", "'inference-aux' is inference: inference is never evicted")],
    ),
    "eviction-listed-twice": (
        lambda d: d["eviction_order"].append("preprocessing"),
        [("eviction_order[3]", "'preprocessing' is listed twice")],
    ),
    # claims and duplicates
    "namespace-claimed-twice": (
        lambda d: d["tenants"][1]["namespaces"].append("search-prod"),
        [("tenants[vision].namespaces[1]", "namespace 'search-prod' is already claimed by tenant 'search'")],
    ),
    "namespace-listed-twice": (
        lambda d: d["tenants"][0]["namespaces"].append("search-prod"),
        [("tenants[search].namespaces[1]", "namespace 'search-prod' is listed twice")],
    ),
    "node-in-two-pools": (
        lambda d: d["pools"].append({"name": "other", "nodes": ["gpu-a100-02"]}),
        [("pools[other].nodes[0]", "node 'gpu-a100-02' is already in pool 'mixed-a100'")],
    ),
    "time-sliced-node-outside-the-pool": (
        lambda d: d["pools"][0].update(time_sliced_nodes=["gpu-a100-01", "gpu-l4-09"]),
        [("pools[mixed-a100].time_sliced_nodes[1]", "node 'gpu-l4-09' is not in this pool's nodes")],
    ),
    "duplicate-tenant": (
        lambda d: d["tenants"].append({"name": "etl", "department": "x", "namespaces": [], "class": "preprocessing"}),
        [("tenants[3].name", "duplicate tenant name 'etl' (first at tenants[2])")],
    ),
    "reserved-tenant-name": (
        lambda d: d["tenants"].append({"name": "unallocated", "department": "x", "class": "training"}),
        [("tenants[unallocated].name", "'unallocated' is reserved for use no tenant claims")],
    ),
    # The platform statement's account, and the monthly report's address /billing/<month>/report.
    "tenant-named-platform": (
        lambda d: d["tenants"].append({"name": "platform", "department": "x", "class": "training"}),
        [("tenants[platform].name", "'platform' is reserved for the platform statement")],
    ),
    "tenant-named-report": (
        lambda d: d["tenants"].append({"name": "report", "department": "x", "class": "training"}),
        [("tenants[report].name", "'report' is reserved for the monthly report (/billing/<month>/report)")],
    ),
    "duplicate-pool": (
        lambda d: d["pools"].append({"name": "mixed-a100", "nodes": ["gpu-h100-01"]}),
        [("pools[1].name", "duplicate pool name 'mixed-a100' (first at pools[0])")],
    ),
    "duplicate-service": (
        lambda d: d["sla"].append(dict(d["sla"][0])),
        [("sla[1].service", "duplicate service 'search-chat' (first at sla[0])")],
    ),
    "duplicate-priority-name": (
        lambda d: d["priorities"][3].update(name="training"),
        [("priorities[3].name", "duplicate tier name 'training' (first at priorities[2])")],
    ),
    "duplicate-quota": (
        lambda d: d["quotas"].append(dict(d["quotas"][0])),
        [("quotas[1]", "a second quota for tenant 'vision' in pool 'mixed-a100'")],
    ),
    # priorities
    "priority-value-reused": (
        lambda d: d["priorities"][1].update(value=1000000),
        [("priorities[inference-aux].value", "value 1000000 is also used by tier 'inference-core'")],
    ),
    "training-above-inference": (
        lambda d: d["priorities"][2].update(value=950000),
        [("priorities[training].value", "training tier 'training' (950000) must be below inference tier 'inference-aux' (900000)")],
    ),
    "preprocessing-above-training": (
        lambda d: d["priorities"][3].update(value=20000),
        [("priorities[preprocessing].value", "preprocessing tier 'preprocessing' (20000) must be below training tier 'training' (10000)")],
    ),
    "tiers-not-listed-highest-first": (
        lambda d: d["priorities"].insert(0, d["priorities"].pop(1)),
        [("priorities[inference-core].value", "tiers are listed highest first: 1000000 is above the previous tier 'inference-aux' (900000)")],
    ),
    "preemptible-inference": (
        lambda d: d["priorities"][0].update(preemptible=True),
        [("priorities[inference-core].preemptible", "inference tiers are never preemptible")],
    ),
    "tenant-class-without-tier": (
        lambda d: d["priorities"].pop(3),
        [("tenants[etl].class", "no priority tier has class 'preprocessing'")],
    ),
    # MIG
    "mig-profile-not-offered": (
        _set_layout({"0-3": {"5g.40gb": 1}, "4-7": {"7g.80gb": 1}}),
        [(f'{MIG}.gpus["0-3"]', "5g.40gb is not a profile of NVIDIA A100-SXM4-80GB")],
    ),
    "mig-40gb-profile-on-80gb-card": (
        _set_layout({"0-7": {"3g.20gb": 2}}),
        [(f'{MIG}.gpus["0-7"]', "3g.20gb is not a profile of NVIDIA A100-SXM4-80GB")],
    ),
    "mig-compute-slices-exceed-7": (
        _set_layout({"0-3": {"4g.40gb": 2}}),
        [(f'{MIG}.gpus["0-3"]', "profiles use 8 compute slices per GPU, above the 7 of NVIDIA A100-SXM4-80GB")],
    ),
    "mig-memory-slices-exceed-8": (
        _set_layout({"0-3": {"3g.40gb": 2, "1g.10gb": 1}}),
        [(f'{MIG}.gpus["0-3"]', "profiles use 9 memory slices per GPU, above the 8 of NVIDIA A100-SXM4-80GB")],
    ),
    "mig-two-media-extensions": (
        _set_layout({"0-3": {"1g.10gb+me": 2}}),
        [(f'{MIG}.gpus["0-3"]', "at most one +me instance per GPU")],
    ),
    "mig-zero-count": (
        _set_layout({"0-3": {"3g.40gb": 0}}),
        [(f'{MIG}.gpus["0-3"]', "3g.40gb: count must be at least 1")],
    ),
    "mig-empty-layout": (
        _set_layout({"0-3": {}}),
        [(f'{MIG}.gpus["0-3"]', "no profiles: leave whole GPUs out of the layout")],
    ),
    "mig-a30-exceeds-4-slices": (
        _seq(_price_only("NVIDIA A30"), _set_layout({"0-7": {"4g.24gb": 1, "1g.6gb": 1}})),
        [(f'{MIG}.gpus["0-7"]', "profiles use 5 compute slices per GPU, above the 4 of NVIDIA A30")],
    ),
    "mig-on-rtx-4090": (
        _price_only("NVIDIA GeForce RTX 4090"),
        [(MIG, "NVIDIA GeForce RTX 4090 does not support MIG")],
    ),
    "mig-on-l40s": (_price_only("NVIDIA L40S"), [(MIG, "NVIDIA L40S does not support MIG")]),
    "mig-on-l4": (_price_only("NVIDIA L4"), [(MIG, "NVIDIA L4 does not support MIG")]),
    "mig-bad-range": (
        _set_layout({"0-3": {"3g.40gb": 2}, "four": {"7g.80gb": 1}}),
        [(f"{MIG}.gpus.four", "'four' is not a GPU index or range like '0-3'")],
    ),
    "mig-backwards-range": (
        _set_layout({"3-0": {"3g.40gb": 2}}),
        [(f'{MIG}.gpus["3-0"]', "range '3-0' runs backwards")],
    ),
    "mig-overlapping-ranges": (
        _set_layout({"0-3": {"3g.40gb": 2}, "3-5": {"7g.80gb": 1}}),
        [(f'{MIG}.gpus["3-5"]', "GPUs overlap with '0-3'")],
    ),
    "mig-index-beyond-node": (
        _set_layout({"0-3": {"3g.40gb": 2}, "4-8": {"7g.80gb": 1}}),
        [(f'{MIG}.gpus["4-8"]', "GPU 8 is beyond the node's 8 GPUs (0-7)")],
    ),
    "mig-model-ambiguous": (
        _add_price("NVIDIA H100 80GB HBM3"),
        [(f"{MIG}.model", "pricing lists 2 GPU models: name this node's model")],
    ),
    "mig-model-unpriced": (
        lambda d: d["isolation"]["mig"]["gpu-a100-02"].update(model="NVIDIA H200"),
        [(f"{MIG}.model", "'NVIDIA H200' is not priced in pricing.gpu_models")],
    ),
    "mig-single-mode-two-profiles": (
        lambda d: d["isolation"]["mig"]["gpu-a100-02"].update(mode="single"),
        [(f"{MIG}.mode", "single mode uses one profile on every GPU; found 3g.40gb, 7g.80gb")],
    ),
    "pool-model-unpriced": (
        lambda d: d["pools"][0].update(gpu_model="NVIDIA H20"),
        [("pools[mixed-a100].gpu_model", "'NVIDIA H20' is not priced in pricing.gpu_models")],
    ),
    # quotas
    "quota-above-pool-gpus": (
        lambda d: d["quotas"][0].update(guaranteed_gpus=17),
        [("quotas[vision/mixed-a100].guaranteed_gpus", "guaranteed GPUs in pool 'mixed-a100' sum to 17, above its 16 GPUs (2 nodes x 8)")],
    ),
    "quotas-summing-above-pool-gpus": (
        lambda d: d["quotas"].append({"tenant": "etl", "pool": "mixed-a100", "guaranteed_gpus": 13}),
        [("quotas[etl/mixed-a100].guaranteed_gpus", "guaranteed GPUs in pool 'mixed-a100' sum to 17, above its 16 GPUs (2 nodes x 8)")],
    ),
    "quota-lends-more-than-guaranteed": (
        lambda d: d["quotas"][0].update(lending_limit=5),
        [("quotas[vision/mixed-a100].lending_limit", "lending_limit 5 exceeds guaranteed_gpus 4")],
    ),
    "number-too-large": (
        lambda d: d["pricing"]["gpu_models"][A100].update(purchase_price="1e13"),
        [(f"pricing.gpu_models[\"{A100}\"].purchase_price", "1E+13 is too large (limit 1,000,000,000,000)")],
    ),
    # isolation, SLA, colocation
    "memory-reserve-factor-below-1.2": (
        lambda d: d["isolation"]["inference"].update(memory_reserve_factor="1.1"),
        [("isolation.inference.memory_reserve_factor", "must be at least 1.2")],
    ),
    "sla-p99-absurd": (
        lambda d: d["sla"][0].update(p99_ms=1_000_000),
        [("sla[search-chat].p99_ms", "must be above 0 and at most 600000 ms")],
    ),
    "peak-window-unknown-tz": (
        lambda d: d["colocation"]["peak_windows"][0].update(tz="Mars/Olympus_Mons"),
        [("colocation.peak_windows[0].tz", "unknown time zone 'Mars/Olympus_Mons'")],
    ),
    "peak-window-empty": (
        lambda d: d["colocation"]["peak_windows"][0].update(end="09:00"),
        [("colocation.peak_windows[0].end", "must differ from start")],
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_rule(case, data):
    mutate, expected = CASES[case]
    mutate(data)
    assert problems(data) == expected


def test_mig_layouts_that_fit(data):
    data["isolation"]["mig"]["gpu-a100-02"]["gpus"] = {
        "0": {"1g.10gb": 7},
        "1-2": {"3g.40gb": 1, "4g.40gb": 1},
        "3": {"1g.10gb+me": 1, "2g.20gb": 1, "4g.40gb": 1},
        "4-7": {"7g.80gb": 1},
    }
    assert problems(data) == []


def test_mig_model_named_per_node_when_two_are_priced(data):
    data["pricing"]["gpu_models"]["NVIDIA H200"] = PRICE
    data["isolation"]["mig"]["gpu-a100-02"]["model"] = A100
    assert problems(data) == []
    data["isolation"]["mig"]["gpu-a100-02"]["model"] = "NVIDIA H200"
    assert problems(data) == [(f'{MIG}.gpus["0-3"]', "3g.40gb is not a profile of NVIDIA H200"),
                              (f'{MIG}.gpus["4-7"]', "7g.80gb is not a profile of NVIDIA H200")]


def test_mig_model_from_the_pool(data):
    data["pricing"]["gpu_models"]["NVIDIA H20"] = PRICE
    data["pools"][0]["gpu_model"] = "NVIDIA H20"
    data["isolation"]["mig"]["gpu-a100-02"]["gpus"] = {"0-7": {"3g.48gb": 2}}
    assert problems(data) == []


def test_pool_size_follows_gpus_per_node(data):
    data["pools"][0]["gpus_per_node"] = 2
    data["isolation"]["mig"] = {}
    assert problems(data) == []  # 4 guaranteed of 2 x 2 GPUs fits
    data["quotas"][0]["guaranteed_gpus"] = 5
    assert problems(data) == [
        ("quotas[vision/mixed-a100].guaranteed_gpus", "guaranteed GPUs in pool 'mixed-a100' sum to 5, above its 4 GPUs (2 nodes x 2)")
    ]


def test_training_network_cap_above_0_7_is_a_warning(data):
    data["isolation"]["training"]["network_cap_fraction"] = "0.8"
    assert problems(data) == []
    assert ("isolation.training.network_cap_fraction", "0.8 is above 0.7: training may starve inference of network") in problems(data, "warning")


def test_unknown_priced_model_is_a_warning(data):
    data["pricing"]["gpu_models"] = {"Acme Tensor 9000": PRICE}
    data["isolation"]["mig"] = {}
    assert problems(data) == []
    assert ("pricing.gpu_models[\"Acme Tensor 9000\"]", "'Acme Tensor 9000' is not in the GPU catalogue: treated as a whole GPU without MIG") in problems(data, "warning")


def test_mig_on_an_unknown_model_is_an_error(data):
    data["pricing"]["gpu_models"] = {"Acme Tensor 9000": PRICE}
    assert problems(data) == [(MIG, "Acme Tensor 9000 is not a known MIG-capable GPU")]


# Fractions: pydantic bounds them on parse; validate() checks documents built without it at the same path.
FRACTIONS = [
    ("pools[mixed-a100].reserved_fraction", lambda doc, v: doc.model_copy(update={"pools": [doc.pools[0].model_copy(update={"reserved_fraction": v})]})),
    ("pricing.dark_time_multiplier", lambda doc, v: doc.model_copy(update={"pricing": doc.pricing.model_copy(update={"dark_time_multiplier": v})})),
    ("isolation.training.network_cap_fraction", lambda doc, v: doc.model_copy(update={"isolation": doc.isolation.model_copy(
        update={"training": doc.isolation.training.model_copy(update={"network_cap_fraction": v})})})),
    ("isolation.inference.memory_buffer_fraction", lambda doc, v: doc.model_copy(update={"isolation": doc.isolation.model_copy(
        update={"inference": doc.isolation.inference.model_copy(update={"memory_buffer_fraction": v})})})),
]


@pytest.mark.parametrize(("path", "update"), FRACTIONS)
@pytest.mark.parametrize("value", [Decimal("-0.1"), Decimal("1.5")])
def test_fraction_outside_0_1(path, update, value, example_doc):
    doc = update(example_doc, value)
    errors = [(e.path, e.message) for e in validate(doc) if e.severity == "error"]
    assert errors == [(path, "must be between 0 and 1")]


def test_sla_penalty_and_p99_checked_without_pydantic(example_doc):
    bad = example_doc.sla[0].model_copy(update={"p99_ms": Decimal(0), "penalty_per_breach_minute": Decimal("-1")})
    errors = [(e.path, e.message) for e in validate(example_doc.model_copy(update={"sla": [bad]})) if e.severity == "error"]
    assert errors == [("sla[search-chat].p99_ms", "must be above 0 and at most 600000 ms"), ("sla[search-chat].penalty_per_breach_minute", "must be at least 0")]


# The measured-peak check: the example reserves 0.30 x 16 GPUs x 81920 MiB = 393216 MiB for `search`.
def test_reserve_below_1_2x_measured_peak_is_an_error(data):
    assert problems(data, measured_peak_mib={"search": 400_000}) == [
        ("pools[mixed-a100].reservations.search", "'search' reserves 393216 MiB of GPU memory, below 1.2 x its measured peak 400000 MiB")
    ]


def test_reserve_covering_1_2x_peak_passes(data):
    assert problems(data, measured_peak_mib={"search": 300_000}) == []
    assert problems(data, "warning", measured_peak_mib={"search": 300_000}) == []


def test_reserve_below_the_policy_factor_is_a_warning(data):
    data["isolation"]["inference"]["memory_reserve_factor"] = "1.5"
    assert problems(data, measured_peak_mib={"search": 300_000}) == []
    assert problems(data, "warning", measured_peak_mib={"search": 300_000}) == [
        ("pools[mixed-a100].reservations.search", "'search' reserves 393216 MiB of GPU memory, below 1.5 x its measured peak 300000 MiB")
    ]


def test_missing_peak_for_one_tenant_is_a_warning(data):
    assert problems(data, "warning", measured_peak_mib={}) == [
        ("tenants[search]", "no measured peak memory for 'search': its reserve is not checked")
    ]


def test_inference_tenant_without_reservation(data):
    data["pools"][0]["reservations"] = {}
    assert problems(data, measured_peak_mib={"search": 1000}) == [
        ("tenants[search]", "'search' reserves 0 MiB of GPU memory, below 1.2 x its measured peak 1000 MiB")
    ]


def test_additive_fields_default_to_8_gpus_and_the_only_priced_model():
    pool = Pool(name="p", nodes=["n"])
    assert (pool.gpus_per_node, pool.gpu_model) == (8, None)
