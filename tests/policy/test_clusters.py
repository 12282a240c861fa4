"""Pools belong to clusters: documents without `cluster` mean the default one, node names are per cluster, and each
cluster's ingestion reads the document as that cluster sees it."""

from __future__ import annotations

import pytest

from app.core.clusters import DEFAULT_CLUSTER
from app.policy.document import PolicyDocument
from app.policy.parsing import parse_document
from app.policy.validation import validate

CLUSTERS = ["east", "west"]


def problems(data: dict, severity: str = "error", clusters=CLUSTERS) -> list[tuple[str, str]]:
    doc = PolicyDocument.model_validate(data)
    return [(e.path, e.message) for e in validate(doc, clusters=clusters) if e.severity == severity]


def two_clusters(data: dict) -> dict:
    """The example's pools in `east`, plus a pool in `west` whose node has the same name as one of east's."""
    for pool in data["pools"]:
        pool["cluster"] = "east"
    data["pools"].append({"name": "west-a100", "cluster": "west", "nodes": ["gpu-a100-01"], "reserved_fraction": "0",
                          "gpus_per_node": 8})
    return data


def test_a_document_without_clusters_is_the_default_cluster_and_unchanged(data, example_doc):
    before = {**data, "pools": [{k: v for k, v in p.items() if k != "cluster"} for p in data["pools"]]}
    doc = parse_document(_yaml(before))  # a document written before clusters existed
    assert doc == example_doc
    assert {p.cluster for p in doc.pools} == {DEFAULT_CLUSTER}
    assert doc.clusters() == [DEFAULT_CLUSTER]
    assert validate(doc) == validate(example_doc)  # the configured (single, default) cluster: nothing new to say
    assert doc.for_cluster(DEFAULT_CLUSTER) is doc


def test_the_same_node_name_in_two_clusters_is_two_nodes(data):
    assert problems(two_clusters(data)) == []


def test_a_node_twice_in_one_cluster_is_an_error(data):
    data = two_clusters(data)
    data["pools"].append({"name": "west-more", "cluster": "west", "nodes": ["gpu-a100-01"], "reserved_fraction": "0"})
    assert problems(data) == [
        ("pools[west-more].nodes[0]", "node 'gpu-a100-01' is already in pool 'west-a100' of cluster 'west'")]


def test_an_unknown_cluster_is_named_with_the_configured_ones(data):
    data = two_clusters(data)
    data["pools"][-1]["cluster"] = "wset"
    assert problems(data) == [("pools[west-a100].cluster", "unknown cluster 'wset' (configured: east, west)")]
    # A document naming no cluster, under a configuration without the default cluster.
    plain = {**data, "pools": [dict(p, cluster=DEFAULT_CLUSTER) for p in data["pools"][:1]]}
    assert [path for path, _ in problems(plain)] == [f"pools[{plain['pools'][0]['name']}].cluster"]


def test_a_mig_layout_on_a_name_two_clusters_use_is_a_warning(data):
    data = two_clusters(data)
    data["isolation"]["mig"]["gpu-a100-01"] = {"mode": "mixed", "gpus": {"0": {"7g.80gb": 1}}}
    assert problems(data) == []
    assert ('isolation.mig["gpu-a100-01"]', "node 'gpu-a100-01' is in pools of clusters east, west: this layout "
            "applies to the node of that name in each of them") in problems(data, "warning")


def test_each_cluster_reads_its_own_pools_and_services(data):
    doc = PolicyDocument.model_validate(two_clusters(data))
    west = doc.for_cluster("west")
    assert [p.name for p in west.pools] == ["west-a100"] and west.sla == [] and west.quotas == []
    assert west.pool_for_node("gpu-a100-01").name == "west-a100"
    assert west.pool_for_node("gpu-a100-02") is None  # east's node: unknown to west (its GPUs there are unpooled)
    east = doc.for_cluster("east")
    assert east.pool_for_node("gpu-a100-01").name == doc.pools[0].name
    assert [s.service for s in east.sla] == [s.service for s in doc.sla] and east.tenants == doc.tenants
    assert doc.for_cluster("nowhere").pools == []
    assert doc.cluster_of_pool("west-a100") == "west" and doc.clusters() == CLUSTERS


@pytest.mark.parametrize("configured", [["east", "west"], ["default", "east", "west"]])
def test_validation_reads_the_configured_clusters_by_default(data, monkeypatch, configured):
    import json

    from app.core import settings

    monkeypatch.setenv("CHARGEBACK_CLUSTERS", json.dumps([{"name": n} for n in configured]))
    settings.get_settings.cache_clear()
    try:
        doc = PolicyDocument.model_validate(two_clusters(data))
        assert [e for e in validate(doc) if e.severity == "error"] == []
        doc = PolicyDocument.model_validate(data | {"pools": [dict(data["pools"][0], cluster="north")]})
        assert [e.path for e in validate(doc) if e.severity == "error"] == [f"pools[{data['pools'][0]['name']}].cluster"]
    finally:
        settings.get_settings.cache_clear()


def _yaml(data: dict) -> str:
    import yaml

    return yaml.safe_dump(data)
