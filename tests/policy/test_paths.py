"""One path naming for validation, the diff, the forms and "Set field" (issue 13); numbers stay numbers."""

from __future__ import annotations

import copy
import re
from decimal import Decimal

import pytest

from app.policy.diff import diff
from app.policy.document import PolicyDocument
from app.policy.forms import apply_edit
from app.policy.parsing import check_document, parse_document
from app.policy.paths import Key, parent, parse_path, path_of, within
from app.policy.service import dump_value, dump_yaml
from app.policy.validation import validate
from tests.support.policy_docs import spec_data

A100 = "NVIDIA A100-SXM4-80GB"


def _edited(fn) -> dict:
    data = copy.deepcopy(spec_data())
    fn(data)
    return data


# Every kind of path: a named item's field, a map key (identifier, quoted), nested maps, a named list inside a
# map, a section's field. Each mutation makes validation report a problem the diff names the same way.
KINDS = {
    "named item field": (lambda d: d["quotas"][0].update(guaranteed_gpus=99), "quotas[vision/mixed-a100].guaranteed_gpus"),
    "named item, hyphenated key": (lambda d: d["sla"][0].update(p99_ms=700000), "sla[search-chat].p99_ms"),
    "tier": (lambda d: d["priorities"][0].update(preemptible=True), "priorities[inference-core].preemptible"),
    "tenant": (lambda d: d["tenants"][0].update(department="=cmd()"), "tenants[search].department"),
    "map key (identifier)": (lambda d: d["pools"][0]["reservations"].update(ghost=1), "pools[mixed-a100].reservations.ghost"),
    "map key (quoted)": (lambda d: d["pricing"]["gpu_models"][A100].update(purchase_price=10**13),
                         f'pricing.gpu_models["{A100}"].purchase_price'),
    "nested maps": (lambda d: d["isolation"]["mig"]["gpu-a100-02"]["gpus"]["0-3"].update({"5g.40gb": 1}),
                    'isolation.mig["gpu-a100-02"].gpus["0-3"]'),
    "named list in a map": (lambda d: d["isolation"]["node_taints"].update({"ghost-pool": [{"key": "a", "effect": "NoSchedule"}]}),
                            'isolation.node_taints["ghost-pool"]'),
    "section field": (lambda d: d["isolation"]["training"].update(network_cap_fraction="0.8"),
                      "isolation.training.network_cap_fraction"),
}


@pytest.mark.parametrize("kind", KINDS)
def test_validation_and_diff_name_the_same_field(kind):
    mutate, expected = KINDS[kind]
    base = PolicyDocument.model_validate(spec_data())
    edited = PolicyDocument.model_validate(_edited(mutate))
    found = [f.path for f in validate(edited) if f.path == expected]
    assert found, [f.path for f in validate(edited)]
    changed = [c.path for c in diff(base.to_values(), edited.to_values())]
    assert changed and all(within(p, expected) for p in changed), changed
    # "Set field" and the forms read the same path back to the same steps.
    assert parse_path(expected) == parse_path(changed[0])[: len(parse_path(expected))]


def test_schema_errors_name_items_as_validation_does():
    text = re.sub(r"guaranteed_gpus: \d+", "guaranteed_gpus: lots", dump_yaml(PolicyDocument.model_validate(spec_data())))
    doc, findings = check_document(text)
    assert doc is None and [f.path for f in findings] == ["quotas[vision/mixed-a100].guaranteed_gpus"]


def test_an_item_named_twice_is_told_apart_by_position():
    data = _edited(lambda d: d["quotas"].append(dict(d["quotas"][0])))
    paths = [f.path for f in validate(PolicyDocument.model_validate(data))]
    assert "quotas[1]" in paths  # the second quota for vision/mixed-a100, as the diff's whole-list fallback


@pytest.mark.parametrize("parts", [
    ("quotas", Key("vision/mixed-a100"), "guaranteed_gpus"),
    ("pricing", "gpu_models", A100, "pue"),
    ("isolation", "mig", "gpu-a100-02", "gpus", "0-3", "3g.40gb"),
    ("isolation", "node_taints", "mixed-a100", Key("workload:NoSchedule"), "value"),
    ("eviction_order", 0),
    ("pools", Key("odd]name"), "nodes"),
])
def test_parse_path_reads_back_what_path_of_writes(parts):
    path = path_of(*parts)
    assert parse_path(path) == [str(p) for p in parts]
    assert parent(path) == path_of(*parts[:-1])


def test_numbers_round_trip_as_numbers():
    doc = parse_document(dump_yaml(PolicyDocument.model_validate(spec_data())))
    result = apply_edit(doc, {"pricing.dark_time_multiplier": "0.5", "quotas[vision/mixed-a100].guaranteed_gpus": "6",
                              "pools[mixed-a100].reserved_fraction": "0.30"})
    assert result.errors == [] and result.document is not None
    edited = result.document
    assert edited.pricing.dark_time_multiplier == Decimal("0.5") and edited.quotas[0].guaranteed_gpus == 6
    text = dump_yaml(edited)
    assert "dark_time_multiplier: 0.5\n" in text and "guaranteed_gpus: 6\n" in text and "'0.5'" not in text
    assert parse_document(text) == edited  # and back
    changes = {c.path: c for c in diff(doc.to_values(), edited.to_values())}
    assert set(changes) == {"pricing.dark_time_multiplier", "quotas[vision/mixed-a100].guaranteed_gpus"}  # 0.30 is 0.3
    assert changes["pricing.dark_time_multiplier"].new == Decimal("0.5")
    assert dump_value(changes["pricing.dark_time_multiplier"].new) == "0.5"  # the diff cell: unquoted
    assert dump_value("09:00") == "'09:00'" and dump_value({"a": Decimal("0.30")}) == "{a: 0.30}"


def test_a_bad_value_is_reported_at_the_form_path_of_a_new_row():
    doc = PolicyDocument.model_validate(spec_data())
    result = apply_edit(doc, {"quotas[+1].tenant": "etl", "quotas[+1].pool": "mixed-a100", "quotas[+1].guaranteed_gpus": "0.5"})
    assert result.document is None
    assert [(f.path, f.severity) for f in result.findings] == [("quotas[+1].guaranteed_gpus", "error")]
