"""Rendered artifacts of a policy version, as one deterministic bundle (SPEC section 7).

Same document and version -> same bytes, for every file and for the zip: objects are built in a
fixed order, named lists are sorted by key, and the zip carries fixed timestamps and modes.
"""

from __future__ import annotations

import hashlib
import io
import zipfile
from collections.abc import Callable

import yaml

from app.policy import render_alerts, render_k8s, render_kueue, render_mig
from app.policy.document import PolicyDocument

# Defaults for the two wrapper objects; operators re-target them with kustomize if they differ.
GPU_OPERATOR_NAMESPACE = "gpu-operator"
MONITORING_NAMESPACE = "monitoring"
MIG_CONFIGMAP = "chargeback-mig-parted-config"
RULES_NAME = "chargeback-policy-rules"

MIG_FILE = "mig/mig-parted-config.yaml"
RULES_FILE = "prometheus/rules.yaml"
CHECKSUMS_FILE = "SHA256SUMS"

# Files of Kubernetes objects, in apply order (classes and flavors before what references them).
_OBJECT_FILES: list[tuple[str, Callable[[PolicyDocument, int], list[dict]]]] = [
    ("kubernetes/priorityclasses.yaml", render_k8s.priority_classes),
    ("kubernetes/resourcequotas.yaml", render_k8s.resource_quotas),
    ("kubernetes/limitranges.yaml", render_k8s.limit_ranges),
    ("kubernetes/nodes.yaml", render_k8s.node_patches),
    ("kueue/workloadpriorityclasses.yaml", render_kueue.workload_priority_classes),
    ("kueue/resourceflavors.yaml", render_kueue.resource_flavors),
    ("kueue/cohorts.yaml", render_kueue.cohorts),
    ("kueue/clusterqueues.yaml", render_kueue.cluster_queues),
    ("kueue/localqueues.yaml", render_kueue.local_queues),
]


class _Dumper(yaml.SafeDumper):
    """Safe dumper that writes multi-line strings (an embedded config file) as literal blocks."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)
_DUMP_OPTIONS = {"Dumper": _Dumper, "sort_keys": False, "default_flow_style": False, "allow_unicode": True, "width": 1 << 20}


def dump(data: dict) -> str:
    """One YAML document, keys in construction order, never line-wrapped (PromQL stays on one line)."""
    return yaml.dump(data, **_DUMP_OPTIONS)


def dump_all(docs: list[dict]) -> str:
    """Several YAML documents, each opened by `---`."""
    return yaml.dump_all(docs, explicit_start=True, **_DUMP_OPTIONS)


def _header(version: int) -> str:
    return f"# Rendered by gpu-chargeback from policy version {version}. Do not edit: change the policy instead.\n"


def _wrappers(doc: PolicyDocument, version: int, mig_text: str, rules: dict) -> list[tuple[str, dict]]:
    configmap = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": render_k8s.meta(MIG_CONFIGMAP, version, namespace=GPU_OPERATOR_NAMESPACE),
        "data": {"config.yaml": mig_text},
    }
    prometheus_rule = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": render_k8s.meta(RULES_NAME, version, namespace=MONITORING_NAMESPACE),
        "spec": rules,
    }
    return [
        ("kubernetes/mig-parted-configmap.yaml", configmap),
        ("prometheus/prometheusrule.yaml", prometheus_rule),
    ]


def render_objects(doc: PolicyDocument, version: int) -> list[dict]:
    """Every Kubernetes-style object of the bundle (apiVersion/kind/metadata), in apply order."""
    objects: list[dict] = []
    for _, render in _OBJECT_FILES:
        objects.extend(render(doc, version))
    return objects


def render_bundle(doc: PolicyDocument, version: int) -> dict[str, str]:
    """Filename -> YAML text for every artifact of the version, plus a SHA256SUMS manifest."""
    files: dict[str, str] = {}
    for name, render in _OBJECT_FILES:
        objects = render(doc, version)
        if objects:
            files[name] = _header(version) + dump_all(objects)
    mig_text = dump(render_mig.mig_parted_config(doc))
    rules = render_alerts.alert_rules(doc)
    files[MIG_FILE] = _header(version) + mig_text
    files[RULES_FILE] = _header(version) + dump(rules)
    for name, obj in _wrappers(doc, version, mig_text, rules):
        files[name] = _header(version) + dump_all([obj])
    ordered = dict(sorted(files.items()))
    ordered[CHECKSUMS_FILE] = "".join(
        f"{hashlib.sha256(text.encode()).hexdigest()}  {name}\n" for name, text in ordered.items()
    )
    return ordered


# 1980-01-01 is the earliest time a zip entry can carry; any fixed value makes the bytes repeatable.
_ZIP_EPOCH = (1980, 1, 1, 0, 0, 0)


def bundle_zip(doc: PolicyDocument, version: int) -> bytes:
    """The bundle as a zip under `policy-v<version>/`, byte-identical for identical input."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, text in render_bundle(doc, version).items():
            info = zipfile.ZipInfo(f"policy-v{version}/{name}", date_time=_ZIP_EPOCH)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.create_system = 3  # unix, so the mode below is honoured everywhere
            info.external_attr = 0o100644 << 16
            archive.writestr(info, text.encode())
    return buffer.getvalue()
