"""Occupancy from dcgm-exporter as the default installs store it, through a real Prometheus (issue 9).

One fleet, three installs, three intervals: the GPU Operator behind a kube-prometheus ServiceMonitor
(honorLabels false, every 15 s) also scraped every 30 s by an annotation job with honor_labels true;
the dcgm-exporter Helm chart with honor_labels true (30 s, an exporter printing `Hostname`, MIG);
a plain static scrape of a GeForce node (60 s). Time-slicing with `vgpu` on one GPU. A real
Prometheus scrapes the fixtures to fix the stored label sets; hours of history are backfilled for
exactly those sets. The rollups must equal the hand-computed truth below.
"""

from __future__ import annotations

from decimal import Decimal

import pytest
from sqlmodel import select

from app.core.timeutil import from_epoch
from app.metrics import labels as rules
from app.metrics.attribution import attribute_hour, split_hours
from app.metrics.ingest import ingest_hours
from app.metrics.models import DataQualityFinding
from app.metrics.prometheus_source import PrometheusSource, infer_intervals
from tests.support import dcgm
from tests.support.dcgm import A100, RTX4090, Job, Pod, Unit
from tests.support.ingest import add_policy, snapshot
from tests.support.policies import mixed_policy
from tests.support.prometheus import PrometheusServer

H = 1_764_547_200  # 2025-12-01T00:00Z
HOURS = 3
TRAIN0 = Pod("vision-train", "train-0", "trainer")
CHAT0 = Pod("search-prod", "chat-0", "vllm")
TRAIN2 = Pod("vision-train", "train-2", "trainer")
NOTEBOOK = Pod("scratch", "notebook-0", "jupyter")
PREP1 = Pod("data-prep", "prep-1", "worker")
SLICED = [Pod("vision-train", "train-1", "trainer", "0"), Pod("vision-train", "train-1", "trainer", "1"),
          Pod("data-prep", "prep-0", "worker", "2")]
END = HOURS * 60
SLICED_EXPORTER = "nvidia-dcgm-exporter-q9w8e"
TRAIN3, PREP3, CHAT3 = Pod("vision-train", "train-3", "trainer"), Pod("data-prep", "prep-3", "worker"), Pod(
    "search-prod", "chat-3", "vllm")
# kube-state-metrics: who holds GPU replicas on the time-sliced node, and when (minutes).
HOLDERS = [(TRAIN3, "gpu-a100-03", 2, 0, END), (PREP3, "gpu-a100-03", 1, 0, 120), (CHAT3, "gpu-a100-03", 1, 60, END)]
UNITS = {
    "operator": [
        Unit("gpu-a100-01", 0, A100, [(TRAIN0, 0, END)]),
        Unit("gpu-a100-01", 1, A100, [(p, 0, END) for p in SLICED]),
        Unit("gpu-a100-01", 2, A100, [(CHAT0, 0, 90), (None, 90, END)]),
        Unit("gpu-a100-01", 3, A100, [(None, 0, END)]),
    ],
    "helm": [
        Unit("gpu-a100-02", 0, A100, [(None, 0, 30), (TRAIN2, 30, 150), (None, 150, END)], profile="3g.40gb",
             instance="1", host_label="Hostname"),
        Unit("gpu-a100-02", 0, A100, [(None, 0, END)], profile="3g.40gb", instance="2", host_label="Hostname"),
        Unit("gpu-a100-02", 1, A100, [(NOTEBOOK, 0, 60), (None, 60, END)], host_label="Hostname"),
    ],
    "static": [Unit("gpu-4090-01", 0, RTX4090, [(PREP1, 0, 120), (None, 120, END)])],
    # Time-sliced without --kubernetes-virtual-gpus: each GPU names one of its sharing pods; the
    # exporter runs without NODE_NAME, so it prints its own pod name as Hostname.
    "sliced": [
        Unit(SLICED_EXPORTER, 0, A100, [(TRAIN3, 0, END)]),
        Unit(SLICED_EXPORTER, 1, A100, [(PREP3, 0, 120), (CHAT3, 120, END)]),
    ],
}
OPERATOR_POD = {"namespace": "gpu-operator", "pod": "nvidia-dcgm-exporter-x7k2p", "container": "nvidia-dcgm-exporter"}
JOBS = [
    # prometheus-operator gives a ServiceMonitor's targets the pod/namespace/container/service/endpoint
    # of the exporter pod; the GPU Operator's ServiceMonitor sets jobLabel: app (nvidia-dcgm-exporter).
    Job("nvidia-dcgm-exporter", "operator", 15, 7, False,
        {**OPERATOR_POD, "service": "nvidia-dcgm-exporter", "endpoint": "gpu-metrics"}),
    # The GPU Operator's Service carries prometheus.io/scrape: a second job scrapes the same target.
    Job("kubernetes-service-endpoints", "operator", 30, 11, True, {**OPERATOR_POD, "service": "nvidia-dcgm-exporter"}),
    Job("dcgm-exporter", "helm", 30, 3, True,
        {"namespace": "gpu-monitoring", "pod": "dcgm-exporter-5d8fz", "container": "exporter",
         "service": "dcgm-exporter", "endpoint": "metrics"}),
    Job("dcgm", "static", 60, 29),
    Job("gpu-operator-sliced", "sliced", 30, 13, True,
        {"namespace": "gpu-operator", "pod": SLICED_EXPORTER, "container": "nvidia-dcgm-exporter"}),
]
MIG_HALF_HOUR = Decimal("771.428571")  # 1800 s x 3/7
MIG_HOUR = Decimal("1542.857143")
# Pool mixed-a100 reserves capacity and has no SLA service: every minute is dark; rtx reserves none.
TRUTH = [
    {("mixed-a100", "vision", "training", True): 6000 + MIG_HALF_HOUR,  # train-0, 2 of 3 vgpu replicas, MIG from :30
     ("mixed-a100", "etl", "preprocessing", True): Decimal(1200),  # 1 of 3 vgpu replicas
     ("mixed-a100", "search", "inference", True): Decimal(3600),
     ("mixed-a100", "unallocated", "unallocated", True): Decimal(3600),  # namespace scratch
     ("rtx", "etl", "preprocessing", False): Decimal(3600),
     # The node's 2 busy GPUs (7200 GPU-s) split by replicas held: train-3 2, prep-3 1.
     ("sliced", "vision", "training", False): Decimal(4800),
     ("sliced", "etl", "preprocessing", False): Decimal(2400)},
    {("mixed-a100", "vision", "training", True): 6000 + MIG_HOUR,
     ("mixed-a100", "etl", "preprocessing", True): Decimal(1200),
     ("mixed-a100", "search", "inference", True): Decimal(1800),  # chat-0 until :30
     ("rtx", "etl", "preprocessing", False): Decimal(3600),
     # chat-3 holds a replica from hour 1 although the exporter names it only from hour 2.
     ("sliced", "vision", "training", False): Decimal(3600),
     ("sliced", "etl", "preprocessing", False): Decimal(1800),
     ("sliced", "search", "inference", False): Decimal(1800)},
    {("mixed-a100", "vision", "training", True): 6000 + MIG_HALF_HOUR,
     ("mixed-a100", "etl", "preprocessing", True): Decimal(1200),
     ("sliced", "vision", "training", False): Decimal(4800),
     ("sliced", "search", "inference", False): Decimal(2400)},
]
CAPACITY = {"mixed-a100": Decimal(6 * 3600), "rtx": Decimal(3600), "sliced": Decimal(2 * 3600)}


def policy():
    pools = [
        {"name": "mixed-a100", "nodes": ["gpu-a100-01", "gpu-a100-02"], "reserved_fraction": "0.30",
         "reservations": {"search": 1}, "gpus_per_node": 4, "gpu_model": A100},
        {"name": "rtx", "nodes": ["gpu-4090-01"], "reserved_fraction": "0", "gpus_per_node": 1, "gpu_model": RTX4090},
        {"name": "sliced", "nodes": ["gpu-a100-03"], "reserved_fraction": "0", "gpus_per_node": 2, "gpu_model": A100,
         "time_sliced_nodes": ["gpu-a100-03"]},
    ]
    return mixed_policy(sla=[], pools=pools)


@pytest.fixture(scope="module")
def stored(tmp_path_factory) -> list[dict]:
    """The label sets a real Prometheus stores for the fixtures under each install's scrape config."""
    return dcgm.oracle(tmp_path_factory.mktemp("prom-oracle"), UNITS, JOBS)


@pytest.fixture(scope="module")
def installs(tmp_path_factory, stored):
    """A real Prometheus holding HOURS of history for exactly the stored label sets."""
    text = dcgm.history(stored, UNITS, JOBS, H, HOURS,
                        dcgm.kube_state_metrics(H, HOLDERS, {SLICED_EXPORTER: "gpu-a100-03"}, HOURS))
    with PrometheusServer.backfilled(tmp_path_factory.mktemp("prom-installs"), text) as server:
        yield server


def rollups(url: str, **kwargs) -> list:
    batch = PrometheusSource(url, timeout_s=30, **kwargs).fetch(start=from_epoch(H), end=from_epoch(H + HOURS * 3600),
                                                                 policy=policy())
    return [attribute_hour(part, hour=h, policy=policy()) for h, part in sorted(split_hours(batch).items())]


def test_prometheus_stores_each_install_as_in_a_cluster(stored):
    by_job = {}
    for m in stored:
        by_job.setdefault(m["job"], []).append(m)
    # honorLabels false renames the workload's labels; the free GPU keeps only the exporter pod's.
    busy = next(m for m in by_job["nvidia-dcgm-exporter"] if m.get("exported_pod") == "train-0")
    assert (busy["pod"], busy["container"], busy["exported_namespace"]) == (
        "nvidia-dcgm-exporter-x7k2p", "nvidia-dcgm-exporter", "vision-train")
    assert {rules.label_style(ms) for ms in [by_job["nvidia-dcgm-exporter"]]} == {"exported"}
    assert rules.label_style(by_job["kubernetes-service-endpoints"]) == "honor_labels"
    assert rules.label_style(by_job["dcgm-exporter"]) == "honor_labels"
    assert rules.label_style(by_job["dcgm"]) == "static"
    free = [m for m in by_job["dcgm-exporter"] if m.get("GPU_I_ID") == "2"]
    assert free and all(m["pod"] == "dcgm-exporter-5d8fz" and rules.workload_of(m) is None for m in free)
    assert all(rules.host_of(m) == "gpu-a100-02" for m in by_job["dcgm-exporter"])
    assert all(rules.workload_of(m) is None for m in by_job["dcgm"] if "pod" not in m)


def test_rollups_equal_the_truth_for_every_install(installs):
    for hour, (rollup, truth) in enumerate(zip(rollups(installs.url), TRUTH)):
        got = {(u.pool, u.tenant, u.klass, u.dark): u.gpu_seconds for u in rollup.usage}
        assert got == truth, hour
        assert {p.pool: p.capacity_gpu_seconds for p in rollup.pools} == CAPACITY
        assert {p.pool: p.dark_minutes for p in rollup.pools} == {"mixed-a100": 60, "rtx": 0, "sliced": 0}
        assert rollup.findings == []


def test_intervals_are_inferred_per_scrape_target(installs):
    source = PrometheusSource(installs.url, timeout_s=30)
    occupancy = {}
    plan = source._occupancy_plan(occupancy, H, H + HOURS * 3600, None)
    for query, a, b, step, handle in plan:
        handle(source._decode(source._get(query, a, b, step)[0]))
    inferred = {scrape[0]: s for scrape, s in infer_intervals(occupancy.values()).items()}
    assert inferred == {"nvidia-dcgm-exporter": 15, "kubernetes-service-endpoints": 30, "dcgm-exporter": 30, "dcgm": 60,
                        "gpu-operator-sliced": 30}


def test_a_wrong_interval_override_is_cut_at_capacity_and_recorded(installs, session):
    """Forcing 60 s on 15 s data would bill 4x: each unit is cut to its capacity and the cut is a finding."""
    add_policy(session, policy(), effective_epoch=H - 86400)
    source = PrometheusSource(installs.url, timeout_s=30, scrape_interval_s=60)
    report = ingest_hours(session=session, source=source, start=from_epoch(H), end=from_epoch(H + 3600),
                          scrape_interval_s=60)
    assert report.ok == [from_epoch(H)]
    usage = {k: v[0] for k, v in snapshot(session, H)["usage"].items()}
    assert usage == {
        ("mixed-a100", "vision", "training", True): 6000 + MIG_HOUR,  # MIG at 2x stays under its 3/7
        ("mixed-a100", "etl", "preprocessing", True): Decimal(1200),
        ("mixed-a100", "search", "inference", True): Decimal(3600),
        ("mixed-a100", "unallocated", "unallocated", True): Decimal(3600),
        ("rtx", "etl", "preprocessing", False): Decimal(3600),
        ("sliced", "vision", "training", False): Decimal(4800),  # time-sliced units are capped too
        ("sliced", "etl", "preprocessing", False): Decimal(2400),
    }
    findings = session.exec(select(DataQualityFinding).where(DataQualityFinding.hour == from_epoch(H))).all()
    cut = sorted((f.unit.split("/")[0], f.gpu_seconds_cut) for f in findings)
    assert cut == [("gpu-a100-01", Decimal(10800))] * 3 + [("gpu-a100-02", Decimal(3600))] + [
        ("gpu-a100-03", Decimal(3600))] * 2
    assert {f.kind for f in findings} == {"over_capacity"}
    assert sorted({f.pool for f in findings}) == ["mixed-a100", "sliced"]


def test_the_doctors_cross_check_needs_a_pod_on_every_gpu_that_is_also_the_target(stored):
    """An exporter with an unknown container name is suspected; a training pod on all 8 GPUs is not."""
    operator = [m for m in stored if m["job"] == "nvidia-dcgm-exporter"]
    up = [{"job": "nvidia-dcgm-exporter", **OPERATOR_POD}]
    assert rules.suspected_exporter_pods(operator, up) == {("gpu-operator", "nvidia-dcgm-exporter-x7k2p")}
    # A static scrape of a node whose 8 GPUs one training job holds: the pod is on every GPU, but
    # `up` names no pod (nor any other target), so it stays a workload.
    whole_node = [{"UUID": f"GPU-{i}", "hostname": "gpu-h100-01", "pod": "train-big", "namespace": "vision-train",
                   "container": "trainer", "job": "dcgm"} for i in range(8)]
    assert rules.suspected_exporter_pods(whole_node, [{"job": "dcgm"}]) == set()
    assert rules.suspected_exporter_pods(whole_node, up) == set()
    unknown = rules.ExporterIdentity(containers=("custom",), jobs=(), pod_regex="custom-.*")
    free = next(m for m in operator if "exported_pod" not in m)
    assert rules.workload_of(free, unknown) is not None  # what the target rule is for
    assert rules.workload_of(free, unknown, rules.target_pods(operator)) is None


def test_an_ha_pair_read_without_deduplication_counts_once(stored, tmp_path):
    """Both replicas of an HA Prometheus pair hold every series (external label prometheus_replica);
    replica 1 missed 20 minutes of hour 0 while restarting. Each minute counts once: the truth holds."""
    replicas = [{**m, "prometheus_replica": f"prometheus-k8s-{r}"} for m in stored for r in (0, 1)]
    text = dcgm.history(replicas, UNITS, JOBS, H, HOURS,
                        dcgm.kube_state_metrics(H, HOLDERS, {SLICED_EXPORTER: "gpu-a100-03"}, HOURS))
    restart = range(H + 600, H + 1800)
    kept = [line for line in text.splitlines()
            if 'prometheus_replica="prometheus-k8s-1"' not in line or int(line.rsplit(" ", 1)[1]) not in restart]
    assert len(kept) < len(text.splitlines())
    with PrometheusServer.backfilled(tmp_path, "\n".join(kept) + "\n") as server:
        for hour, (rollup, truth) in enumerate(zip(rollups(server.url), TRUTH)):
            assert {(u.pool, u.tenant, u.klass, u.dark): u.gpu_seconds for u in rollup.usage} == truth, hour
            assert rollup.findings == []


def test_an_exporter_with_an_unknown_container_name_is_still_the_target_behind_a_servicemonitor(stored, tmp_path):
    """A renamed exporter container: its pod is the scrape target of the series that carry exported_*,
    so the GPUs naming only that pod are free, not use of namespace gpu-operator."""
    operator = [m for m in stored if m["job"] == "nvidia-dcgm-exporter"]
    text = dcgm.history(operator, UNITS, JOBS, H, 1)
    unknown = rules.ExporterIdentity(containers=("gpu-metrics",), jobs=(), pod_regex="gpu-metrics-.*")
    with PrometheusServer.backfilled(tmp_path, text) as server:
        batch = PrometheusSource(server.url, timeout_s=30, exporter=unknown).fetch(
            start=from_epoch(H), end=from_epoch(H + 3600), policy=policy())
    rollup = attribute_hour(batch, hour=H, policy=policy())
    assert {(u.pool, u.tenant, u.klass, u.dark): u.gpu_seconds for u in rollup.usage} == {
        ("mixed-a100", "vision", "training", True): Decimal(6000),
        ("mixed-a100", "etl", "preprocessing", True): Decimal(1200),
        ("mixed-a100", "search", "inference", True): Decimal(3600),
    }
    assert {p.pool: p.gpus for p in rollup.pools} == {"mixed-a100": 4}
