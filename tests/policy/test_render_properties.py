"""Rendering under hostile names and random edits: never a crash, always well-formed output."""

from __future__ import annotations

import re
import subprocess

import pytest
import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from app.core.errors import Invalid
from app.policy.document import PolicyDocument
from app.policy.render import MIG_FILE, RULES_FILE, render_bundle
from app.policy.render_alerts import SLA_ALERT
from app.policy.validation import validate
from tests.support.policy_docs import PROMTOOL, all_objects, larger_data, spec_data

DNS1123 = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")


@pytest.mark.parametrize("service", ['we{{ird "svc" }}\\', "{{ $value }}", "检索-chat", "a}}b{{"])
def test_names_with_template_syntax_reach_the_alert_verbatim(service, tmp_path):
    data = spec_data()
    data["sla"][0]["service"] = service
    data["pools"][0]["name"] = "Pool_{{A}}"
    data["sla"][0]["pool"] = "Pool_{{A}}"
    data["quotas"][0]["pool"] = "Pool_{{A}}"
    data["isolation"]["node_taints"] = {"Pool_{{A}}": data["isolation"]["node_taints"]["mixed-a100"]}
    bundle = render_bundle(PolicyDocument.model_validate(data), 1)
    for obj in all_objects(bundle):
        assert DNS1123.match(obj["metadata"]["name"]), obj["metadata"]["name"]
    (tmp_path / "rules.yaml").write_text(bundle[RULES_FILE])
    bucket = 'vllm:e2e_request_latency_seconds_bucket{namespace="search-prod",le="%s"}'
    tests = {
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": [{"series": bucket % le, "values": v} for le, v in (("0.1", "0x20"), ("0.5", "0+6x20"), ("+Inf", "0+6x20"))],
            "alert_rule_test": [{"eval_time": "10m", "alertname": SLA_ALERT, "exp_alerts": [{
                "exp_labels": {"severity": "critical", "service": service, "tenant": "search", "pool": "Pool_{{A}}"},
                "exp_annotations": {
                    "summary": f"{service}: P99 latency above 300 ms for 5 minutes",
                    "description": f"P99 of {service} (tenant search, pool Pool_{{{{A}}}}) is 496ms, above its 300 ms red "
                                   "line. Each breach minute costs co-located training/preprocessing 0.5 USD.",
                },
            }]}],
        }],
    }
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump(tests, allow_unicode=True))
    result = subprocess.run([PROMTOOL, "test", "rules", "tests.yaml"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


_name = st.text(alphabet="abcXYZ_-.{} 09", min_size=1, max_size=8)


def _edits():
    def pool_name(d, n):
        if not d["pools"]:
            return
        old = d["pools"][0]["name"]
        d["pools"][0]["name"] = n
        for item in d["sla"] + d["quotas"]:
            if item["pool"] == old:
                item["pool"] = n

    def quota(d, i, g, b, lend):
        if d["quotas"]:
            d["quotas"][i % len(d["quotas"])].update(guaranteed_gpus=g, borrowing_limit=b, lending_limit=lend)

    def mig_range(d, key, n):
        d["isolation"]["mig"]["gpu-a100-02"]["gpus"] = {key: {"1g.10gb": n}}

    def p99(d, ms):
        for sla in d["sla"][:1]:
            sla["p99_ms"] = ms

    def drop(d, key):
        d[key] = []

    def taint(d, key, value, effect):
        d["isolation"]["node_taints"].setdefault("mixed-a100", []).append({"key": key, "value": value, "effect": effect})

    def gpus_per_node(d, n):
        for pool in d["pools"][:1]:
            pool["gpus_per_node"] = n

    ints = st.integers(0, 12)
    return st.one_of(
        st.tuples(st.just(pool_name), _name),
        st.tuples(st.just(quota), ints, ints, ints, ints),
        st.tuples(st.just(mig_range), st.sampled_from(["0-3", "5", "0-7", "3-1", "x", "0-20", "2,4"]), st.integers(0, 8)),
        st.tuples(st.just(p99), st.decimals(min_value="0.001", max_value="100000", places=3).map(str)),
        st.tuples(st.just(drop), st.sampled_from(["tenants", "pools", "sla", "priorities", "quotas"])),
        st.tuples(st.just(taint), st.sampled_from(["workload", "gpu", "nvidia.com/gpu"]), st.sampled_from(["", "x"]),
                  st.sampled_from(["NoSchedule", "NoExecute", "PreferNoSchedule"])),
        st.tuples(st.just(gpus_per_node), st.integers(1, 16)),
    )


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(edits=st.lists(_edits(), max_size=4))
def test_random_edits_render_or_fail_cleanly(edits):
    data = larger_data()
    for fn, *args in edits:
        fn(data, *args)
    try:
        doc = PolicyDocument.model_validate(data)
    except ValidationError:
        assume(False)
    valid = not [e for e in validate(doc) if e.severity == "error"]
    try:
        bundle = render_bundle(doc, 5)
    except Invalid as exc:
        assert not valid, "a document that passes validation must render"
        assert exc.errors and exc.errors[0].path.startswith("isolation.mig")
        return
    assert bundle == render_bundle(doc, 5)
    for obj in all_objects(bundle):
        assert obj["apiVersion"] and obj["kind"] and DNS1123.match(obj["metadata"]["name"])
    mig = yaml.safe_load(bundle[MIG_FILE])
    assert mig["version"] == "v1"
    rules = yaml.safe_load(bundle[RULES_FILE])
    for rule in rules["groups"][0]["rules"]:
        assert re.search(r" > \d+(\.\d+)?$", rule["expr"])  # a plain number PromQL accepts
