"""Random mutations of a valid document posted to the validate endpoint: always 200 or 422, never a 500."""

from __future__ import annotations

import copy
import json

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.review import VALIDATE_URL as URL
from tests.support.review import client_for, example_document

values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(min_value=-(10**30), max_value=10**30),
              st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=30),
              st.sampled_from(["search", "mixed-a100", "3g.40gb", "NVIDIA A100-SXM4-80GB", "0-3", "-1", "1e400", "NaN"])),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)),
    max_leaves=6,
)


def paths(node, prefix=()):
    """Every location in the document: dict keys and list indexes, containers included."""
    yield prefix
    if isinstance(node, dict):
        for key, child in node.items():
            yield from paths(child, prefix + (key,))
    elif isinstance(node, list):
        for i, child in enumerate(node):
            yield from paths(child, prefix + (i,))


def mutate(data: dict, path: tuple, op: str, value) -> object:
    if not path:
        return value if op == "replace" else data
    parent = data
    for part in path[:-1]:
        parent = parent[part]
    last = path[-1]
    if op == "delete":
        del parent[last]
    elif op == "duplicate" and isinstance(parent, list):
        parent.append(copy.deepcopy(parent[last]))
    else:
        parent[last] = value
    return data


edit_lists = st.lists(st.tuples(st.sampled_from(list(paths(example_document().to_data()))),
                                st.sampled_from(["replace", "delete", "duplicate"]), values), min_size=1, max_size=3)


def apply_edits(base: dict, edits) -> object:
    data = copy.deepcopy(base)
    for path, op, value in edits:
        try:
            data = mutate(data, path, op, value)
        except (KeyError, IndexError, TypeError):
            pass  # an earlier edit removed or replaced the location
    return data


def test_mutated_drafts_preview_never_500(fresh_engine):
    """Drafts may hold broken documents: their page data and impact preview must still answer."""
    client, headers = client_for(fresh_engine)
    base = example_document().to_data()

    @settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
    @given(edits=edit_lists)
    def check(edits):
        text = yaml.safe_dump(apply_edits(base, edits), allow_unicode=True)
        created = client.post("/api/v1/policy/changes", headers=headers,
                              json={"title": "fuzz", "justification": "fuzz", "document": text})
        assert created.status_code == 201, created.text
        change_id = created.json()["id"]
        for url in (f"/api/v1/policy/changes/{change_id}", f"/api/v1/policy/changes/{change_id}/preview"):
            response = client.get(url, headers=headers)
            assert response.status_code == 200, (url, response.text)
        submitted = client.post(f"/api/v1/policy/changes/{change_id}/submit", headers=headers)
        assert submitted.status_code in (200, 422), submitted.text

    check()


def test_mutated_documents_never_500(fresh_engine):
    base = example_document().to_data()
    locations = list(paths(base))
    client, headers = client_for(fresh_engine)
    seen: set[int] = set()

    @settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))
    @given(
        edits=st.lists(st.tuples(st.sampled_from(locations), st.sampled_from(["replace", "delete", "duplicate"]), values),
                       min_size=1, max_size=3),
        as_json=st.booleans(),
        noise=st.one_of(st.none(), st.tuples(st.integers(min_value=0, max_value=2000), st.text(max_size=5))),
    )
    def check(edits, as_json, noise):
        data = apply_edits(base, edits)
        text = json.dumps(data, default=str) if as_json else yaml.safe_dump(data, allow_unicode=True)
        if noise is not None:
            at, junk = noise
            text = text[:at] + junk + text[at:]
        response = client.post(URL, headers=headers, json={"document": text})
        seen.add(response.status_code)
        assert response.status_code in (200, 422), response.text
        if response.status_code == 422:
            body = response.json()
            assert response.headers["content-type"].startswith("application/problem+json")
            assert body["errors"] and all("path" in e for e in body["errors"])

    check()
    assert 422 in seen  # the mutations really broke documents
