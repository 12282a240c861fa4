"""The reconciliation's own arithmetic (pure): a unit's samples as the union of its pods', intervals from whole hours,
counter increases over resets, SPEC section 4's mean power, the tolerances, and the verdict rules."""

from __future__ import annotations

from collections import Counter
from decimal import Decimal
from fractions import Fraction

import pytest

from app.metrics.reconcile import derive
from app.metrics.reconcile.compare import StoredHour, StoredModel, StoredPool, judge
from app.metrics.reconcile.source import Series, SourceHours
from tests.support.reconcile import L40S, policy

H = 1_800_000_000  # an hour start
E = H + 3600  # its end
UTIL = "DCGM_FI_DEV_GPU_UTIL"


def unit(pod: str | None = None, *, gpu: str = "0", host: str = "node-a", ns: str = "vision-train", **extra) -> dict:
    labels = {"Hostname": host, "UUID": f"GPU-{host}-{gpu}", "gpu": gpu, "modelName": L40S, **extra}
    if pod:
        labels |= {"namespace": ns, "pod": pod, "container": "main"}
    return labels


def hour(*series: tuple[dict, float], interval: int = 30, kwh=None):
    """Derive hour H from (labels, samples in the hour) pairs, all of one scrape target at `interval`."""
    data = SourceHours(start=H, end=E, occupancy={UTIL: [Series(labels, {E: n}) for labels, n in series]})
    occ = derive.occupancy_of(data)
    return derive.derive_hour(occ, hour=H, policy=policy(), interval={("",) * 9: interval}, kwh=kwh or {})


def test_pods_at_the_same_scrapes_count_once_and_pods_in_turn_add_up():
    # two vgpu replicas held all hour: the unit carried 3600 GPU-seconds, not 7200
    shared = hour((unit("a", vgpu="0"), 120), (unit("b", ns="search-prod", vgpu="1"), 120)).pools["l40s"]
    assert shared.gpu_seconds == 3600 and not shared.tenants_exact
    # a pod for half the hour, the unit free for the rest
    assert hour((unit("a"), 60), (unit(None), 60)).pools["l40s"].gpu_seconds == 1800
    # handed over inside a minute (61 + 59 samples): the whole hour, split exactly
    turn = hour((unit("a"), 61), (unit("b", ns="search-prod"), 59)).pools["l40s"]
    assert (turn.gpu_seconds, turn.tenants, turn.tenants_exact) == (3600, {"vision": 1830, "search": 1770}, True)


def test_a_unit_is_never_above_its_capacity_and_a_mig_slice_is_its_share():
    assert hour((unit("a"), 240)).pools["l40s"].gpu_seconds == 3600  # a target scraped twice as often as assumed
    mig = hour((unit("a", GPU_I_ID="1", GPU_I_PROFILE="3g.48gb", modelName="NVIDIA H100 80GB HBM3"), 120))
    assert mig.pools["l40s"].gpu_seconds == Fraction(3, 7) * 3600


def test_an_unmeasured_gpu_is_priced_at_its_default_watts_and_a_measured_one_at_its_kwh():
    figures = hour((unit("a"), 120), (unit(None, gpu="1"), 120), kwh={("node-a", "GPU-node-a-0"): Fraction(1, 10)})
    assert (figures.pools["l40s"].gpus, figures.pools["l40s"].kwh) == (2, Fraction(1, 10) + Fraction(350, 1000))


def test_the_interval_is_the_hour_over_the_usual_whole_hour_count():
    seen = {("job", "a"): Counter({120: 30, 60: 2, 240: 1}), ("job", "b"): Counter({240: 1, 120: 1})}
    assert derive.intervals(seen, {}, None) == {("job", "a"): 30, ("job", "b"): 15}  # b: a tie goes to the larger
    assert derive.intervals(seen, {("job", "b"): 30}, None)[("job", "b")] == 30  # raw spacing where read
    assert derive.intervals(seen, {}, 60) == {("job", "a"): 60, ("job", "b"): 60}  # the operator's override
    data = SourceHours(start=H, end=E, occupancy={UTIL: [Series(unit("a", job="x"), {E: 61}),
                                                         Series(unit("b", job="y"), {E: 120, E + 3600: 120})]})
    occ = derive.occupancy_of(data)
    thin = derive.thin_evidence(occ, derive.evidence(occ))
    assert [(s.labels["pod"], t) for s, t in thin.values()] == [("a", E)]
    assert derive.spacing([0, 15, 30, 45, 61, 75]) == 15 and derive.spacing([5]) is None


@pytest.mark.parametrize(("before", "samples", "want"), [
    (100.0, [(1, 110.0), (2, 130.0)], 30.0),
    (100.0, [(1, 110.0), (2, 5.0), (3, 25.0)], 35.0),  # restarted from zero: 10 + 5 + 20
    (100.0, [(1, 5.0), (2, 9.0)], 9.0),  # restarted between the hours
    (None, [(1, 50.0), (2, 70.0), (3, 90.0)], 40.0),  # appeared this hour: from its first sample
    (100.0, [(2, 120.0), (1, 110.0), (2, 120.0)], 20.0),  # copies of one counter, out of order
    (None, [], None),
])
def test_counter_increase_over_raw_samples(before, samples, want):
    assert derive.increase(before, samples) == want


def test_mean_power_is_every_sample_of_the_gpu_over_their_count():
    """SPEC section 4: 60 W for 50 minutes on one pod's series and 300 W for 10 on the next: 100 W, not 300 W."""
    a, b = unit("train-1"), unit("chat-1", ns="search-prod")
    data = SourceHours(start=H, end=E, power_sum=[Series(a, {E: 100 * 60.0}), Series(b, {E: 20 * 300.0})],
                       power_count=[Series(a, {E: 100}), Series(b, {E: 20})])
    assert derive.gpu_kwh(data, E, {}) == {("node-a", "GPU-node-a-0"): Fraction(1, 10)}


def test_the_counter_wins_over_power_and_needs_raw_samples_only_when_the_hour_values_cannot_tell():
    g = unit(None)
    data = SourceHours(start=H, end=E, energy_last=[Series(g, {H: 1e9, E: 1e9 + 3.6e8, E + 3600: 5.0})],
                       energy_resets=[Series(g, {E: 0, E + 3600: 1})],
                       power_sum=[Series(g, {E: 120 * 999.0})], power_count=[Series(g, {E: 120})])
    assert derive.gpu_kwh(data, E, {}) == {("node-a", "GPU-node-a-0"): Fraction(1, 10)}
    assert derive.counter_needs_raw(data, [E, E + 3600]) == [(("node-a", "GPU-node-a-0"), E + 3600)]


def stored_ok(gpus=1, seconds="3600", kwh="0.1", tenants=None) -> StoredHour:
    pool = StoredPool(pool="l40s", gpus=gpus, gpu_seconds=Decimal(seconds),
                      models=[StoredModel(L40S, gpus, gpus, Decimal(kwh))], tenants=tenants or {"vision": Decimal(seconds)})
    return StoredHour(hour=H, status="ok", attempts=1, pools={"l40s": pool})


def derived(seconds=Fraction(3600), kwh=Fraction(1, 10), reporting=("node-a",)) -> derive.DerivedHour:
    figures = derive.PoolFigures(pool="l40s", gpus=1, gpu_seconds=seconds, kwh=kwh, tenants={"vision": seconds})
    return derive.DerivedHour(hour=H, pools={"l40s": figures}, reporting=set(reporting))


@pytest.mark.parametrize(("seconds", "kwh", "verdict"), [
    (Fraction(3600), Fraction(1, 10), "agrees"),
    (Fraction(36000049, 10000), Fraction(1, 10), "agrees"),  # 0.0049 GPU-s: rounding
    (Fraction(36000101, 10000), Fraction(1, 10), "differs"),  # 0.0101 GPU-s
    (Fraction(3600), Fraction(1, 10) + Fraction(9, 10**7), "agrees"),  # 9e-7 kWh
    (Fraction(3600), Fraction(1, 10) + Fraction(11, 10**7), "differs"),  # 1.1e-6 kWh
])
def test_tolerances(seconds, kwh, verdict):
    assert str(judge(stored_ok(), derived(seconds, kwh), policy=policy()).verdict) == verdict


def test_verdicts_by_what_is_stored_and_what_the_source_holds():
    doc = policy()
    both, a_only, none = ({"node-a", "node-b"}, {"node-a"}, set())
    assert str(judge(stored_ok(), derived(reporting=()), policy=doc).verdict) == "source_empty"
    silent = judge(stored_ok(), derived(reporting=a_only), policy=doc, around=(both, both))
    assert (str(silent.verdict), silent.detail) == (
        "source_empty", "stored ok, but node(s) node-b report in the hours before and after and not in this one")
    assert str(judge(stored_ok(), derived(reporting=a_only), policy=doc, around=(both, a_only)).verdict) == "agrees"
    gap = StoredHour(hour=H, status="gap", attempts=2, error="no GPU of node(s) node-b reported")
    assert str(judge(gap, derived(reporting=a_only), policy=doc, around=(both, both)).verdict) == "gap"
    assert str(judge(gap, derived(reporting=both), policy=doc, around=(both, both)).verdict) == "unstored"
    missing = StoredHour(hour=H, status="missing")
    assert str(judge(missing, derived(reporting=a_only), policy=doc).verdict) == "unstored"
    assert str(judge(missing, derived(reporting=()), policy=doc, around=(none, none)).verdict) == "missing"
    assert str(judge(missing, None, policy=None).verdict) == "missing"
    assert str(judge(gap, None, policy=None).verdict) == "gap"
