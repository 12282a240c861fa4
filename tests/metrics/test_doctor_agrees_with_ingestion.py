"""`chargeback doctor` and ingestion call the same units free (issue 9, Deliver 1 and 9).

dcgm-exporter runs under names the defaults do not know (pod `gpu-telemetry-8h2kd`, container
`gpu-metrics`) and is scraped with `honor_labels: true`, so a free GPU carries the exporter's own
pod. A real Prometheus scrapes the fixture to fix the stored label sets; an hour of history is
backfilled for exactly those sets (and `up` of the target). Without the exporter settings ingestion
bills the free GPU-seconds to namespace `monitoring` and the doctor says so (exit 1, naming the
setting); with CHARGEBACK_EXPORTER_CONTAINERS both treat those units as free and the doctor is clean.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pytest
import yaml

from app.core.settings import Settings
from app.core.timeutil import from_epoch
from app.metrics import doctor
from app.metrics import labels as rules
from app.metrics.attribution import attribute_hour
from app.metrics.prometheus_api import PromReader
from app.metrics.sources import get_source
from tests.support import dcgm
from tests.support.dcgm import A100, Job, Pod, Unit
from tests.support.policies import mixed_policy
from tests.support.prometheus import PrometheusServer

H = 1_764_547_200  # 2025-12-01T00:00Z
CLI = Path(sys.executable).with_name("chargeback")
EXPORTER = {"namespace": "monitoring", "pod": "gpu-telemetry-8h2kd", "container": "gpu-metrics"}
TRAIN0, PREP1 = Pod("vision-train", "train-0", "trainer"), Pod("data-prep", "prep-1", "worker")
UNITS = {"telemetry": [Unit("gpu-a100-01", 0, A100, [(TRAIN0, 0, 30), (None, 30, 60)]),
                       Unit("gpu-a100-01", 1, A100, [(None, 0, 20), (PREP1, 20, 60)])]}
JOBS = [Job("gpu-telemetry", "telemetry", 30, 7, True, EXPORTER)]
# The exporter's containers the fix names: the defaults kept, its own added.
CONTAINERS = "exporter,nvidia-dcgm-exporter,dcgm-exporter,gpu-metrics"
BILLED = {("a100", "vision", "training", False): Decimal(1800),
          ("a100", "etl", "preprocessing", False): Decimal(2400)}
# The free GPU-seconds (GPU 0 from :30, GPU 1 until :20) billed to the exporter's namespace.
MISBILLED = {**BILLED, ("a100", "unallocated", "unallocated", False): Decimal(3000)}


def policy():
    pools = [{"name": "a100", "nodes": ["gpu-a100-01", "gpu-a100-02"], "reserved_fraction": "0", "gpus_per_node": 2,
              "gpu_model": A100}]
    return mixed_policy(sla=[], pools=pools)


@pytest.fixture(scope="module")
def telemetry(tmp_path_factory):
    """A real Prometheus holding the hour as it stores a honor_labels scrape of the renamed exporter."""
    stored = dcgm.oracle(tmp_path_factory.mktemp("prom-oracle"), UNITS, JOBS)
    assert {m["pod"] for m in stored} == {"train-0", "prep-1", EXPORTER["pod"]}  # honor_labels fills in the target
    up = [({"job": job.name, "instance": job.endpoint, **job.target_labels},
           [(t, 1.0) for t in range(H + job.offset_s, H + 3600, job.interval_s)]) for job in JOBS]
    text = dcgm.history(stored, UNITS, JOBS, H, 1, [("up", "gauge", up)])
    root = tmp_path_factory.mktemp("prom-telemetry")
    (root / "policy.yaml").write_text(yaml.safe_dump(json.loads(policy().model_dump_json(by_alias=True,
                                                                                         exclude_none=True))))
    with PrometheusServer.backfilled(root, text) as server:
        yield server, stored, root / "policy.yaml"


def usage(url: str, settings: Settings) -> dict:
    """The hour's rollup from the source the worker builds from `settings`."""
    source = get_source(settings.model_copy(update={"prometheus_url": url}))
    batch = source.fetch(start=from_epoch(H), end=from_epoch(H + 3600), policy=policy())
    rollup = attribute_hour(batch, hour=H, policy=policy())
    assert {p.pool: p.capacity_gpu_seconds for p in rollup.pools} == {"a100": Decimal(7200)}
    return {(u.pool, u.tenant, u.klass, u.dark): u.gpu_seconds for u in rollup.usage}


def run_cli(url: str, policy_path: Path, **env: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "200", "CHARGEBACK_DATABASE_URL": "sqlite:////nonexistent/none.db", **env}
    return subprocess.run([str(CLI), "doctor", "--url", url, "--policy", str(policy_path), "--json", "--lookback", "3600",
                           "--at", from_epoch(H + 3600).isoformat()], env=env, capture_output=True, text=True, timeout=120)


def test_the_rule_is_one_function_and_the_cross_check_only_suspects(telemetry):
    _, stored, _ = telemetry
    free = [m for m in stored if m["pod"] == EXPORTER["pod"]]
    assert rules.target_pods(stored) == set()  # honor_labels: no exported_* labels name the target
    assert all(rules.workload_of(m, rules.DEFAULT_EXPORTER, rules.target_pods(stored)) is not None for m in free)
    up = [{"job": "gpu-telemetry", **EXPORTER}]
    assert rules.suspected_exporter_pods(stored, up) == {("monitoring", EXPORTER["pod"])}
    known = rules.ExporterIdentity.from_settings(Settings(exporter_containers=CONTAINERS))
    assert all(rules.workload_of(m, known) is None for m in free)


def test_without_the_setting_ingestion_misbills_and_the_doctor_says_so(telemetry):
    server, _, policy_path = telemetry
    assert usage(server.url, Settings()) == MISBILLED
    report = doctor.run(PromReader(server.url), at=H + 3600, policy=policy(), lookback_s=3600,
                        exporter=rules.ExporterIdentity.from_settings(Settings()))
    found = {f.code: f for f in report.findings}
    billed = found["exporter-pod-billed"]
    assert billed.severity == "error" and report.failing
    assert "monitoring/gpu-telemetry-8h2kd on every GPU of gpu-a100-01 (container gpu-metrics)" in billed.detail
    assert f"CHARGEBACK_EXPORTER_CONTAINERS={CONTAINERS}" in billed.fix and "CHARGEBACK_EXPORTER_POD_REGEX" in billed.fix
    assert "gpu-telemetry-.*" in billed.fix and "namespace monitoring" in billed.bill
    # The doctor counts what ingestion bills: the exporter's namespace is unclaimed use, as `unallocated` above.
    assert found["unclaimed-namespaces"].severity == "error"
    assert found["unclaimed-namespaces"].detail == "monitoring (2 units)"
    assert report.label_style == "honor_labels"

    done = run_cli(server.url, policy_path)
    assert done.returncode == 1, done.stderr
    assert "exporter-pod-billed" in {f["code"] for f in json.loads(done.stdout)["findings"]}


def test_with_the_setting_both_treat_the_units_as_free_and_the_doctor_is_clean(telemetry):
    server, _, policy_path = telemetry
    settings = Settings(exporter_containers=CONTAINERS)
    assert usage(server.url, settings) == BILLED
    report = doctor.run(PromReader(server.url), at=H + 3600, policy=policy(), lookback_s=3600,
                        exporter=rules.ExporterIdentity.from_settings(settings))
    assert not report.failing, [f for f in report.findings if f.severity == "error"]
    found = {f.code for f in report.findings}
    assert "exporter-pod-billed" not in found and "unclaimed-namespaces" not in found
    assert report.label_style == "honor_labels" and report.summary["units"] == 2

    # The command reads the same setting as the worker.
    done = run_cli(server.url, policy_path, CHARGEBACK_EXPORTER_CONTAINERS=CONTAINERS)
    assert done.returncode == 0, done.stdout + done.stderr
    assert not json.loads(done.stdout)["failing"]
    # A pod regex is the other way to say it.
    regex = run_cli(server.url, policy_path, CHARGEBACK_EXPORTER_POD_REGEX="(nvidia-)?dcgm-exporter(-.*)?|gpu-telemetry-.*")
    assert regex.returncode == 0, regex.stdout + regex.stderr
    assert usage(server.url, Settings(exporter_pod_regex="(nvidia-)?dcgm-exporter(-.*)?|gpu-telemetry-.*")) == BILLED


@pytest.fixture(scope="module")
def nameless(tmp_path_factory):
    """The renamed exporter without NODE_NAME prints its pod as Hostname; kube_pod_info knows the pod's node."""
    units = {"telemetry": [Unit(EXPORTER["pod"], 0, A100, [(TRAIN0, 0, 60)]),
                           Unit(EXPORTER["pod"], 1, A100, [(PREP1, 0, 60)])]}
    jobs = [Job("gpu-telemetry", "telemetry", 30, 7)]
    stored = dcgm.oracle(tmp_path_factory.mktemp("prom-oracle"), units, jobs)
    text = dcgm.history(stored, units, jobs, H, 1, dcgm.kube_state_metrics(H, [], {EXPORTER["pod"]: "gpu-a100-01"}, 1))
    with PrometheusServer.backfilled(tmp_path_factory.mktemp("prom-nameless"), text) as server:
        yield server


def pools(url: str, settings: Settings) -> set[str]:
    source = get_source(settings.model_copy(update={"prometheus_url": url}))
    batch = source.fetch(start=from_epoch(H), end=from_epoch(H + 3600), policy=policy())
    return {p.pool for p in attribute_hour(batch, hour=H, policy=policy()).pools}


def test_a_hostname_pod_is_mapped_to_its_node_only_when_ingestion_would_map_it(nameless):
    regex = "(nvidia-)?dcgm-exporter(-.*)?|gpu-telemetry-.*"
    assert pools(nameless.url, Settings()) == {"unpooled"}
    report = doctor.run(PromReader(nameless.url), at=H + 3600, policy=policy(), lookback_s=3600,
                        exporter=rules.ExporterIdentity.from_settings(Settings()))
    finding = next(f for f in report.findings if f.code == "hostname-is-pod")
    assert finding.severity == "error" and "not named by the exporter pod regex" in finding.detail
    assert f"CHARGEBACK_EXPORTER_POD_REGEX='{regex}'" in finding.fix and report.failing

    settings = Settings(exporter_pod_regex=regex)
    assert pools(nameless.url, settings) == {"a100"}
    report = doctor.run(PromReader(nameless.url), at=H + 3600, policy=policy(), lookback_s=3600,
                        exporter=rules.ExporterIdentity.from_settings(settings))
    assert {f.code: f.severity for f in report.findings}["hostname-is-pod"] == "warning"
    assert not report.failing, [f for f in report.findings if f.severity == "error"]
