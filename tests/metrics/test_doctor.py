"""`chargeback doctor` against a real Prometheus scraping dcgm-exporter and vLLM fixtures, one install layout each."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from app.metrics import doctor
from app.metrics.prometheus_api import PromReader
from tests.support.billing import policy_doc
from tests.support.doctor import (
    A100,
    H100,
    RTX4090,
    Unit,
    dcgm_exposition,
    scrape_job,
    scraping,
    serving,
    vllm_exposition,
)

CLI = Path(sys.executable).with_name("chargeback")
OCC = '{__name__=~"DCGM_FI_DEV_GPU_UTIL|DCGM_FI_PROF_GR_ENGINE_ACTIVE"}'
SLA = {"service": "search-chat", "tenant": "search", "pool": "mixed-a100",
       "requests": 'vllm:request_success_total{namespace="search-prod"}',
       "latency_histogram": 'vllm:e2e_request_latency_seconds_bucket{namespace="search-prod"}',
       "penalty_per_breach_minute": "0.50"}
VLLM_TARGET = {"namespace": "search-prod", "pod": "search-chat-0", "container": "vllm", "job": "search-chat"}


def uuid(host: str, gpu: int) -> str:
    return f"GPU-{ord(host) * 1000 + gpu:08d}-0000-0000-0000-{gpu:012d}"


def run_cli(url: str, policy: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "200", "CHARGEBACK_DATABASE_URL": "sqlite:////nonexistent/none.db"}
    return subprocess.run([str(CLI), "doctor", "--url", url, "--policy", str(policy), *args], env=env,
                          capture_output=True, text=True, timeout=120)


def write_policy(tmp_path: Path, p99_ms: int) -> Path:
    doc = policy_doc(sla=[{**SLA, "p99_ms": p99_ms}])
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump(json.loads(doc.model_dump_json(by_alias=True, exclude_none=True))))
    return path


def codes(report) -> dict[str, str]:
    return {f.code: f.severity for f in report.findings}


def by_code(report, code: str):
    return next(f for f in report.findings if f.code == code)


@pytest.fixture(scope="module")
def operator_install(tmp_path_factory):
    """GPU Operator behind a kube-prometheus ServiceMonitor (honorLabels: false): exported_* labels; a MIG node
    and a node outside the policy, an RTX 4090 whose exporter lacks NODE_NAME, an unclaimed namespace."""
    a100 = [Unit(0, uuid("a", 0), A100, "gpu-a100-01", "train-0", "vision-train"),
            Unit(1, uuid("a", 1), A100, "gpu-a100-01"),
            Unit(2, uuid("a", 2), A100, "gpu-a100-01", "notebook-1", "scratch"),
            Unit(3, uuid("a", 3), A100, "gpu-a100-01", "etl-1", "data-prep")]
    mig = [Unit(0, uuid("h", 0), H100, "gpu-h100-07", "chat-1", "search-prod", mig=("3g.40gb", "1")),
           Unit(0, uuid("h", 0), H100, "gpu-h100-07", mig=("3g.40gb", "2"))]
    rtx = [Unit(0, uuid("r", 0), RTX4090, "nvidia-dcgm-exporter-4x9qz", "etl-2", "data-prep")]
    pages = {"/a100": dcgm_exposition(a100), "/mig": dcgm_exposition(mig),
             "/rtx": dcgm_exposition(rtx, energy=False), "/vllm": vllm_exposition()}
    root = tmp_path_factory.mktemp("operator")
    with serving(pages) as target:
        def exporter(path: str, pod: str) -> str:
            return scrape_job(path.strip("/"), target, path, honor_labels=False, labels={
                "pod": pod, "namespace": "gpu-operator", "container": "nvidia-dcgm-exporter",
                "service": "nvidia-dcgm-exporter", "endpoint": "gpu-metrics", "job": "nvidia-dcgm-exporter"})
        jobs = [exporter("/a100", "nvidia-dcgm-exporter-a1b2c"), exporter("/mig", "nvidia-dcgm-exporter-d3e4f"),
                exporter("/rtx", "nvidia-dcgm-exporter-4x9qz"),
                scrape_job("vllm", target, "/vllm", honor_labels=False, labels=VLLM_TARGET)]
        with scraping(root, jobs, expect=OCC, series=4 + 4 + 2 + 1) as prom:
            yield prom, write_policy(root, p99_ms=250)


def test_operator_install_findings(operator_install):
    prom, policy_path = operator_install
    policy = policy_doc(sla=[{**SLA, "p99_ms": 250}])
    report = doctor.run(PromReader(prom.url), at=time.time(), policy=policy, lookback_s=60)
    found = codes(report)
    assert report.label_style == "exported" and found["label-style"] == "info"
    assert found["nodes-not-in-policy"] == "error"
    assert "gpu-h100-07" in by_code(report, "nodes-not-in-policy").detail
    assert found["hostname-is-pod"] == "error" and "nvidia-dcgm-exporter-4x9qz" in by_code(report, "hostname-is-pod").detail
    assert "NODE_NAME" in by_code(report, "hostname-is-pod").fix
    assert found["unclaimed-namespaces"] == "error" and "scratch (1 units)" in by_code(report, "unclaimed-namespaces").detail
    red = by_code(report, "red-line-unresolvable")
    assert red.severity == "error" and "300 ms" in red.detail and "300 ms" in red.fix
    assert found["mig"] == "info" and "3g.40gb" in by_code(report, "mig").detail
    assert found["no-prof"] == "info" and RTX4090 in by_code(report, "no-prof").detail  # GeForce: nothing to fix
    assert found["no-energy"] == "warning" and "1 GPU(s)" in by_code(report, "no-energy").title
    # the exporter's own labels on free units never count as a workload
    assert report.summary["units_without_pod"] == 2 and report.summary["units"] == 7
    assert {(i["job"], i["interval_s"]) for i in report.intervals} == {("nvidia-dcgm-exporter", 1)}
    inventory = by_code(report, "series-found")
    assert "DCGM_FI_PROF_GR_ENGINE_ACTIVE" in inventory.detail and "vllm:e2e_request_latency_seconds_bucket" in inventory.detail
    assert "duplicate-scrape" not in found, by_code(report, "duplicate-scrape")
    assert report.failing


def test_cli_exit_code_json_and_table(operator_install):
    prom, policy_path = operator_install
    done = run_cli(prom.url, policy_path, "--json", "--lookback", "60")
    assert done.returncode == 1, done.stderr
    body = json.loads(done.stdout)
    assert body["failing"] and body["label_style"] == "exported"
    assert {f["code"] for f in body["findings"]} >= {"nodes-not-in-policy", "unclaimed-namespaces", "red-line-unresolvable"}
    table = run_cli(prom.url, policy_path, "--lookback", "60")
    assert table.returncode == 1 and "would mis-bill" in table.stdout and "Traceback" not in table.stderr
    assert "serviceMonitor.honorLabels" in table.stdout


def test_helm_chart_with_honor_labels_duplicate_job_and_kube_state_metrics(tmp_path):
    """honor_labels: true with an exporter that prints no pod labels on a free GPU (the target's pod fills in),
    NODE_NAME unset but mapped through kube_pod_info, and a second job scraping the same exporter."""
    units = [Unit(0, uuid("c", 0), A100, "dcgm-exporter-7xk2q", "train-1", "vision-train"),
             Unit(1, uuid("c", 1), A100, "dcgm-exporter-7xk2q")]
    ksm = ("# TYPE kube_pod_info gauge\n"
           'kube_pod_info{namespace="monitoring",pod="dcgm-exporter-7xk2q",uid="u1",host_ip="10.0.0.2",'
           'pod_ip="10.1.0.9",node="gpu-a100-02",created_by_kind="DaemonSet",created_by_name="dcgm-exporter",'
           'priority_class="system-node-critical",host_network="false"} 1\n')
    pages = {"/metrics": dcgm_exposition(units), "/ksm": ksm, "/vllm": vllm_exposition()}
    target_labels = {"pod": "dcgm-exporter-7xk2q", "namespace": "monitoring", "container": "exporter"}
    with serving(pages) as target:
        jobs = [scrape_job("dcgm-exporter", target, "/metrics", honor_labels=True,
                           labels={**target_labels, "job": "dcgm-exporter"}),
                scrape_job("dcgm-exporter-2", target, "/metrics", honor_labels=True,
                           labels={**target_labels, "job": "dcgm-exporter-2"}),
                scrape_job("kube-state-metrics", target, "/ksm", honor_labels=True),
                scrape_job("vllm", target, "/vllm", honor_labels=False, labels=VLLM_TARGET)]
        with scraping(tmp_path, jobs, expect=OCC, series=8) as prom:
            report = doctor.run(PromReader(prom.url), at=time.time(), policy=policy_doc(sla=[{**SLA, "p99_ms": 300}]),
                                lookback_s=60)
            found = codes(report)
            assert report.label_style == "honor_labels"
            assert found["duplicate-scrape"] == "warning" and "dcgm-exporter-2@" in by_code(report, "duplicate-scrape").detail
            assert found["hostname-is-pod"] == "warning" and "mapped to nodes" in by_code(report, "hostname-is-pod").detail
            assert "nodes-not-in-policy" not in found and "unclaimed-namespaces" not in found
            assert "red-line-unresolvable" not in found  # 300 ms is vLLM's first boundary
            assert report.summary["units_without_pod"] == 1 and report.summary["units"] == 2
            assert not report.failing, [f for f in report.findings if f.severity == "error"]
            assert {i["job"] for i in report.intervals} == {"dcgm-exporter", "dcgm-exporter-2"}


def test_static_scrape_of_an_older_exporter_with_time_slicing(tmp_path):
    units = [Unit(0, uuid("s", 0), A100, "gpu-a100-01", "train-0", "vision-train", vgpu="0", host_label="Hostname"),
             Unit(0, uuid("s", 0), A100, "gpu-a100-01", "etl-0", "data-prep", vgpu="1", host_label="Hostname"),
             Unit(1, uuid("s", 1), A100, "gpu-a100-01", host_label="Hostname")]
    pages = {"/metrics": dcgm_exposition(units), "/vllm": vllm_exposition()}
    with serving(pages) as target:
        jobs = [scrape_job("gpu", target, "/metrics", honor_labels=False),
                scrape_job("vllm", target, "/vllm", honor_labels=False, labels=VLLM_TARGET)]
        with scraping(tmp_path, jobs, expect=OCC, series=6) as prom:
            policy_path = write_policy(tmp_path, p99_ms=300)
            report = doctor.run(PromReader(prom.url), at=time.time(), policy=policy_doc(sla=[{**SLA, "p99_ms": 300}]),
                                lookback_s=60)
            assert report.label_style == "static"
            found = codes(report)
            assert found["vgpu"] == "info" and report.summary["vgpu_units"] == 2 and report.summary["gpus"] == 2
            assert not report.failing, [f for f in report.findings if f.severity == "error"]
            done = run_cli(prom.url, policy_path, "--lookback", "60")
            assert done.returncode == 0, done.stdout + done.stderr
            assert "no finding would mis-bill" in done.stdout


def test_old_exporter_label_names_are_read(tmp_path):
    """`--use-old-namespace` exporters print pod_name/pod_namespace/container_name."""
    page = dcgm_exposition([Unit(0, uuid("o", 0), A100, "gpu-a100-01", "train-0", "vision-train", host_label="Hostname"),
                            Unit(1, uuid("o", 1), A100, "gpu-a100-01", "notebook-3", "scratch", host_label="Hostname")])
    page = page.replace('container="', 'container_name="').replace('namespace="', 'pod_namespace="').replace('pod="', 'pod_name="')
    with serving({"/metrics": page, "/vllm": vllm_exposition()}) as target:
        jobs = [scrape_job("gpu", target, "/metrics", honor_labels=False),
                scrape_job("vllm", target, "/vllm", honor_labels=False, labels=VLLM_TARGET)]
        with scraping(tmp_path, jobs, expect=OCC, series=4) as prom:
            report = doctor.run(PromReader(prom.url), at=time.time(), policy=policy_doc(sla=[{**SLA, "p99_ms": 300}]),
                                lookback_s=60)
            assert report.label_style == "legacy-empty" and "pod_name" in by_code(report, "label-style").bill
            assert "scratch (1 units)" in by_code(report, "unclaimed-namespaces").detail  # read through the old names
            assert report.summary["units_without_pod"] == 0


def test_time_slicing_without_vgpu_is_found_through_kube_state_metrics(tmp_path):
    """Two pods request the node's one GPU (kube-state-metrics), but the exporter names only one of them."""
    units = [Unit(0, uuid("t", 0), A100, "gpu-a100-01", "train-0", "vision-train")]
    ksm = "# TYPE kube_pod_container_resource_requests gauge\n" + "".join(
        f'kube_pod_container_resource_requests{{namespace="{ns}",pod="{pod}",uid="{pod}",container="main",'
        f'node="gpu-a100-01",resource="nvidia_com_gpu",unit="integer"}} 1\n'
        for ns, pod in (("vision-train", "train-0"), ("data-prep", "etl-0")))
    with serving({"/metrics": dcgm_exposition(units), "/ksm": ksm, "/vllm": vllm_exposition()}) as target:
        jobs = [scrape_job("gpu", target, "/metrics", honor_labels=False),
                scrape_job("kube-state-metrics", target, "/ksm", honor_labels=True),
                scrape_job("vllm", target, "/vllm", honor_labels=False, labels=VLLM_TARGET)]
        with scraping(tmp_path, jobs, expect=OCC, series=2) as prom:
            policy = policy_doc(sla=[{**SLA, "p99_ms": 300}])
            report = doctor.run(PromReader(prom.url), at=time.time(), policy=policy, lookback_s=60)
            finding = by_code(report, "time-slicing-without-vgpu")
            assert finding.severity == "error" and "gpu-a100-01" in finding.detail
            assert "--kubernetes-virtual-gpus" in finding.fix and report.failing


@pytest.mark.parametrize("answer, reason", [
    ("<html><body>Bad gateway</body></html>", "an answer that is not JSON"),
    ('{"status": "success", "warnings": ["store gateway 3 unreachable"], "data": {"resultType": "matrix", "result": []}}',
     "partial response"),
    ('{"status": "success", "data": {"resultType": "matrix", "result": [{"metric": {"a": 1}, "values": []}]}}',
     "malformed labels"),
    ('{"status": "error", "errorType": "bad_data", "error": "parse error"}', "parse error"),
])
def test_a_bad_answer_is_a_finding_never_a_traceback(tmp_path, answer, reason):
    with serving({"/api/v1/query": answer, "/api/v1/series": answer}) as target:
        report = doctor.run(PromReader(f"http://{target}"), at=time.time(), policy=None)
        assert report.failing and [f.code for f in report.findings] == ["could-not-read"]  # the inventory is skipped
        assert reason in report.findings[0].detail
        done = run_cli(f"http://{target}", write_policy(tmp_path, 300), "--json")
        assert done.returncode == 1 and "Traceback" not in done.stderr
        assert json.loads(done.stdout)["findings"][0]["code"] == "could-not-read"


def test_an_unreachable_url_is_a_finding(tmp_path):
    from tests.support.prometheus import free_port

    report = doctor.run(PromReader(f"http://127.0.0.1:{free_port()}", timeout_s=5), at=time.time(), policy=None)
    assert [f.code for f in report.findings] == ["could-not-read"] and "did not answer" in report.findings[0].detail


def test_admin_page_shows_the_report_and_only_to_admins(api, fresh_engine, tmp_path):
    from app.auth.deps import Principal
    from app.core.db import unit_of_work
    from app.web.doctor import doctor_target
    from tests.support.billing import store_policy

    html = {"accept": "text/html"}
    admin = Principal(name="ada", roles=frozenset({"admin"}), user_id=9)
    with unit_of_work(fresh_engine) as s:
        store_policy(s, policy_doc(sla=[{**SLA, "p99_ms": 250}]))
    api.as_(admin)
    api.app.dependency_overrides[doctor_target] = lambda: None
    page = api.get("/admin/doctor", headers=html)
    assert page.status_code == 200 and "No Prometheus is configured" in page.text

    units = [Unit(0, uuid("p", 0), A100, "gpu-a100-01", "notebook-2", "scratch")]
    with serving({"/metrics": dcgm_exposition(units), "/vllm": vllm_exposition()}) as target:
        jobs = [scrape_job("gpu", target, "/metrics", honor_labels=False),
                scrape_job("vllm", target, "/vllm", honor_labels=False, labels=VLLM_TARGET)]
        with scraping(tmp_path, jobs, expect=OCC, series=2) as prom:
            api.app.dependency_overrides[doctor_target] = lambda: prom.url
            page = api.get("/admin/doctor", headers=html)
            assert page.status_code == 200, page.text
            for text in ("would mis-bill", 'id="finding-unclaimed-namespaces"', "scratch (1 units)",
                         'id="finding-red-line-unresolvable"', "label style: static", 'aria-current="page">Doctor'):
                assert text in page.text, text
            api.as_(Principal(name="fiona", roles=frozenset({"finance"}), user_id=1))
            assert api.get("/admin/doctor", headers=html).status_code == 403


def test_a_url_with_api_v1_says_what_was_asked_and_how_to_fix_it(operator_install, tmp_path):
    """The README's URL is the server's root; with /api/v1 typed too, the real Prometheus answers 404 in plain text."""
    prom, policy = operator_install
    wrong = f"{prom.url}/api/v1"
    report = doctor.run(PromReader(wrong), at=time.time(), policy=None)
    (finding,) = report.findings
    assert finding.code == "could-not-read"
    assert f"{wrong} rejected a query (asked {wrong}/api/v1/" in finding.detail
    assert "got HTTP 404: '404 page not found', not the Prometheus API" in finding.detail
    assert finding.detail.endswith("the URL is the server's root, without /api/v1 (e.g. http://prometheus:9090)")
    done = run_cli(wrong, policy)
    assert done.returncode == 1 and "Traceback" not in done.stderr + done.stdout
    assert "without /api/v1" in done.stdout + done.stderr


def test_a_server_that_is_not_prometheus_is_named_so(tmp_path):
    with serving({"/": "<html><body>Grafana</body></html>"}) as target:
        report = doctor.run(PromReader(f"http://{target}"), at=time.time(), policy=None)
    (finding,) = report.findings
    assert f"http://{target} rejected a query (asked http://{target}/api/v1/" in finding.detail
    assert "got HTTP 404: an HTML page, not the Prometheus API)" in finding.detail
