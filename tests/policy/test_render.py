"""Rendered artifacts: shapes, agreement with the document, promtool, determinism."""

from __future__ import annotations

import hashlib
import io
import subprocess
import zipfile
from decimal import Decimal

import pytest
import yaml

from app.core.errors import Invalid
from app.policy.document import PolicyDocument
from app.policy.render import CHECKSUMS_FILE, MIG_FILE, RULES_FILE, bundle_zip, render_bundle, render_objects
from app.policy.render_alerts import GAP_ALERT, INGEST_GAP_METRIC, INGEST_LAG_METRIC, LAG_ALERT, SLA_ALERT
from app.policy.render_k8s import GPU_QUOTA_KEY, MIG_CONFIG_LABEL, POOL_LABEL, VERSION_LABEL
from app.policy.render_mig import expand_devices
from tests.support.policy_docs import PROMTOOL, all_objects, by_kind, doc_of, larger_data, spec_data


@pytest.fixture(params=["spec", "larger"])
def doc(request) -> PolicyDocument:
    return doc_of(spec_data() if request.param == "spec" else larger_data())


# --- shapes -------------------------------------------------------------------------------------


def test_every_kubernetes_document_parses_with_api_version_kind_and_name(doc):
    bundle = render_bundle(doc, 3)
    objects = all_objects(bundle)
    kinds = {o["kind"] for o in objects}
    assert {"PriorityClass", "ResourceQuota", "LimitRange", "Node", "ResourceFlavor", "Cohort", "ClusterQueue",
            "LocalQueue", "WorkloadPriorityClass", "ConfigMap", "PrometheusRule"} <= kinds
    for obj in objects:
        assert isinstance(obj["apiVersion"], str) and obj["apiVersion"]
        assert isinstance(obj["kind"], str) and obj["kind"]
        assert isinstance(obj["metadata"]["name"], str) and obj["metadata"]["name"]
        assert obj["metadata"]["labels"][VERSION_LABEL] == "3"
    assert len(objects) == len(render_objects(doc, 3)) + 2  # + the two wrapper objects
    # Kueue objects all use the v1beta2 API.
    assert {o["apiVersion"] for o in objects if o["kind"] in ("ClusterQueue", "Cohort", "ResourceFlavor", "LocalQueue",
                                                               "WorkloadPriorityClass")} == {"kueue.x-k8s.io/v1beta2"}


def test_mig_and_rules_files_have_their_own_shapes(doc):
    bundle = render_bundle(doc, 3)
    mig = yaml.safe_load(bundle[MIG_FILE])
    assert set(mig) == {"version", "mig-configs"} and mig["version"] == "v1"
    for name, entries in mig["mig-configs"].items():
        assert isinstance(entries, list) and entries, name
        for entry in entries:
            assert set(entry) <= {"devices", "mig-enabled", "mig-devices"}
            assert isinstance(entry["mig-enabled"], bool)
            assert entry["devices"] == "all" or all(isinstance(i, int) for i in entry["devices"])
            assert ("mig-devices" in entry) == entry["mig-enabled"]
    rules = yaml.safe_load(bundle[RULES_FILE])
    assert set(rules) == {"groups"}
    for group in rules["groups"]:
        assert group["name"] and group["rules"]
        for rule in group["rules"]:
            assert {"alert", "expr", "for", "labels", "annotations"} <= set(rule)
    # The ConfigMap and PrometheusRule carry exactly the same content.
    configmap = by_kind(bundle, "ConfigMap")[0]
    assert yaml.safe_load(configmap["data"]["config.yaml"]) == mig
    assert by_kind(bundle, "PrometheusRule")[0]["spec"] == rules


# --- agreement with the document ----------------------------------------------------------------


def test_priority_classes_one_per_tier_inference_preempts_batch_does_not(doc):
    classes = {o["metadata"]["name"]: o for o in by_kind(render_bundle(doc, 1), "PriorityClass")}
    assert set(classes) == {p.name for p in doc.priorities}
    for tier in doc.priorities:
        pc = classes[tier.name]
        assert pc["apiVersion"] == "scheduling.k8s.io/v1"
        assert pc["value"] == tier.value and pc["globalDefault"] is False and pc["description"]
        assert pc["preemptionPolicy"] == ("Never" if tier.preemptible else "PreemptLowerPriority")
    workload = {o["metadata"]["name"]: o["value"] for o in by_kind(render_bundle(doc, 1), "WorkloadPriorityClass")}
    assert workload == {p.name: p.value for p in doc.priorities}


def test_kueue_quotas_match_the_document(doc):
    bundle = render_bundle(doc, 1)
    queues = {o["metadata"]["name"]: o for o in by_kind(bundle, "ClusterQueue")}
    flavors = {o["metadata"]["name"]: o for o in by_kind(bundle, "ResourceFlavor")}
    cohorts = {o["metadata"]["name"] for o in by_kind(bundle, "Cohort")}
    local = {(o["metadata"]["namespace"], o["metadata"]["name"]): o["spec"]["clusterQueue"] for o in by_kind(bundle, "LocalQueue")}
    assert len(queues) == len(doc.quotas)
    assert cohorts == set(flavors) == {p.name for p in doc.pools}
    for quota in doc.quotas:
        cq = queues[f"{quota.tenant}-{quota.pool}"]
        spec = cq["spec"]
        assert spec["cohortName"] == quota.pool
        [group] = spec["resourceGroups"]
        assert group["coveredResources"][0] == "nvidia.com/gpu"
        [flavor] = group["flavors"]
        assert flavor["name"] in flavors
        # Whole GPUs first; the pool's MIG profiles follow (tests/policy/test_render_mig_quotas.py).
        assert flavor["resources"][0] == {"name": "nvidia.com/gpu", "nominalQuota": quota.guaranteed_gpus,
                                          "borrowingLimit": quota.borrowing_limit, "lendingLimit": quota.lending_limit}
        tenant = doc.tenant(quota.tenant)
        [selector] = spec["namespaceSelector"]["matchExpressions"]
        assert selector["key"] == "kubernetes.io/metadata.name" and selector["operator"] == "In"
        assert selector["values"] == sorted(tenant.namespaces)
        for ns in tenant.namespaces:
            assert local[(ns, quota.pool)] == cq["metadata"]["name"]
        preemption = spec["preemption"]
        if tenant.klass == "inference":
            # Borrowing inference may preempt only batch tiers.
            assert preemption["borrowWithinCohort"] == {
                "policy": "LowerPriority", "maxPriorityThreshold": max(p.value for p in doc.priorities if p.preemptible)}
        else:
            # Batch never reclaims from a higher priority (inference) nor preempts to borrow.
            assert preemption["reclaimWithinCohort"] == "LowerPriority"
            assert preemption["borrowWithinCohort"] == {"policy": "Never"}
    for pool in doc.pools:
        assert flavors[pool.name]["spec"]["nodeLabels"] == {POOL_LABEL: pool.name}


def test_resource_quota_and_limit_range_per_tenant_namespace(doc):
    bundle = render_bundle(doc, 1)
    quotas = {o["metadata"]["namespace"]: o for o in by_kind(bundle, "ResourceQuota")}
    limits = {o["metadata"]["namespace"]: o for o in by_kind(bundle, "LimitRange")}
    assert set(limits) == {ns for t in doc.tenants for ns in t.namespaces}
    for tenant in doc.tenants:
        own = [q for q in doc.quotas if q.tenant == tenant.name]
        for ns in tenant.namespaces:
            notes = limits[ns]["metadata"]["annotations"]
            if tenant.klass == "inference":
                assert Decimal(notes["gpu-chargeback.io/memory-reserve-factor"]) == doc.isolation.inference.memory_reserve_factor
            else:
                assert Decimal(notes["gpu-chargeback.io/network-cap-fraction"]) == doc.isolation.training.network_cap_fraction
            [container] = limits[ns]["spec"]["limits"]
            assert container["type"] == "Container" and "default" not in container
            if not own:
                assert ns not in quotas  # uncapped in the document -> no quota that could block serving
                continue
            cap = sum(q.guaranteed_gpus + q.borrowing_limit for q in own)
            assert quotas[ns]["spec"]["hard"][GPU_QUOTA_KEY] == str(cap)
            assert container["max"]["nvidia.com/gpu"] == str(cap)


def test_node_patches_label_pools_and_carry_the_pool_taints(doc):
    nodes = {o["metadata"]["name"]: o for o in by_kind(render_bundle(doc, 1), "Node")}
    assert set(nodes) == {n for p in doc.pools for n in p.nodes}
    for pool in doc.pools:
        expected = sorted(
            ({"key": t.key, **({"value": t.value} if t.value else {}), "effect": t.effect}
             for t in doc.isolation.node_taints.get(pool.name, [])),
            key=lambda t: (t["key"], t["effect"]))
        for node in pool.nodes:
            assert nodes[node]["metadata"]["labels"][POOL_LABEL] == pool.name
            assert nodes[node]["spec"]["taints"] == expected
    for node in doc.isolation.mig:
        assert nodes[node]["metadata"]["labels"][MIG_CONFIG_LABEL] == node


def test_mig_parted_config_matches_the_layout(doc):
    mig = yaml.safe_load(render_bundle(doc, 1)[MIG_FILE])["mig-configs"]
    assert mig["all-disabled"] == [{"devices": "all", "mig-enabled": False}]
    assert set(mig) == {"all-disabled", *doc.isolation.mig}
    for node, layout in doc.isolation.mig.items():
        per_node = doc.pool_for_node(node).gpus_per_node
        got: dict[int, dict] = {}
        for entry in mig[node]:
            for index in entry["devices"]:
                assert index not in got, f"{node}: GPU {index} configured twice"
                got[index] = entry.get("mig-devices") if entry["mig-enabled"] else None
        assert sorted(got) == list(range(per_node))
        want: dict[int, dict] = {}
        for key, profiles in layout.gpus.items():
            low, _, high = key.partition("-")
            for index in range(int(low), int(high or low) + 1):
                want[index] = dict(profiles)
        for index in range(per_node):
            assert got[index] == want.get(index), f"{node} GPU {index}"


def test_larger_layout_expands_ranges_and_keeps_the_rest_whole():
    mig = yaml.safe_load(render_bundle(doc_of(larger_data()), 1)[MIG_FILE])["mig-configs"]
    assert mig["gpu-h100-03"] == [
        {"devices": [0, 1], "mig-enabled": True, "mig-devices": {"1g.10gb": 7}},
        {"devices": [2], "mig-enabled": False},
        {"devices": [3], "mig-enabled": True, "mig-devices": {"3g.40gb": 1, "4g.40gb": 1}},
    ]
    assert mig["gpu-a100-02"][0] == {"devices": [0, 1, 2, 3], "mig-enabled": True, "mig-devices": {"3g.40gb": 2}}


def test_expand_devices():
    assert expand_devices("0-3") == [0, 1, 2, 3]
    assert expand_devices("5") == [5]
    assert expand_devices(" 4-5,0, 2") == [0, 2, 4, 5]
    for bad in ("", "a-b", "3-1", "1--2"):
        with pytest.raises(Invalid) as err:
            expand_devices(bad, path='isolation.mig["n"].gpus["x"]')
        assert err.value.errors[0].path == 'isolation.mig["n"].gpus["x"]'


# --- alert rules --------------------------------------------------------------------------------


def test_alert_thresholds_are_the_red_lines_in_seconds():
    doc = doc_of(larger_data())
    rules = yaml.safe_load(render_bundle(doc, 1)[RULES_FILE])
    sla_rules = {r["labels"]["service"]: r for g in rules["groups"] for r in g["rules"] if r["alert"] == SLA_ALERT}
    assert set(sla_rules) == {"search-chat", "ads-rank"}
    assert sla_rules["search-chat"]["expr"] == (
        'histogram_quantile(0.99, sum by (le) (rate(vllm:e2e_request_latency_seconds_bucket{namespace="search-prod"}[5m]))) > 0.3')
    assert sla_rules["ads-rank"]["expr"].endswith("(rate(rank_latency_seconds_bucket{job=\"ads\"}[5m]))) > 0.0875")
    for sla in doc.sla:
        rule = sla_rules[sla.service]
        assert rule["for"] == "5m"
        assert rule["labels"] == {"severity": "critical", "service": sla.service, "tenant": sla.tenant, "pool": sla.pool}
    exprs = {r["alert"]: r["expr"] for g in rules["groups"] for r in g["rules"]}
    assert exprs[GAP_ALERT] == f"{INGEST_GAP_METRIC} > 0"
    assert exprs[LAG_ALERT] == f"{INGEST_LAG_METRIC} > 7200"


def _promtool(*args: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([PROMTOOL, *args], cwd=cwd, capture_output=True, text=True, timeout=60)


def test_promtool_check_rules_passes(doc, tmp_path):
    bundle = render_bundle(doc, 1)
    (tmp_path / "rules.yaml").write_text(bundle[RULES_FILE])
    result = _promtool("check", "rules", "rules.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout
    # And promtool does reject a broken file, so the check above means something.
    (tmp_path / "bad.yaml").write_text(bundle[RULES_FILE].replace("> 0.3", "> > 0.3"))
    assert _promtool("check", "rules", "bad.yaml", cwd=tmp_path).returncode != 0


def test_promtool_unit_test_fires_the_alerts(tmp_path):
    """Real evaluation: slow requests fire the SLA alert after 5 minutes; fast ones never do."""
    bundle = render_bundle(doc_of(spec_data()), 1)
    (tmp_path / "rules.yaml").write_text(bundle[RULES_FILE])
    bucket = 'vllm:e2e_request_latency_seconds_bucket{{namespace="{ns}",le="{le}"}}'
    series = []
    # search-prod: every request lands between 0.1 s and 0.5 s -> P99 ~0.496 s > 0.3 s.
    for le, values in (("0.1", "0+0x30"), ("0.5", "0+10x30"), ("+Inf", "0+10x30")):
        series.append({"series": bucket.format(ns="search-prod", le=le), "values": values})
    tests = {
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": series + [
                    {"series": INGEST_GAP_METRIC, "values": "0x5 2x25"},
                    {"series": INGEST_LAG_METRIC, "values": "3600x10 9000x20"},
                ],
                "alert_rule_test": [
                    {"eval_time": "4m", "alertname": SLA_ALERT, "exp_alerts": []},
                    {"eval_time": "10m", "alertname": SLA_ALERT, "exp_alerts": [{
                        "exp_labels": {"severity": "critical", "service": "search-chat", "tenant": "search", "pool": "mixed-a100"},
                        "exp_annotations": {
                            "summary": "search-chat: P99 latency above 300 ms for 5 minutes",
                            "description": "P99 of search-chat (tenant search, pool mixed-a100) is 496ms, above its 300 ms "
                                           "red line. Each breach minute costs co-located training/preprocessing 0.5 USD.",
                        },
                    }]},
                    {"eval_time": "10m", "alertname": GAP_ALERT, "exp_alerts": []},
                    {"eval_time": "25m", "alertname": GAP_ALERT, "exp_alerts": [{
                        "exp_labels": {"severity": "warning"},
                        "exp_annotations": {
                            "summary": "Chargeback ingestion has gap hours",
                            "description": "2 hour(s) of the open period could not be read and are not billed; re-ingest them.",
                        },
                    }]},
                    {"eval_time": "20m", "alertname": LAG_ALERT, "exp_alerts": [{
                        "exp_labels": {"severity": "warning"},
                        "exp_annotations": {
                            "summary": "Chargeback ingestion is more than 2 hours behind",
                            "description": "The last ingested hour ended 2h 30m 0s ago.",
                        },
                    }]},
                ],
            },
            {
                "interval": "1m",
                "input_series": [
                    {"series": bucket.format(ns="search-prod", le=le), "values": "0+10x30"} for le in ("0.1", "0.5", "+Inf")
                ],
                "alert_rule_test": [{"eval_time": "20m", "alertname": SLA_ALERT, "exp_alerts": []}],
            },
        ],
    }
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump(tests, sort_keys=False))
    result = _promtool("test", "rules", "tests.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


# --- determinism --------------------------------------------------------------------------------


def _reordered(data: dict) -> dict:
    data = {k: data[k] for k in reversed(list(data))}
    for key in ("tenants", "pools", "sla", "priorities", "quotas"):
        data[key] = list(reversed(data[key]))
    for tenant in data["tenants"]:
        tenant["namespaces"] = list(reversed(tenant["namespaces"]))
    data["isolation"]["mig"] = dict(reversed(list(data["isolation"]["mig"].items())))
    data["isolation"]["node_taints"] = {k: list(reversed(v)) for k, v in reversed(list(data["isolation"]["node_taints"].items()))}
    return data


def test_same_input_same_bytes_including_the_zip():
    first = render_bundle(doc_of(larger_data()), 9)
    assert first == render_bundle(doc_of(larger_data()), 9)
    assert bundle_zip(doc_of(larger_data()), 9) == bundle_zip(doc_of(larger_data()), 9)
    # Reordering named lists and maps does not change a byte.
    assert render_bundle(doc_of(_reordered(larger_data())), 9) == first
    assert bundle_zip(doc_of(_reordered(larger_data())), 9) == bundle_zip(doc_of(larger_data()), 9)
    # A real change does.
    changed = larger_data()
    changed["quotas"][0]["guaranteed_gpus"] = 3
    assert render_bundle(doc_of(changed), 9)["kueue/clusterqueues.yaml"] != first["kueue/clusterqueues.yaml"]
    assert render_bundle(doc_of(larger_data()), 10) != first


def test_zip_holds_the_bundle_with_fixed_metadata_and_checksums():
    doc = doc_of(spec_data())
    bundle = render_bundle(doc, 4)
    with zipfile.ZipFile(io.BytesIO(bundle_zip(doc, 4))) as archive:
        names = archive.namelist()
        assert names == [f"policy-v4/{n}" for n in bundle]
        for info in archive.infolist():
            assert info.date_time == (1980, 1, 1, 0, 0, 0)
            assert archive.read(info).decode() == bundle[info.filename.removeprefix("policy-v4/")]
    sums = dict(reversed(line.split("  ")) for line in bundle[CHECKSUMS_FILE].splitlines())
    assert set(sums) == set(bundle) - {CHECKSUMS_FILE}
    for name, digest in sums.items():
        assert hashlib.sha256(bundle[name].encode()).hexdigest() == digest


def test_document_without_quotas_or_sla_still_renders_valid_rules(tmp_path):
    data = spec_data()
    data["quotas"] = []
    data["sla"] = []
    data["isolation"]["mig"] = {}
    bundle = render_bundle(doc_of(data), 2)
    assert "kueue/clusterqueues.yaml" not in bundle and "kubernetes/resourcequotas.yaml" not in bundle
    assert yaml.safe_load(bundle[MIG_FILE])["mig-configs"] == {"all-disabled": [{"devices": "all", "mig-enabled": False}]}
    (tmp_path / "rules.yaml").write_text(bundle[RULES_FILE])
    result = _promtool("check", "rules", "rules.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert [g["name"] for g in yaml.safe_load(bundle[RULES_FILE])["groups"]] == ["chargeback-ingestion"]
