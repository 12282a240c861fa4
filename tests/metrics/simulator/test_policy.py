"""The seed policy matches the cluster and passes validation, at 32 GPUs and at fleet scale."""

from __future__ import annotations

import pytest

from app.metrics.simulator import Simulator
from app.metrics.simulator.cluster import build_topology
from app.policy.parsing import parse_document
from app.policy.validation import validate


def errors(policy):
    return [e for e in validate(policy) if e.severity == "error"]


def test_seed_policy_is_valid_and_matches_the_cluster(sim):
    policy = sim.policy()
    assert errors(policy) == []
    nodes = {n.name for n in sim.topology.nodes}
    assert {n for p in policy.pools for n in p.nodes} == nodes
    assert {m for n in sim.topology.nodes for m in [n.model.name]} == set(policy.pricing.gpu_models)
    assert set(policy.isolation.mig) == {n.name for n in sim.topology.nodes if n.kind == "a100-mig"}
    assert policy.tenant_for_namespace("scratch") is None  # the namespace no tenant claims
    for sla in policy.sla:
        namespace = policy.tenant(sla.tenant).namespaces[0]
        assert f'namespace="{namespace}"' in sla.requests and f'namespace="{namespace}"' in sla.latency_histogram
    assert [w.model_dump() for w in policy.colocation.peak_windows] == [
        {"start": "09:00", "end": "21:00", "tz": "Asia/Shanghai", "pre_suspend_minutes": 15}]
    # Round trip through the document's own YAML/JSON parser.
    import json

    assert parse_document(json.dumps(policy.to_data())) == policy


@pytest.mark.parametrize("gpus", [25, 36, 257, 1024])
def test_topology_and_policy_scale(gpus):
    sim = Simulator(seed=3, gpus=gpus)
    topo = sim.topology
    assert len(topo.gpus) == gpus
    assert all(len(n.gpus) == 8 for n in topo.nodes[:-1]) and 1 <= len(topo.nodes[-1].gpus) <= 8
    assert len({g.uuid for g in topo.gpus}) == gpus
    assert errors(sim.policy()) == []


def test_too_small_a_cluster_is_refused():
    with pytest.raises(ValueError, match="at least 25 GPUs"):
        build_topology(1, 16)
