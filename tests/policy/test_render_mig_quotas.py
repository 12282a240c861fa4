"""MIG slices are governed: quotas, limit ranges and Kueue queues cover `nvidia.com/mig-<profile>`; validators accept it all."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
import yaml

from app.core.timeutil import floor_hour, utcnow
from app.policy.gpus import mig_resource
from app.policy.render import render_bundle
from app.policy.render_k8s import tenant_caps
from app.policy.render_mig import pool_mig_slices
from app.review import releases
from app.review.models import PolicyArtifact
from tests.support.deploy import crd_validator, validate_core
from tests.support.policy_docs import all_objects, by_kind, doc_of, larger_data, spec_data
from tests.support.review import approved, seed

KUEUE_KINDS = ("ClusterQueue", "ResourceFlavor", "Cohort", "LocalQueue", "WorkloadPriorityClass")


def test_resource_names_follow_the_device_plugin():
    assert mig_resource("3g.40gb") == "nvidia.com/mig-3g.40gb"
    assert mig_resource("1g.10gb") == "nvidia.com/mig-1g.10gb"
    # "+" cannot be in a resource name: the device plugin writes media extensions as ".me".
    assert mig_resource("1g.10gb+me") == "nvidia.com/mig-1g.10gb.me"


def test_a_gpu_quota_is_the_instances_worth_that_many_gpus_per_profile():
    doc = doc_of(spec_data())  # gpu-a100-02: GPUs 0-3 two 3g.40gb each, 4-7 one 7g.80gb each
    slices = {s.resource: (s.count, s.share) for s in pool_mig_slices(doc, "mixed-a100")}
    assert {r: c for r, (c, _) in slices.items()} == {"nvidia.com/mig-3g.40gb": 8, "nvidia.com/mig-7g.80gb": 4}
    # vision: 4 guaranteed + 4 borrowable = 8 GPUs -> 8*7/3 = 18 3g.40gb instances, but the pool has 8.
    assert tenant_caps(doc, "vision") == {"nvidia.com/gpu": 8, "nvidia.com/mig-3g.40gb": 8, "nvidia.com/mig-7g.80gb": 4}
    data = spec_data()
    data["quotas"][0].update(guaranteed_gpus=1, borrowing_limit=1, lending_limit=1)
    # 2 GPUs -> floor(14/3) = 4 instances of 3g.40gb, 2 of 7g.80gb.
    assert tenant_caps(doc_of(data), "vision") == {"nvidia.com/gpu": 2, "nvidia.com/mig-3g.40gb": 4, "nvidia.com/mig-7g.80gb": 2}
    assert tenant_caps(doc_of(data), "search") is None  # no quota: uncapped, as before


def test_single_strategy_nodes_add_no_mig_resource():
    data = spec_data()
    data["isolation"]["mig"]["gpu-a100-02"] = {"mode": "single", "gpus": {"0-7": {"3g.40gb": 2}}}
    doc = doc_of(data)
    assert pool_mig_slices(doc, "mixed-a100") == []
    # The single strategy advertises the instances as nvidia.com/gpu, which the GPU quota governs.
    assert by_kind(render_bundle(doc, 1), "ResourceQuota")[0]["spec"]["hard"] == {"requests.nvidia.com/gpu": "8"}


def test_every_tenant_namespace_governs_every_mig_resource(doc_with_two_pools):
    bundle = render_bundle(doc_with_two_pools, 1)
    everywhere = {"nvidia.com/gpu", "nvidia.com/mig-3g.40gb", "nvidia.com/mig-7g.80gb", "nvidia.com/mig-1g.10gb",
                  "nvidia.com/mig-4g.40gb"}
    quotas = {o["metadata"]["namespace"]: o["spec"]["hard"] for o in by_kind(bundle, "ResourceQuota")}
    # nlp: 2 GPUs in mixed-a100 (4 of 3g.40gb, 2 of 7g.80gb) + 8 in train-h100 (14 of 1g.10gb: all there are, 1 of 3g.40gb, 1 of 4g.40gb)
    assert quotas["nlp-a"] == quotas["nlp-b"] == {
        "requests.nvidia.com/gpu": "10", "requests.nvidia.com/mig-1g.10gb": "14", "requests.nvidia.com/mig-3g.40gb": "5",
        "requests.nvidia.com/mig-4g.40gb": "1", "requests.nvidia.com/mig-7g.80gb": "2"}
    # vision has no quota in train-h100: its profiles are capped at 0 there, not left ungoverned.
    assert quotas["vision-train"]["requests.nvidia.com/mig-1g.10gb"] == "0"
    for hard in quotas.values():
        assert {k.removeprefix("requests.") for k in hard} == everywhere
    for limit in by_kind(bundle, "LimitRange"):
        [container] = limit["spec"]["limits"]
        assert set(container["maxLimitRequestRatio"]) == everywhere
        if limit["metadata"]["namespace"] in quotas:
            hard = quotas[limit["metadata"]["namespace"]]
            assert container["max"] == {k.removeprefix("requests."): v for k, v in hard.items()}


@pytest.fixture
def doc_with_two_pools():
    return doc_of(larger_data())


def test_cluster_queues_cover_the_pool_mig_resources_in_every_flavor(doc_with_two_pools):
    bundle = render_bundle(doc_with_two_pools, 1)
    queues = {o["metadata"]["name"]: o["spec"] for o in by_kind(bundle, "ClusterQueue")}
    [group] = queues["nlp-train-h100"]["resourceGroups"]
    assert group["coveredResources"] == ["nvidia.com/gpu", "nvidia.com/mig-1g.10gb", "nvidia.com/mig-3g.40gb",
                                         "nvidia.com/mig-4g.40gb"]
    # nlp in train-h100: 6 guaranteed, 2 borrowable, 6 lendable GPUs.
    assert group["flavors"][0]["resources"][1] == {"name": "nvidia.com/mig-1g.10gb", "nominalQuota": 14,
                                                   "borrowingLimit": 0, "lendingLimit": 14}
    [group] = queues["vision-mixed-a100"]["resourceGroups"]
    assert group["flavors"] == [{"name": "mixed-a100", "resources": [
        {"name": "nvidia.com/gpu", "nominalQuota": 4, "borrowingLimit": 4, "lendingLimit": 2},
        {"name": "nvidia.com/mig-3g.40gb", "nominalQuota": 8, "borrowingLimit": 0, "lendingLimit": 4},
        {"name": "nvidia.com/mig-7g.80gb", "nominalQuota": 4, "borrowingLimit": 0, "lendingLimit": 2},
    ]}]
    flavors = {o["metadata"]["name"]: o["metadata"]["annotations"] for o in by_kind(bundle, "ResourceFlavor")}
    assert flavors["mixed-a100"]["gpu-chargeback.io/mig-instances"] == "nvidia.com/mig-3g.40gb=8,nvidia.com/mig-7g.80gb=4"


def kueue_webhook_errors(queue: dict) -> list[str]:
    """What Kueue's ClusterQueue webhook (pkg/webhooks/clusterqueue_webhook.go) and CEL rules reject beyond the schema."""
    errors, seen = [], set()
    for group in queue["spec"]["resourceGroups"]:
        covered = group["coveredResources"]
        if seen & set(covered):
            errors.append(f"{sorted(seen & set(covered))} covered by two resource groups")
        seen |= set(covered)
        for flavor in group["flavors"]:
            names = [r["name"] for r in flavor["resources"]]
            if names != covered:  # "must match the name in coveredResources", same count and order
                errors.append(f"flavor {flavor['name']} lists {names}, group covers {covered}")
            for r in flavor["resources"]:
                if r.get("lendingLimit", 0) > r["nominalQuota"]:
                    errors.append(f"{r['name']}: lendingLimit must be less than or equal to the nominalQuota")
                if "cohortName" not in queue["spec"] and "borrowingLimit" in r:
                    errors.append(f"{r['name']}: borrowingLimit must be nil when cohort is empty")
    return errors


@pytest.mark.parametrize("which", ["spec", "larger"])
def test_kueue_objects_pass_the_v1beta2_crd_schemas_and_webhook_rules(which):
    bundle = render_bundle(doc_of(spec_data() if which == "spec" else larger_data()), 1)
    objects = [o for o in all_objects(bundle) if o["kind"] in KUEUE_KINDS]
    assert {o["kind"] for o in objects} == set(KUEUE_KINDS)
    for obj in objects:
        errors = [e.message for e in crd_validator(obj["kind"]).iter_errors(obj)]
        assert not errors, (obj["kind"], obj["metadata"]["name"], errors)
        if obj["kind"] == "ClusterQueue":
            assert not kueue_webhook_errors(obj)


def test_the_kueue_checks_reject_what_kueue_rejects():
    [queue] = [q for q in by_kind(render_bundle(doc_of(spec_data()), 1), "ClusterQueue")]
    broken = json.loads(json.dumps(queue))
    broken["spec"]["resourceGroups"][0]["flavors"][0]["resources"].pop()  # a covered resource without quota
    assert kueue_webhook_errors(broken)
    broken = json.loads(json.dumps(queue))
    broken["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuotas"] = 1
    assert list(crd_validator("ClusterQueue").iter_errors(broken))


@pytest.mark.parametrize("version", ["1.33.0", "1.37.0"])
def test_core_objects_pass_kubernetes_validate_strict(version, tmp_path):
    bundle = render_bundle(doc_of(larger_data()), 1)
    objects = [o for o in all_objects(bundle) if "/" not in o["apiVersion"] or o["apiVersion"].startswith("scheduling.k8s.io/")]
    assert {o["kind"] for o in objects} == {"PriorityClass", "ResourceQuota", "LimitRange", "Node", "ConfigMap"}
    done = validate_core(objects, tmp_path, version)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("passed for resource") == len(objects), done.stdout


def test_release_apply_with_a_mixed_layout_stores_quotas_covering_mig(session):
    """The release gate's stored artifacts govern the slices of a newly MIG-enabled node."""
    def enable_mig(data: dict) -> None:
        data["quotas"][0]["guaranteed_gpus"] = 6
        data["isolation"]["mig"]["gpu-a100-01"] = {"mode": "mixed", "gpus": {"0-7": {"3g.40gb": 2}}}

    v1 = seed(session)
    change = approved(session, v1, edit=enable_mig)
    release = releases.create_release(session=session, actor="oscar", name="mig on a100-01", service="search-chat",
                                      planned_at=floor_hour(utcnow()) + timedelta(hours=2))
    releases.attach(session=session, release_id=release.id, change_id=change.id, actor="oscar")
    v2 = releases.apply_release(session=session, release_id=release.id, actor="oscar",
                                effective_from=floor_hour(utcnow()) + timedelta(hours=2))
    files = json.loads(session.get(PolicyArtifact, v2.id).files)
    [quota] = [o for o in yaml.safe_load_all(files["kubernetes/resourcequotas.yaml"]) if o]
    # 24 3g.40gb instances now (8 + 16); vision's 6 + 4 GPUs are worth floor(70/3) = 23 of them.
    assert quota["spec"]["hard"] == {"requests.nvidia.com/gpu": "10", "requests.nvidia.com/mig-3g.40gb": "23",
                                     "requests.nvidia.com/mig-7g.80gb": "4"}
    [queue] = [o for o in yaml.safe_load_all(files["kueue/clusterqueues.yaml"]) if o]
    assert queue["spec"]["resourceGroups"][0]["coveredResources"] == [
        "nvidia.com/gpu", "nvidia.com/mig-3g.40gb", "nvidia.com/mig-7g.80gb"]
    assert not kueue_webhook_errors(queue)
    stored = [o for name, text in files.items() if name.startswith("kueue/") for o in yaml.safe_load_all(text) if o]
    for obj in stored:
        assert not list(crd_validator(obj["kind"]).iter_errors(obj)), obj["metadata"]["name"]
    mig = yaml.safe_load(files["mig/mig-parted-config.yaml"])["mig-configs"]
    assert mig["gpu-a100-01"] == [{"devices": list(range(8)), "mig-enabled": True, "mig-devices": {"3g.40gb": 2}}]
