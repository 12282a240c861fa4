"""Label rules (app/metrics/labels.py) on single label sets, for the cases the real-install fixtures do not cover."""

from __future__ import annotations

from app.core.settings import Settings
from app.metrics import labels as rules
from app.metrics.prometheus_source import PrometheusSource

GPU = {"gpu": "0", "UUID": "GPU-1", "modelName": "NVIDIA A100-SXM4-80GB", "hostname": "gpu-a100-01"}


def test_exported_labels_win_and_the_target_pod_never_counts():
    m = {**GPU, "exported_pod": "train-0", "exported_namespace": "vision-train", "exported_container": "trainer",
         "pod": "dcgm-exporter-abcde", "namespace": "dcgm", "container": "exporter", "vgpu": "1"}
    assert rules.workload_of(m) == rules.Workload("vision-train", "train-0", "trainer", "1")
    # An exported set without a pod (old exporter's empty strings) is a free unit whatever the target is.
    assert rules.workload_of({**GPU, "exported_namespace": "", "pod": "anything", "container": "main"}) is None


def test_old_attribute_names_and_the_legacy_style():
    m = {**GPU, "pod_name": "train-0", "pod_namespace": "vision-train", "container_name": "trainer"}
    assert rules.workload_of(m) == rules.Workload("vision-train", "train-0", "trainer")
    assert rules.label_style([m]) == "legacy-empty"
    assert rules.label_style([{**GPU, "pod": "train-0", "namespace": "vision-train"}]) == "static"


def test_host_from_either_spelling_or_the_exporter_pods_node():
    assert rules.host_of({"Hostname": "a"}) == "a" and rules.host_of({"hostname": "b"}) == "b"
    pods = {"nvidia-dcgm-exporter-q9w8e": "gpu-a100-03"}
    assert rules.host_of({"Hostname": "nvidia-dcgm-exporter-q9w8e"}, pods) == "gpu-a100-03"
    assert rules.host_of({"Hostname": "gpu-a100-01"}, pods) == "gpu-a100-01"


def test_exporter_identity_from_settings_and_duplicates_key():
    identity = rules.ExporterIdentity.from_settings(Settings(exporter_containers="gpu-metrics, dcgm",
                                                             exporter_pod_regex="gpu-metrics-.*"))
    assert identity.containers == ("gpu-metrics", "dcgm") and identity.jobs == rules.DEFAULT_JOBS
    assert rules.workload_of({**GPU, "pod": "gpu-metrics-x1", "namespace": "mon", "container": "gpu-metrics"},
                             identity) is None
    assert rules.workload_of({**GPU, "pod": "gpu-metrics-x1", "namespace": "mon", "container": "exporter"},
                             identity) is None  # by its pod name
    a = {**GPU, "job": "a", "instance": "10.0.0.1:9400", "prometheus_replica": "0"}
    b = {**GPU, "job": "b", "instance": "10.0.0.1:9400", "prometheus_replica": "1"}
    assert rules.dedup_key(a) == rules.dedup_key(b)


def test_time_sliced_split_by_requests_else_as_the_exporter_named():
    """Per minute: the node's occupied seconds split by GPUs requested; no kube-state-metrics data: as named."""
    from fractions import Fraction

    from app.metrics.timeslicing import split_time_sliced
    from app.metrics.types import OccupancySeries, SeriesLabels

    def series(uuid, pod, counts):
        labels = SeriesLabels(host="n", uuid=uuid, gpu="0", model="m", namespace=pod.split("/")[0], pod=pod)
        return OccupancySeries(labels=labels, metric="DCGM_FI_DEV_GPU_UTIL", samples=counts), counts

    one = series("GPU-1", "a/p1", {60: 2, 120: 2})
    two = series("GPU-2", "b/p2", {60: 2, 120: 4})  # a burst in minute 120; the hour stays under capacity
    holders = {60: {("a", "p1"): 1.0, ("c", "p3"): 3.0}}
    split, cuts, _ = split_time_sliced([one, two], holders, dark={120},
                                    weight_of=lambda s: (Fraction(30), Fraction(1)), classify=lambda ns: (ns, "training"))
    assert split == {("a", "training", False, 60, "a"): Fraction(30), ("c", "training", False, 60, "c"): Fraction(90),
                     ("a", "training", True, 120, "a"): Fraction(60), ("b", "training", True, 120, "b"): Fraction(120)}
    assert cuts == []  # 180 s in the hour is under the unit's 3600 s


def test_energy_of_an_exporter_without_node_name_is_keyed_on_its_node_as_occupancy_is():
    """Two exporter pods on one node (one replaced the other within hour 2) print their pod names as Hostname:
    the GPU's energy is the node's, and the hour both pods reported adds both parts."""
    h = 1_764_547_200
    pods = {"nvidia-dcgm-exporter-old": "gpu-a100-03", "nvidia-dcgm-exporter-new": "gpu-a100-03"}
    old = {"Hostname": "nvidia-dcgm-exporter-old", "UUID": "GPU-1", "modelName": "A100"}
    new = {**old, "Hostname": "nvidia-dcgm-exporter-new"}
    answers = {  # per query kind: (labels, {hour end: value}) -- the old pod ends in hour 2, the new one starts there
        "min": [(old, {h + 3600: 1000, h + 7200: 1500}), (new, {h + 7200: 0})],
        "max": [(old, {h + 3600: 1500, h + 7200: 1800}), (new, {h + 7200: 200})],
        "resets": [(old, {h + 3600: 0, h + 7200: 0}), (new, {h + 7200: 0})],
        "last": [(old, {h: 900, h + 3600: 1500, h + 7200: 1800}), (new, {h + 7200: 200})],
        "power": [(old, {h + 3600: 300}), (new, {h + 7200: 250})],
    }
    out = {}
    plan = PrometheusSource("http://unused", timeout_s=1)._energy_plan(out, h, h + 7200, None, pods)
    for (*_, handle), kind in zip(plan, answers):  # min, max, resets, last, power: the plan's order
        handle([{"metric": m, "values": [[t, str(v)] for t, v in values.items()]} for m, values in answers[kind]])
    assert [(g.host, g.uuid, g.energy_mj, g.power_w) for g in out.values()] == [
        ("gpu-a100-03", "GPU-1", {h + 3600: 600.0, h + 7200: 300.0 + 200.0}, {h + 3600: 300.0, h + 7200: 250.0})]


def test_target_pods_are_the_plain_pods_beside_exported_labels():
    busy = {**GPU, "exported_pod": "train-0", "exported_namespace": "vision-train", "pod": "gpu-metrics-x1",
            "namespace": "mon", "container": "gpu-metrics"}
    free = {**GPU, "UUID": "GPU-2", "pod": "gpu-metrics-x1", "namespace": "mon", "container": "gpu-metrics"}
    honor = {**GPU, "UUID": "GPU-3", "pod": "train-1", "namespace": "vision-train", "container": "trainer"}
    targets = rules.target_pods([busy, free, honor])
    assert targets == {("mon", "gpu-metrics-x1")}
    assert rules.workload_of(free, rules.DEFAULT_EXPORTER, targets) is None
    assert rules.workload_of(honor, rules.DEFAULT_EXPORTER, targets) == rules.Workload("vision-train", "train-1", "trainer")
