"""deploy/kubernetes: kustomize renders base and overlay; every object validates against its schema."""

from __future__ import annotations

import copy
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from app.policy.parsing import parse_document
from app.policy.render import render_bundle
from tests.support.deploy import ROOT, check_command, check_settings, crd_validator, validate_core

pytestmark = pytest.mark.deploy

KUBE = ROOT / "deploy" / "kubernetes"
BASE, OVERLAY = KUBE / "base", KUBE / "overlays" / "example"
MONITORING = "monitoring.coreos.com/v1"
SECRET = "chargeback-secrets"


def kustomize(path: Path) -> list[dict]:
    """`kubectl kustomize PATH` (scripts/test.sh installs Debian's kubernetes-client where kubectl is missing)."""
    kubectl = shutil.which("kubectl")
    assert kubectl, "kubectl not found: scripts/test.sh installs it (Debian package kubernetes-client)"
    done = subprocess.run([kubectl, "kustomize", str(path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


@pytest.fixture(scope="module")
def base() -> list[dict]:
    return kustomize(BASE)


@pytest.fixture(scope="module")
def overlay() -> list[dict]:
    return kustomize(OVERLAY)


def by_kind(objects: list[dict], kind: str) -> dict[str, dict]:
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == kind}


def pod_specs(objects: list[dict]) -> dict[str, dict]:
    return {o["metadata"]["name"]: o["spec"]["template"]["spec"] for o in objects if o["kind"] in {"Deployment", "Job"}}


# ---- schemas ----------------------------------------------------------------------------------

@pytest.mark.parametrize("which", ["base", "overlay"])
def test_core_objects_validate_strictly(which, base, overlay, tmp_path):
    objects = [o for o in (base if which == "base" else overlay) if o["apiVersion"] != MONITORING]
    done = validate_core(objects, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("passed for resource") == len(objects), done.stdout


def test_strict_validation_rejects_a_misspelt_field(base, tmp_path):
    deployment = copy.deepcopy(by_kind(base, "Deployment")["chargeback-web"])
    deployment["spec"]["template"]["spec"]["containers"][0]["readinessProbes"] = {}
    done = validate_core([deployment], tmp_path)
    assert done.returncode != 0 and "readinessProbes" in done.stdout


@pytest.mark.parametrize("which", ["base", "overlay"])
def test_monitoring_objects_match_the_prometheus_operator_crds(which, base, overlay):
    objects = [o for o in (base if which == "base" else overlay) if o["apiVersion"] == MONITORING]
    assert sorted(o["kind"] for o in objects) == ["PrometheusRule", "ServiceMonitor"]
    for obj in objects:
        errors = [e.message for e in crd_validator(obj["kind"]).iter_errors(obj)]
        assert not errors, (obj["kind"], errors)


def test_crd_validation_rejects_a_misspelt_field(base):
    monitor = copy.deepcopy(by_kind(base, "ServiceMonitor")["chargeback"])
    monitor["spec"]["endpoints"][0]["intervall"] = "30s"
    assert list(crd_validator("ServiceMonitor").iter_errors(monitor))


# ---- what the objects say ---------------------------------------------------------------------

def test_prometheusrule_is_what_the_portal_renders():
    doc = parse_document((ROOT / "examples" / "policy.yaml").read_text())
    assert (BASE / "prometheusrule.yaml").read_text() == render_bundle(doc, 1)["prometheus/prometheusrule.yaml"]


def test_overlay_puts_everything_in_its_namespace_with_its_image_and_settings(base, overlay):
    names = lambda objs: sorted((o["kind"], o["metadata"]["name"]) for o in objs)  # noqa: E731
    assert names(overlay) == sorted(names(base) + [("Namespace", "gpu-chargeback")])
    assert all(o["metadata"].get("namespace") == "gpu-chargeback" for o in overlay if o["kind"] != "Namespace")
    images = {c["image"] for spec in pod_specs(overlay).values() for c in spec["containers"]}
    assert images == {"registry.example.com/platform/gpu-chargeback:0.1.0"}
    data = by_kind(overlay, "ConfigMap")["chargeback-settings"]["data"]
    assert data["CHARGEBACK_BILLING_TIMEZONE"] == "Europe/Berlin"
    assert data["CHARGEBACK_ENVIRONMENT"] == "production"  # merged, not replaced


def test_workloads_run_real_commands_with_real_settings(overlay):
    settings = by_kind(overlay, "ConfigMap")["chargeback-settings"]["data"]
    specs = pod_specs(overlay)
    assert set(specs) == {"chargeback-migrate", "chargeback-web", "chargeback-worker"}
    commands = {}
    for name, spec in specs.items():
        (container,) = spec["containers"]
        check_command(container["command"])
        commands[name] = container["command"][1]
        assert container["envFrom"] == [{"configMapRef": {"name": "chargeback-settings"}}]
        refs = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in container["env"]}
        assert refs == {"CHARGEBACK_DATABASE_URL": {"name": SECRET, "key": "database-url"},
                        "CHARGEBACK_SECRET_KEY": {"name": SECRET, "key": "secret-key"}}
        env = {**settings, "CHARGEBACK_DATABASE_URL": "postgresql://u:p@db/chargeback", "CHARGEBACK_SECRET_KEY": "s" * 40}
        assert check_settings(env).environment == "production"
    assert commands == {"chargeback-migrate": "db", "chargeback-web": "serve", "chargeback-worker": "worker"}


def test_pods_are_non_root_with_read_only_roots_and_bounded_resources(overlay):
    for name, spec in pod_specs(overlay).items():
        assert spec["securityContext"]["runAsNonRoot"] is True and spec["securityContext"]["runAsUser"] != 0
        assert spec["automountServiceAccountToken"] is False
        empty_dirs = {v["name"] for v in spec.get("volumes", []) if "emptyDir" in v}
        for c in spec["containers"]:
            ctx = c["securityContext"]
            assert ctx["readOnlyRootFilesystem"] is True and ctx["allowPrivilegeEscalation"] is False, name
            assert ctx["capabilities"]["drop"] == ["ALL"]
            assert {m["name"] for m in c["volumeMounts"]} <= empty_dirs  # writable paths are emptyDirs only
            assert "/tmp" in {m["mountPath"] for m in c["volumeMounts"]}
            assert c["resources"]["requests"]["cpu"] and c["resources"]["limits"]["memory"]


def test_web_has_two_probed_replicas_behind_the_service_and_the_monitor(overlay):
    web = by_kind(overlay, "Deployment")["chargeback-web"]
    assert web["spec"]["replicas"] == 2
    (container,) = web["spec"]["template"]["spec"]["containers"]
    port = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert port["http"] == int(container["command"][container["command"].index("--port") + 1])
    # liveness: the process answers; readiness: the database also holds this version's schema
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    pod_labels = web["spec"]["template"]["metadata"]["labels"]
    service = by_kind(overlay, "Service")["chargeback"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert {p["targetPort"] for p in service["spec"]["ports"]} == {"http"}
    monitor = by_kind(overlay, "ServiceMonitor")["chargeback"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert [(e["port"], e["path"]) for e in monitor["spec"]["endpoints"]] == [("http", "/metrics")]
    allowed = {p["port"] for rule in by_kind(overlay, "NetworkPolicy")["chargeback-web"]["spec"]["ingress"]
               for p in rule["ports"]}
    assert allowed == {port["http"]}


def test_network_policy_denies_by_default_and_allows_dns_postgres_prometheus(overlay):
    default = by_kind(overlay, "NetworkPolicy")["chargeback-default"]["spec"]
    assert set(default["policyTypes"]) == {"Ingress", "Egress"} and default["ingress"] == []
    ports = {(p["protocol"], p["port"]) for rule in default["egress"] for p in rule["ports"]}
    assert ports == {("UDP", 53), ("TCP", 53), ("TCP", 5432), ("TCP", 9090)}
    assert default["podSelector"]["matchLabels"] == {"app.kubernetes.io/name": "gpu-chargeback"}
