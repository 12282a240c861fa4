"""Attribution on hand-built batches: every rule of SPEC section 4, one worked case each."""

from __future__ import annotations

from decimal import Decimal
from fractions import Fraction

from app.metrics.attribution import attribute_hour, quantize_micro, split_hours
from app.metrics.types import GpuEnergy, OccupancySeries, SeriesLabels, ServiceMinutes, SourceBatch
from tests.support.policies import A100, RTX4090, mixed_policy

H = 1_795_000_000 // 3600 * 3600  # an hour start
MINUTES = [H + 60 * k for k in range(1, 61)]
UTIL, PROF = "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_PROF_GR_ENGINE_ACTIVE"


def occ(host, uuid, metric, minutes, *, per_minute=2, model=A100, gi="", profile="", ns="", pod="", klass="", activity=None):
    labels = SeriesLabels(host=host, uuid=uuid, gpu="0", model=model, gpu_instance=gi, mig_profile=profile,
                          namespace=ns, pod=pod, workload_class=klass)
    s = OccupancySeries(labels=labels, metric=metric, samples={m: per_minute for m in minutes})
    if activity is not None:
        s.activity[H + 3600] = activity
    return s


def busy_service(minutes_busy):
    """search-chat with 2 req/s in the given minutes' windows, idle otherwise."""
    return {"search-chat": ServiceMinutes("search-chat", requests_in_window={m: (360.0 if m in minutes_busy else 0.0) for m in MINUTES})}


def usage(rollup):
    return {(u.pool, u.tenant, u.klass, u.dark): u.gpu_seconds for u in rollup.usage}


def run(batch, policy=None, interval=30):
    return attribute_hour(batch, hour=H, policy=policy or mixed_policy(), scrape_interval_s=interval)


def test_mig_instance_is_its_slices_over_seven():
    batch = SourceBatch(H, H + 3600, occupancy=[
        occ("gpu-a100-02", "GPU-B", PROF, MINUTES, gi="1", profile="3g.40gb", ns="vision-train", pod="train-b"),
        occ("gpu-a100-02", "GPU-B", PROF, MINUTES, gi="2", profile="3g.40gb"),  # reporting, unoccupied
    ], services=busy_service(set(MINUTES)))
    rollup = run(batch)
    assert usage(rollup) == {("mixed-a100", "vision", "training", False): quantize_micro(Fraction(3, 7) * 3600)}
    assert usage(rollup)[("mixed-a100", "vision", "training", False)] == Decimal("1542.857143")
    (pool,) = rollup.pools
    assert (pool.pool, pool.gpus, pool.capacity_gpu_seconds) == ("mixed-a100", 1, Decimal(3600))


def test_datacenter_gpu_reporting_both_metrics_is_counted_once_from_gpu_util():
    batch = SourceBatch(H, H + 3600, occupancy=[
        occ("gpu-a100-01", "GPU-A", UTIL, MINUTES, ns="search-prod", pod="s-0", activity=60.0),
        occ("gpu-a100-01", "GPU-A", PROF, MINUTES, ns="search-prod", pod="s-0", activity=96.0),
    ], services=busy_service(set(MINUTES)))
    (row,) = run(batch).usage
    assert row.gpu_seconds == Decimal(3600)
    assert (row.activity_sum, row.activity_samples) == (60.0, 120)  # GPU_UTIL's activity, not both


def test_rtx_4090_with_only_gpu_util():
    batch = SourceBatch(H, H + 3600, occupancy=[
        occ("gpu-4090-01", "GPU-R", UTIL, MINUTES[:30], model=RTX4090, ns="vision-train", pod="v"),
    ])
    rollup = run(batch)
    assert usage(rollup) == {("rtx", "vision", "training", False): Decimal(1800)}
    assert rollup.pools[0].dark_minutes == 0  # reserved_fraction 0 and no SLA: never dark


def test_time_slicing_splits_a_unit_equally_and_never_exceeds_it():
    batch = SourceBatch(H, H + 3600, occupancy=[
        occ("gpu-a100-01", "GPU-A", UTIL, MINUTES, ns="vision-train", pod="a"),
        occ("gpu-a100-01", "GPU-A", UTIL, MINUTES, ns="data-prep", pod="b"),
        # a third pod for one minute with a single sample: c = (2, 2, 1), max 2 -> 4/5, 4/5, 2/5 samples
        occ("gpu-a100-01", "GPU-A", UTIL, MINUTES[:1], per_minute=1, ns="search-prod", pod="c"),
    ], services=busy_service(set(MINUTES)))
    got = usage(run(batch))
    per_sample = 30
    assert got[("mixed-a100", "vision", "training", False)] == quantize_micro(Fraction(59 * per_sample) + Fraction(4, 5) * 30)
    assert got[("mixed-a100", "etl", "preprocessing", False)] == got[("mixed-a100", "vision", "training", False)]
    assert got[("mixed-a100", "search", "inference", False)] == Decimal(12)
    assert sum(got.values()) == Decimal(3600)


def test_unclaimed_namespace_is_unallocated_and_unpooled_hosts_are_shown():
    batch = SourceBatch(H, H + 3600, occupancy=[
        occ("gpu-4090-01", "GPU-R", UTIL, MINUTES, model=RTX4090, ns="mystery", pod="x", klass="training"),
        occ("stray-01", "GPU-S", UTIL, MINUTES[:10], ns="data-prep", pod="e"),
    ])
    rollup = run(batch)
    assert usage(rollup) == {
        ("rtx", "unallocated", "unallocated", False): Decimal(3600),
        ("unpooled", "etl", "preprocessing", False): Decimal(600),
    }
    assert [(p.pool, p.gpus) for p in rollup.pools] == [("rtx", 1), ("unpooled", 1)]


def test_workload_class_label_overrides_the_tenant_class():
    batch = SourceBatch(H, H + 3600, occupancy=[
        occ("gpu-4090-01", "GPU-R", UTIL, MINUTES[:5], model=RTX4090, ns="vision-train", pod="v", klass="preprocessing"),
    ])
    assert usage(run(batch)) == {("rtx", "vision", "preprocessing", False): Decimal(300)}


def test_dark_minutes_follow_the_request_threshold():
    busy = set(MINUTES[:20])
    services = busy_service(busy)
    services["search-chat"].requests_in_window[MINUTES[20]] = 60.0  # exactly window/interval: not idle
    services["search-chat"].requests_in_window[MINUTES[21]] = 59.0  # fewer: idle
    del services["search-chat"].requests_in_window[MINUTES[59]]  # no data: idle
    batch = SourceBatch(H, H + 3600, occupancy=[
        occ("gpu-a100-01", "GPU-A", UTIL, MINUTES, ns="vision-train", pod="t"),
    ], services=services)
    rollup = run(batch)
    assert rollup.pools[0].dark_minutes == 39
    assert usage(rollup) == {
        ("mixed-a100", "vision", "training", False): Decimal(21 * 60),
        ("mixed-a100", "vision", "training", True): Decimal(39 * 60),
    }


def test_pool_without_sla_is_dark_when_it_reserves_capacity():
    policy = mixed_policy(sla=[])
    batch = SourceBatch(H, H + 3600, occupancy=[occ("gpu-a100-01", "GPU-A", UTIL, MINUTES, ns="vision-train", pod="t")])
    rollup = run(batch, policy)
    assert rollup.pools[0].dark_minutes == 60
    assert usage(rollup) == {("mixed-a100", "vision", "training", True): Decimal(3600)}


def test_breach_minute_lists_colocated_training_and_preprocessing():
    services = busy_service(set(MINUTES))
    services["search-chat"].p99_s = {MINUTES[10]: 0.4975, MINUTES[11]: 0.3, MINUTES[12]: float("nan"), MINUTES[13]: float("inf")}
    batch = SourceBatch(H, H + 3600, occupancy=[
        occ("gpu-a100-01", "GPU-A", UTIL, MINUTES, ns="vision-train", pod="a"),
        occ("gpu-a100-01", "GPU-A", UTIL, MINUTES, ns="data-prep", pod="b"),
        occ("gpu-a100-02", "GPU-B", PROF, MINUTES[:11], gi="1", profile="3g.40gb", ns="vision-train", pod="c"),
        occ("gpu-a100-02", "GPU-B", PROF, MINUTES, gi="2", profile="3g.40gb", ns="search-prod", pod="s"),
        occ("gpu-4090-01", "GPU-R", UTIL, MINUTES, model=RTX4090, ns="vision-train", pod="elsewhere"),
    ], services=services)
    breaches = run(batch).breaches
    assert [(b.minute_end, b.p99_ms) for b in breaches] == [(MINUTES[10], Decimal("497.500")), (MINUTES[13], Decimal("99999999999.999"))]
    assert breaches[0].colocated == (("etl", Decimal(30)), ("vision", quantize_micro(30 + Fraction(3, 7) * 60)))
    assert breaches[1].colocated == (("etl", Decimal(30)), ("vision", Decimal(30)))
    assert (breaches[0].service, breaches[0].service_tenant, breaches[0].pool) == ("search-chat", "search", "mixed-a100")


def test_energy_counter_then_mean_power_then_unmeasured():
    batch = SourceBatch(H, H + 3600, occupancy=[
        occ("gpu-a100-01", "GPU-A", UTIL, MINUTES), occ("gpu-a100-01", "GPU-B", UTIL, MINUTES),
        occ("gpu-a100-02", "GPU-C", UTIL, MINUTES),
    ], energy=[
        GpuEnergy("gpu-a100-01", "GPU-A", A100, energy_mj={H + 3600: 1.2e9}, power_w={H + 3600: 999.0}),
        GpuEnergy("gpu-a100-01", "GPU-B", A100, power_w={H + 3600: 250.0}),
    ], services=busy_service(set(MINUTES)))
    (pool,) = run(batch).pools
    (model,) = pool.models
    assert (model.model, model.gpus, model.measured_gpus) == (A100, 3, 2)
    assert model.measured_kwh == Decimal("0.583333333")  # 1.2e9 mJ = 0.3333 kWh, plus 250 W x 1 h
    assert run(batch).usage == []  # reporting without pods is capacity, not usage


def test_gpu_seconds_scale_with_the_scrape_interval_and_round_half_even():
    batch = SourceBatch(H, H + 3600, occupancy=[
        occ("gpu-a100-02", "GPU-B", PROF, MINUTES[:1], per_minute=4, gi="1", profile="1g.10gb", ns="vision-train", pod="t"),
    ], services=busy_service(set(MINUTES)))
    (row,) = run(batch, interval=15).usage
    assert row.gpu_seconds == quantize_micro(Fraction(4 * 15, 7)) == Decimal("8.571429")
    assert quantize_micro(Fraction(1, 2_000_000)) == Decimal("0.000000")
    assert quantize_micro(Fraction(3, 2_000_000)) == Decimal("0.000002")


def test_split_hours_keeps_each_bucket_in_its_hour():
    s = occ("gpu-a100-01", "GPU-A", UTIL, [H + 3600, H + 3660], ns="vision-train", pod="t")
    s.activity = {H + 3600: 1.0, H + 7200: 0.5}
    batch = SourceBatch(H, H + 7200, occupancy=[s], services=busy_service(set()))
    parts = split_hours(batch)
    assert parts[H].occupancy[0].samples == {H + 3600: 2}
    assert parts[H + 3600].occupancy[0].samples == {H + 3660: 2}
    assert parts[H + 3600].occupancy[0].activity == {H + 7200: 0.5}
    assert set(parts[H].services["search-chat"].requests_in_window) == set(MINUTES)


def test_each_host_is_looked_up_in_the_policy_once_per_hour(monkeypatch):
    """At 10,000 GPUs an hour holds ~25,000 series on ~1,250 hosts, and `pool_for_node` scans every pool's
    node list: the pool of a host is found once per hour, not once per series (nor twice per occupied one)."""
    from app.policy.document import PolicyDocument

    calls: list[str] = []
    original = PolicyDocument.pool_for_node
    monkeypatch.setattr(PolicyDocument, "pool_for_node", lambda self, node: calls.append(node) or original(self, node))
    batch = SourceBatch(H, H + 3600, occupancy=[
        *(occ("gpu-a100-01", f"GPU-A{i}", UTIL, MINUTES, ns="vision-train", pod=f"a{i}") for i in range(4)),
        *(occ("gpu-4090-01", f"GPU-R{i}", UTIL, MINUTES[:30], model=RTX4090, ns="vision-train", pod=f"r{i}")
          for i in range(2)),
        occ("gpu-4090-01", "GPU-R9", UTIL, MINUTES),  # reporting, unoccupied
        *(occ("gpu-elsewhere-01", f"GPU-X{i}", UTIL, MINUTES, ns="vision-train", pod=f"x{i}") for i in range(3)),
    ], services=busy_service(set(MINUTES)))
    rollup = run(batch)
    assert sorted(calls) == ["gpu-4090-01", "gpu-a100-01", "gpu-elsewhere-01"]
    assert usage(rollup) == {("mixed-a100", "vision", "training", False): Decimal(4 * 3600),
                             ("rtx", "vision", "training", False): Decimal(2 * 1800),
                             ("unpooled", "vision", "training", False): Decimal(3 * 3600)}
    assert {u.node: u.pool for u in rollup.units} == {"gpu-a100-01": "mixed-a100", "gpu-4090-01": "rtx",
                                                      "gpu-elsewhere-01": "unpooled"}
