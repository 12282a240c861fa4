"""The live fleet against a real Prometheus holding dcgm-exporter series as installs store them (a
ServiceMonitor with honorLabels false: exported_* labels; the Helm chart with honor_labels true and a MIG
node), the simulator as the embedded live source, and the cache that keeps it to one read per few seconds."""

from __future__ import annotations

import threading
from datetime import UTC, datetime

import pytest

from app.core.errors import Unavailable
from app.metrics.live import LiveCache, PrometheusLive, live_fleet
from app.metrics.simulator import Simulator
from app.metrics.simulator.live import SimulatorLive
from app.metrics.simulator.workload import Pod as SimPod
from tests.support import dcgm
from tests.support.dcgm import A100, Job, Pod, Unit
from tests.support.policies import mixed_policy
from tests.support.prometheus import PrometheusServer

H = 1_764_547_200  # 2025-12-01T00:00Z
TRAIN = Pod("vision-train", "train-0", "trainer")
CHAT = Pod("search-prod", "chat-0", "vllm")
CHAT_MIG = Pod("search-prod", "chat-1", "vllm")
NOTEBOOK = Pod("scratch", "notebook-0", "jupyter")
UNITS = {
    "operator": [
        Unit("gpu-a100-01", 0, A100, [(TRAIN, 0, 60)]),
        Unit("gpu-a100-01", 1, A100, [(None, 0, 60)]),
        Unit("gpu-a100-01", 2, A100, [(CHAT, 0, 30), (None, 30, 60)]),
    ],
    "helm": [
        Unit("gpu-a100-02", 0, A100, [(CHAT_MIG, 0, 60)], profile="3g.40gb", instance="1", host_label="Hostname"),
        Unit("gpu-a100-02", 0, A100, [(None, 0, 60)], profile="3g.40gb", instance="2", host_label="Hostname"),
        Unit("gpu-a100-02", 1, A100, [(NOTEBOOK, 0, 60)], host_label="Hostname"),
    ],
}
OPERATOR_POD = {"namespace": "gpu-operator", "pod": "nvidia-dcgm-exporter-x7k2p", "container": "nvidia-dcgm-exporter"}
JOBS = [
    # kube-prometheus ServiceMonitor (honorLabels false): the workload's labels become exported_*.
    Job("nvidia-dcgm-exporter", "operator", 15, 7, False,
        {**OPERATOR_POD, "service": "nvidia-dcgm-exporter", "endpoint": "gpu-metrics"}),
    # The Helm chart with honor_labels true: a free device carries the exporter pod's labels.
    Job("dcgm-exporter", "helm", 30, 3, True,
        {"namespace": "gpu-monitoring", "pod": "dcgm-exporter-5d8fz", "container": "exporter"}),
]


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory):
    stored = dcgm.oracle(tmp_path_factory.mktemp("prom-oracle"), UNITS, JOBS)
    assert any("exported_pod" in labels for labels in stored)  # the ServiceMonitor's format, as stored
    text = dcgm.history(stored, UNITS, JOBS, H, 1)
    with PrometheusServer.backfilled(tmp_path_factory.mktemp("prom-live"), text) as server:
        yield server


def _units(fleet) -> dict:
    return {(n.name, g.index, u.gpu_instance): u for n in fleet.nodes for g in n.gpus for u in g.units}


def test_live_view_reads_installs_label_formats(prometheus):
    policy = mixed_policy()
    reading = PrometheusLive(prometheus.url).read(policy=policy, at=H + 20 * 60)
    assert reading.queries == 2  # device metrics, and every SLA service's signals at once
    fleet = live_fleet(reading, policy)
    units = _units(fleet)
    assert [h.tenant for h in units[("gpu-a100-01", "0", "")].holders] == ["vision"]
    assert units[("gpu-a100-01", "0", "")].holders[0].pod == "train-0"  # exported_pod, not the exporter's pod
    assert units[("gpu-a100-01", "1", "")].holders == []  # only the exporter's own pod as target: free
    assert [h.tenant for h in units[("gpu-a100-01", "2", "")].holders] == ["search"]
    mig = units[("gpu-a100-02", "0", "1")]
    assert mig.profile == "3g.40gb" and [h.klass for h in mig.holders] == ["inference"]
    assert units[("gpu-a100-02", "0", "2")].holders == []  # honor_labels: the exporter's pod means free
    assert [h.tenant for h in units[("gpu-a100-02", "1", "")].holders] == ["unallocated"]
    assert mig.activity == pytest.approx(0.5)
    node = next(n for n in fleet.nodes if n.name == "gpu-a100-02")
    assert node.mig_observed == {"0": {"3g.40gb": 2}} and node.drift == []
    assert [s.state for s in fleet.services] == ["no traffic"]
    # Twenty-five minutes on, chat-0 has left GPU 2: the view is of now, not of the hour.
    later = _units(live_fleet(PrometheusLive(prometheus.url).read(policy=policy, at=H + 45 * 60), policy))
    assert later[("gpu-a100-01", "2", "")].holders == []
    assert [h.tenant for h in later[("gpu-a100-01", "0", "")].holders] == ["vision"]


def test_drift_between_the_running_and_the_configured_mig_layout(prometheus):
    policy = mixed_policy(isolation={"mig": {"gpu-a100-02": {"mode": "mixed", "gpus": {"0-1": {"3g.40gb": 2}}}}})
    fleet = live_fleet(PrometheusLive(prometheus.url).read(policy=policy, at=H + 20 * 60), policy)
    node = next(n for n in fleet.nodes if n.name == "gpu-a100-02")
    assert node.mig_policy == {"0": {"3g.40gb": 2}, "1": {"3g.40gb": 2}}
    assert node.drift == ["1"]  # GPU 1 runs whole, the policy partitions it


def test_the_simulator_answers_its_driven_state():
    sim = Simulator(seed=3, gpus=32)
    source = SimulatorLive(sim)
    now = datetime.now(UTC)
    unit = next(u for u in sim.topology.units if u.role.kind == "none")  # never scheduled
    before = _units(live_fleet(source.read(policy=sim.policy(), at=now.timestamp()), sim.policy()))
    key = (unit.node.name, str(unit.gpu.index), "")
    assert before[key].holders == []
    sim.hold(unit.index, (SimPod("train-probe-0", "vision-train", "trainer", 90),), now)
    after = _units(live_fleet(source.read(policy=sim.policy(), at=now.timestamp() + 30), sim.policy()))
    assert [(h.tenant, h.pod) for h in after[key].holders] == [("vision", "train-probe-0")]
    assert after[key].activity == pytest.approx(0.9, abs=0.03)


def test_concurrent_refreshes_share_one_read_until_it_expires():
    clock = [0.0]
    cache = LiveCache(ttl_s=5, clock=lambda: clock[0])
    calls = []
    gate = threading.Event()

    def compute():
        gate.wait(10)
        calls.append(1)
        return len(calls)

    results = []
    threads = [threading.Thread(target=lambda: results.append(cache.get(("k",), compute))) for _ in range(8)]
    for t in threads:
        t.start()
    gate.set()
    for t in threads:
        t.join(10)
    assert results == [1] * 8 and len(calls) == 1
    clock[0] = 4.9
    assert cache.get(("k",), compute) == 1
    clock[0] = 5.0
    assert cache.get(("k",), compute) == 2


def test_an_unreachable_prometheus_is_one_wait_per_ttl_and_a_clear_error():
    clock = [0.0]
    cache = LiveCache(ttl_s=5, clock=lambda: clock[0])
    source = PrometheusLive("http://127.0.0.1:9", timeout_s=2)  # discard port: nothing answers
    policy = mixed_policy()
    for _ in range(3):
        with pytest.raises(Unavailable, match="did not answer"):
            cache.get(("p",), lambda: source.read(policy=policy, at=H))
    assert cache.computations == 1
