"""Semantic diff and three-way merge of policy documents."""

from __future__ import annotations

import copy
import functools
import json

from hypothesis import given, settings
from hypothesis import strategies as st

from app.policy.diff import Change, Conflict, diff, three_way_merge
from app.policy.document import PolicyDocument
from tests.support.policy_docs import spec_data

A100 = "NVIDIA A100-SXM4-80GB"


@functools.cache
def _base() -> dict:
    return PolicyDocument.model_validate(spec_data()).to_data()


def base() -> dict:
    """The SPEC example as `PolicyDocument.to_data()` gives it (a fresh copy)."""
    return copy.deepcopy(_base())


def edited(fn) -> dict:
    data = base()
    fn(data)
    return data


def ops(changes: list[Change]) -> set[tuple[str, str]]:
    return {(c.path, c.op) for c in changes}


# --- diff ---------------------------------------------------------------------------------------


def test_identical_documents_have_no_changes():
    assert diff(base(), base()) == []


def test_reordering_named_items_sets_and_maps_is_not_a_change():
    def reorder(d):
        for key in ("tenants", "pools", "sla", "priorities", "quotas"):
            d[key].reverse()
        d["tenants"].append(d["tenants"].pop(0))
        d["pools"][0]["nodes"].reverse()
        d["isolation"]["mig"]["gpu-a100-02"]["gpus"] = dict(reversed(d["isolation"]["mig"]["gpu-a100-02"]["gpus"].items()))
        d["isolation"]["node_taints"]["mixed-a100"].append({"key": "gpu", "value": "", "effect": "NoExecute"})
        d["isolation"]["node_taints"]["mixed-a100"].reverse()

    shuffled = edited(reorder)
    with_taint = edited(lambda d: d["isolation"]["node_taints"]["mixed-a100"].append({"key": "gpu", "value": "", "effect": "NoExecute"}))
    assert diff(with_taint, shuffled) == []


def test_equal_decimals_spelled_differently_are_not_a_change():
    a = edited(lambda d: d["pools"][0].update(reserved_fraction="0.30"))
    b = edited(lambda d: d["pools"][0].update(reserved_fraction="0.3"))
    assert diff(a, b) == []
    # ...but a bool is not a number.
    c = edited(lambda d: d["isolation"]["inference"].update(numa_affinity=1))
    assert diff(base(), c) == [Change("isolation.inference.numa_affinity", "change", True, 1)]


def test_each_kind_of_change_is_reported_at_its_path():
    def edit(d):
        d["pricing"]["gpu_models"][A100]["purchase_price"] = "30000"
        d["pricing"]["gpu_models"]["NVIDIA H100 80GB HBM3"] = {"purchase_price": "40000", "depreciation_years": "4",
                                                                 "hosting_per_hour": "0.3", "default_power_watts": "700"}
        d["tenants"].append({"name": "nlp", "department": "research", "namespaces": ["nlp"], "class": "training"})
        next(t for t in d["tenants"] if t["name"] == "search")["namespaces"].append("search-canary")
        d["pools"][0]["nodes"].remove("gpu-a100-01")
        d["pools"][0]["reservations"]["vision"] = "2"
        d["sla"].clear()
        d["quotas"][0]["guaranteed_gpus"] = 3
        next(p for p in d["priorities"] if p["name"] == "training")["value"] = 20000
        d["isolation"]["mig"]["gpu-a100-02"]["gpus"]["0-3"] = {"3g.40gb": 1, "4g.40gb": 1}
        d["isolation"]["node_taints"]["mixed-a100"][0]["value"] = "serving"
        d["eviction_order"].reverse()
        d["colocation"]["peak_windows"][0]["end"] = "22:00"

    old, new = base(), edited(edit)
    changes = diff(old, new)
    by_path = {(c.path, c.op): c for c in changes}
    assert by_path[(f'pricing.gpu_models["{A100}"].purchase_price', "change")] == Change(
        f'pricing.gpu_models["{A100}"].purchase_price', "change", "26280", "30000")
    assert by_path[('pricing.gpu_models["NVIDIA H100 80GB HBM3"]', "add")].new["purchase_price"] == "40000"
    assert by_path[("tenants[nlp]", "add")].new["namespaces"] == ["nlp"]
    assert by_path[("tenants[search].namespaces", "add")].new == "search-canary"
    assert by_path[("pools[mixed-a100].nodes", "remove")].old == "gpu-a100-01"
    assert by_path[("pools[mixed-a100].reservations.vision", "add")].new == "2"
    assert by_path[("sla[search-chat]", "remove")].old["p99_ms"] == "300"
    assert by_path[("quotas[vision/mixed-a100].guaranteed_gpus", "change")] == Change(
        "quotas[vision/mixed-a100].guaranteed_gpus", "change", 4, 3)
    assert by_path[("priorities[training].value", "change")].new == 20000
    assert by_path[('isolation.mig["gpu-a100-02"].gpus["0-3"]["3g.40gb"]', "change")] == Change(
        'isolation.mig["gpu-a100-02"].gpus["0-3"]["3g.40gb"]', "change", 2, 1)
    assert by_path[('isolation.mig["gpu-a100-02"].gpus["0-3"]["4g.40gb"]', "add")].new == 1
    assert by_path[('isolation.node_taints["mixed-a100"][workload:NoSchedule].value', "change")].new == "serving"
    # Order matters in the eviction order; peak windows are compared as a whole list.
    assert by_path[("eviction_order", "change")].new == ["suspend-training", "shrink-training-batch", "preprocessing"]
    assert by_path[("colocation.peak_windows", "change")].new[0]["end"] == "22:00"
    assert len(changes) == 14
    # Changes serialize for storage and the API.
    json.dumps([c.as_dict() for c in changes])


def test_diff_survives_invalid_documents():
    dup = edited(lambda d: d["tenants"].append(dict(d["tenants"][0])))
    changes = diff(base(), dup)
    assert [c.path for c in changes] == ["tenants"]  # duplicate keys: the list is compared whole


# --- merge --------------------------------------------------------------------------------------


def test_disjoint_edits_merge():
    b = base()
    ours = edited(lambda d: d["pricing"]["gpu_models"][A100].update(purchase_price="30000"))

    def theirs_edit(d):
        d["tenants"].append({"name": "nlp", "department": "research", "namespaces": ["nlp"], "class": "training"})
        d["quotas"].append({"tenant": "nlp", "pool": "mixed-a100", "guaranteed_gpus": 2, "borrowing_limit": 0, "lending_limit": 0})
        d["sla"][0]["p99_ms"] = "250"

    result = three_way_merge(b, ours, edited(theirs_edit))
    assert result.conflicts == []
    merged = PolicyDocument.model_validate(result.merged)
    assert merged.pricing.gpu_models[A100].purchase_price == 30000
    assert merged.tenant("nlp") is not None and len(merged.quotas) == 2
    assert merged.sla[0].p99_ms == 250
    assert ops(diff(b, result.merged)) == {
        (f'pricing.gpu_models["{A100}"].purchase_price', "change"), ("tenants[nlp]", "add"),
        ("quotas[nlp/mixed-a100]", "add"), ("sla[search-chat].p99_ms", "change")}


def test_both_sides_adding_namespaces_to_one_tenant_merge_as_a_set():
    ours = edited(lambda d: d["tenants"][0]["namespaces"].append("search-a"))
    theirs = edited(lambda d: d["tenants"][0]["namespaces"].append("search-b"))
    result = three_way_merge(base(), ours, theirs)
    assert result.conflicts == []
    assert result.merged["tenants"][0]["namespaces"] == ["search-prod", "search-a", "search-b"]


def test_the_same_edit_on_both_sides_is_not_a_conflict():
    both = edited(lambda d: d["quotas"][0].update(guaranteed_gpus=6))
    result = three_way_merge(base(), both, copy.deepcopy(both))
    assert result.conflicts == [] and result.merged == both


def test_conflicting_edits_are_reported_field_by_field():
    def ours_edit(d):
        d["quotas"][0]["guaranteed_gpus"] = 3
        d["sla"][0]["p99_ms"] = "250"
        d["pricing"]["pue"] = "1.3"  # only ours: not a conflict

    def theirs_edit(d):
        d["quotas"][0]["guaranteed_gpus"] = 5
        d["sla"][0]["p99_ms"] = "200"
        d["sla"][0]["penalty_per_breach_minute"] = "1"  # only theirs: not a conflict

    result = three_way_merge(base(), edited(ours_edit), edited(theirs_edit))
    assert result.merged is None
    assert result.conflicts == [
        Conflict("sla[search-chat].p99_ms", "300", "250", "200"),
        Conflict("quotas[vision/mixed-a100].guaranteed_gpus", 4, 3, 5),
    ]
    json.dumps([c.as_dict() for c in result.conflicts])


def test_delete_against_modify_conflicts():
    ours = edited(lambda d: d["sla"].clear())
    theirs = edited(lambda d: d["sla"][0].update(p99_ms="250"))
    result = three_way_merge(base(), ours, theirs)
    assert [(c.path, c.ours is None, c.theirs["p99_ms"]) for c in result.conflicts] == [("sla[search-chat]", True, "250")]


def test_both_adding_the_same_item_conflict_only_on_fields_that_differ():
    new = {"name": "nlp", "department": "research", "namespaces": ["nlp"], "class": "training"}
    ours = edited(lambda d: d["tenants"].append(dict(new)))
    theirs = edited(lambda d: d["tenants"].append({**new, "department": "ml", "namespaces": ["nlp-2"]}))
    result = three_way_merge(base(), ours, theirs)
    assert [(c.path, c.base, c.ours, c.theirs) for c in result.conflicts] == [("tenants[nlp].department", None, "research", "ml")]


# --- properties ---------------------------------------------------------------------------------

_names = st.text(alphabet="abcdefghij-", min_size=1, max_size=6).map(lambda s: "x" + s.strip("-") + "z")
_money = st.decimals(min_value=0, max_value=100000, places=2).map(str)


def _mutations():
    def set_price(d, v):
        d["pricing"]["gpu_models"][A100]["purchase_price"] = v

    def set_energy(d, v):
        d["pricing"]["energy_price_per_kwh"] = v

    def add_namespace(d, i, name):
        d["tenants"][i % len(d["tenants"])]["namespaces"].append(name) if d["tenants"] else None

    def drop_tenant(d, i):
        if d["tenants"]:
            d["tenants"].pop(i % len(d["tenants"]))

    def add_tenant(d, name):
        if all(t["name"] != name for t in d["tenants"]):
            d["tenants"].append({"name": name, "department": "d", "namespaces": [name], "class": "training"})

    def set_department(d, i, name):
        if d["tenants"]:
            d["tenants"][i % len(d["tenants"])]["department"] = name

    def set_quota(d, n):
        if d["quotas"]:
            d["quotas"][0]["guaranteed_gpus"] = n

    def set_priority(d, i, n):
        d["priorities"][i % len(d["priorities"])]["value"] = n

    def set_mig(d, n):
        d["isolation"]["mig"].setdefault("gpu-a100-02", {"mode": "mixed", "model": None, "gpus": {}})["gpus"]["0-3"] = {"1g.10gb": n}

    def drop_mig(d):
        d["isolation"]["mig"].clear()

    def toggle_numa(d):
        d["isolation"]["inference"]["numa_affinity"] = not d["isolation"]["inference"]["numa_affinity"]

    def shuffle(d, i):
        for key in ("tenants", "priorities"):
            if d[key]:
                k = i % len(d[key])
                d[key] = d[key][k:] + d[key][:k]

    def drop_sla(d):
        d["sla"].clear()

    ints = st.integers(0, 50)
    return st.one_of(
        st.tuples(st.just(set_price), _money),
        st.tuples(st.just(set_energy), _money),
        st.tuples(st.just(add_namespace), ints, _names),
        st.tuples(st.just(drop_tenant), ints),
        st.tuples(st.just(add_tenant), _names),
        st.tuples(st.just(set_department), ints, _names),
        st.tuples(st.just(set_quota), ints),
        st.tuples(st.just(set_priority), ints, st.integers(1, 10**6)),
        st.tuples(st.just(set_mig), st.integers(1, 7)),
        st.tuples(st.just(drop_mig)),
        st.tuples(st.just(toggle_numa)),
        st.tuples(st.just(shuffle), ints),
        st.tuples(st.just(drop_sla)),
    )


@st.composite
def variants(draw) -> dict:
    data = base()
    for fn, *args in draw(st.lists(_mutations(), min_size=0, max_size=4)):
        fn(data, *args)
    return data


@settings(max_examples=100, deadline=None)
@given(x=variants(), y=variants())
def test_merge_identities_and_symmetry(x, y):
    b = base()
    only_ours = three_way_merge(b, x, b)
    assert only_ours.conflicts == []
    assert only_ours.merged == x or diff(b, x) == []  # a reorder-only x merges to the (equal) base
    assert diff(only_ours.merged, x) == []
    only_theirs = three_way_merge(b, b, y)
    assert only_theirs.conflicts == [] and only_theirs.merged == y
    same = three_way_merge(b, x, copy.deepcopy(x))
    assert same.conflicts == [] and diff(same.merged, x) == []
    # Who is "ours" does not change what conflicts.
    xy, yx = three_way_merge(b, x, y), three_way_merge(b, y, x)
    assert sorted(c.path for c in xy.conflicts) == sorted(c.path for c in yx.conflicts)
    if not xy.conflicts:
        # Every field that only one side changed carries that side's value.
        assert diff(xy.merged, yx.merged) == []
        untouched_by_y = {c.path for c in diff(b, x)} - {c.path for c in diff(b, y)}
        remaining = {c.path for c in diff(x, xy.merged)}
        assert not (untouched_by_y & remaining)


@settings(max_examples=100, deadline=None)
@given(x=variants())
def test_diff_is_empty_only_for_semantically_equal_documents(x):
    changes = diff(base(), x)
    reverse = diff(x, base())
    assert len(changes) == len(reverse)
    assert {c.path for c in changes} == {c.path for c in reverse}
    assert (changes == []) == (diff(x, base()) == [])
