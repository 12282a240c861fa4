"""Parsing YAML/JSON into a document: pydantic errors as dotted paths, syntax errors, no crash on any input."""

from __future__ import annotations

import copy
import json
import re
from decimal import Decimal

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.core.errors import Invalid
from app.policy.parsing import check_document, parse_document
from app.policy.service import document_sha256, dump_yaml
from tests.support.policy_docs import laughs


def invalid(text: str) -> list[tuple[str, str]]:
    with pytest.raises(Invalid) as info:
        parse_document(text)
    return [(e.path, e.message) for e in info.value.errors]


def test_yaml_and_json_give_the_same_document(example_text, example_doc):
    assert parse_document(example_text) == example_doc
    assert parse_document(json.dumps(example_doc.to_data())) == example_doc


def test_decimals_are_exact_and_times_stay_strings(example_doc):
    assert example_doc.pools[0].reserved_fraction == Decimal("0.30")
    assert str(example_doc.pricing.gpu_models["NVIDIA A100-SXM4-80GB"].hosting_per_hour) == "0.20"
    text = dump_yaml(example_doc).replace("start: '09:00'", "start: 09:00").replace("end: '21:00'", "end: 21:00")
    assert "start: 09:00" in text  # unquoted: YAML 1.1 would read 21:00 as the number 1260
    doc = parse_document(text)
    assert (doc.colocation.peak_windows[0].start, doc.colocation.peak_windows[0].end) == ("09:00", "21:00")


def test_unquoted_gpu_index_keys_are_strings(data):
    text = yaml.safe_dump(data).replace("'0-3':", "3:").replace("0-3:", "3:")
    assert "\n        3:\n" in text
    doc = parse_document(text)
    assert set(doc.isolation.mig["gpu-a100-02"].gpus) == {"3", "4-7"}


def test_dump_yaml_is_readable_and_round_trips(example_doc):
    text = dump_yaml(example_doc)
    assert "class: inference" in text and "klass" not in text
    assert "reserved_fraction: 0.30" in text and "purchase_price: 26280" in text
    again = parse_document(text)
    assert again == example_doc
    assert document_sha256(again) == document_sha256(example_doc)


def test_yaml_syntax_error_has_line_and_column():
    [(path, message)] = invalid("tenants:\n  - {name: a,\npools: [")
    assert path == "" and re.search(r"at line [34], column \d+$", message)
    [(path, message)] = invalid("tenants: [a\npricing: {]")
    assert (path, message) == ("", "did not find expected ',' or ']' at line 2, column 8")


def test_duplicate_yaml_keys_are_refused(example_text):
    text = example_text.replace("isolation:\n  mig:", "isolation:\n  mig:\n    gpu-a100-02: {gpus: {}}", 1)
    [(path, message)] = invalid(text)
    assert path == "" and message.startswith("duplicate key 'gpu-a100-02' at line ")


@pytest.mark.parametrize("text", ["- a\n- b\n", "just words", "42", ""])
def test_a_document_must_be_a_mapping(text):
    assert invalid(text) == [("", "expected a mapping of sections (tenants, pools, pricing, ...)")]


def _errors_for(data) -> list[tuple[str, str]]:
    return invalid(json.dumps(data))


def test_pydantic_paths_use_the_document_spelling(data):
    data["tenants"][1]["class"] = "robot"
    data["pools"][0]["colour"] = "blue"
    data["pools"][0]["reserved_fraction"] = "1.5"
    data["isolation"]["mig"]["gpu-a100-02"]["gpus"]["0-3"]["3g.40gb"] = "two"
    del data["pricing"]["energy_price_per_kwh"]
    assert _errors_for(data) == [
        ("tenants[vision].class", "Input should be 'inference', 'training' or 'preprocessing'"),
        ("pools[mixed-a100].reserved_fraction", "Input should be less than or equal to 1"),
        ("pools[mixed-a100].colour", "unknown field (not part of the policy document)"),
        ("pricing.energy_price_per_kwh", "required"),
        ("isolation.mig[\"gpu-a100-02\"].gpus[\"0-3\"][\"3g.40gb\"]", "Input should be a valid integer, unable to parse string as an integer"),
    ]


def test_missing_class_is_reported_as_class(data):
    del data["tenants"][0]["class"]
    assert _errors_for(data) == [("tenants[search].class", "required")]


def test_cross_field_errors_raise_invalid(data):
    data["isolation"]["mig"]["gpu-a100-02"]["gpus"]["0-3"] = {"5g.40gb": 1}
    assert _errors_for(data) == [
        ("isolation.mig[\"gpu-a100-02\"].gpus[\"0-3\"]", "5g.40gb is not a profile of NVIDIA A100-SXM4-80GB")
    ]


def test_warnings_do_not_raise_and_check_document_returns_them(data):
    data["isolation"]["training"]["network_cap_fraction"] = "0.9"
    text = json.dumps(data)
    assert parse_document(text).isolation.training.network_cap_fraction == Decimal("0.9")
    doc, found = check_document(text)
    assert doc is not None
    assert {(e.path, e.severity) for e in found} == {
        ("isolation.training.network_cap_fraction", "warning"),
        ("isolation.inference.memory_reserve_factor", "warning"),
    }


def test_check_document_on_bad_text_returns_no_document():
    doc, found = check_document("pricing: [1, 2")
    assert doc is None and found[0].path == "" and found[0].severity == "error"


# --- no input crashes the parser: everything is a document or Invalid ----------------------------

SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-10**12, 10**12), st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12), st.sampled_from(["", "0-3", "3-0", "7g.80gb", "inference", "search", "mixed-a100", "NVIDIA L4", "-1", "1e400", "1e999999", "0-99999999", 99999999]),
)
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)), max_leaves=6)


def _paths(node, prefix=()):
    yield prefix
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _paths(v, prefix + (i,))


MUTATIONS = st.lists(st.tuples(st.integers(0, 10_000), st.sampled_from(["replace", "delete", "duplicate"]), VALUES), min_size=1, max_size=4)


def _mutate(data, mutations):
    for pick, kind, value in mutations:
        paths = [p for p in _paths(data) if p]
        if not paths:
            break
        path = paths[pick % len(paths)]
        parent = data
        for part in path[:-1]:
            parent = parent[part]
        key = path[-1]
        if kind == "replace":
            parent[key] = value
        elif kind == "delete":
            del parent[key]
        elif isinstance(parent, list):
            parent.insert(key, copy.deepcopy(parent[key]))
        else:
            parent[str(key) + "x"] = copy.deepcopy(parent[key])
    return data


def _assert_document_or_invalid(text: str) -> None:
    try:
        parse_document(text)
    except Invalid as exc:
        assert exc.errors and all(isinstance(e.path, str) and e.message for e in exc.errors)
    doc, found = check_document(text, measured_peak_mib={"search": 1.0, "vision": 5.0})
    assert doc is not None or found


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutations=MUTATIONS, as_json=st.booleans())
def test_random_mutations_of_the_document_never_crash(example_doc, mutations, as_json):
    data = _mutate(copy.deepcopy(example_doc.to_data()), mutations)
    if as_json:
        text = json.dumps(data, default=str)
    else:
        try:
            text = yaml.dump(data, Dumper=yaml.CSafeDumper)
        except yaml.YAMLError:
            return
    _assert_document_or_invalid(text)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cut=st.integers(0, 4000), junk=st.text(max_size=8))
def test_random_edits_of_the_text_never_crash(example_text, cut, junk):
    cut %= len(example_text)
    _assert_document_or_invalid(example_text[:cut] + junk + example_text[cut + len(junk):])


@pytest.mark.parametrize("text", [
    laughs(9), laughs(12), laughs(30, fanout=2), "&a [*a]", "x: &a {y: *a}",
    "tenants:\n  - &t {name: a, extra: [" + ", ".join(["x"] * 50) + "]}\n" + "pools: [" + ", ".join(["*t"] * 3000) + "]",
])
def test_alias_bombs_are_refused_in_bounded_time_and_memory(text):
    import time
    import tracemalloc

    assert len(text) < 120_000
    tracemalloc.start()
    started = time.perf_counter()
    try:
        with pytest.raises(Invalid) as info:
            parse_document(text)
        doc, findings = check_document(text)
        elapsed = time.perf_counter() - started
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert doc is None
    assert [e.message for e in info.value.errors] == ["more than 100000 values once aliases are expanded"]
    assert findings[0].path  # the first field whose expansion alone is over budget (e.g. l5, x.y, pools)
    assert elapsed < 2 and peak < 64 * 2**20, (elapsed, peak)


def test_aliases_within_the_budget_still_work(example_text):
    text = example_text.replace("energy_price_per_kwh:", "energy_price_per_kwh: &price", 1)
    assert "&price" in text
    assert parse_document(text) == parse_document(example_text)


def test_documents_over_the_size_limit_are_refused():
    assert invalid("a: " + "x" * 1_000_001) == [("", "at most 1000000 characters")]


def test_huge_integers_are_a_readable_error():
    assert invalid("a: " + "9" * 5000)[0][1].startswith("integer with more than 40 digits")
