"""Namespace rollups: a usage row's namespaces add up to it exactly, whatever the sharing, MIG fractions and cuts.

The property runs attribution on random hours (pods of claimed and unclaimed namespaces sharing units,
MIG instances, dark and busy minutes, units reported above their capacity); ingestion then stores the
rows in the same savepoint as the hour's other rollups, on SQLite and PostgreSQL.
"""

from __future__ import annotations

from collections import defaultdict
from decimal import Decimal

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import func, select

from app.core.timeutil import from_epoch
from app.metrics.attribution import attribute_hour
from app.metrics.ingest import replace_hour
from app.metrics.models import NamespaceUsage, UsageRollup
from app.metrics.types import OccupancySeries, SeriesLabels, ServiceMinutes, SourceBatch
from tests.support.ingest import add_policy
from tests.support.policies import A100, mixed_policy

H = 1_795_000_000 // 3600 * 3600
MINUTES = [H + 60 * k for k in range(1, 61)]
UTIL, PROF = "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
# claimed namespaces of three tenants, and two nobody claims (-> unallocated)
NAMESPACES = ("search-prod", "vision-train", "data-prep", "scratch", "ml-sandbox")
UNITS = (  # (host, uuid, GPU instance, MIG profile)
    ("gpu-a100-01", "GPU-A", "", ""),
    ("gpu-a100-01", "GPU-C", "", ""),
    ("gpu-a100-02", "GPU-B", "1", "3g.40gb"),
    ("gpu-a100-02", "GPU-B", "2", "3g.40gb"),
    ("gpu-9999-01", "GPU-U", "", ""),  # a node no pool names: unpooled
)

series_strategy = st.tuples(
    st.sampled_from(range(len(UNITS))),
    st.sampled_from(NAMESPACES),
    st.integers(0, 3),  # pod index
    st.lists(st.integers(1, 60), min_size=1, max_size=60, unique=True),  # minutes held
    st.integers(1, 6),  # samples per minute (above 2 at 30 s: over capacity, cut)
    st.floats(0, 1),  # mean activity
)


def _batch(spec, busy_minutes) -> SourceBatch:
    occupancy = []
    for unit_i, ns, pod, minutes, per_minute, activity in spec:
        host, uuid, gi, profile = UNITS[unit_i]
        labels = SeriesLabels(host=host, uuid=uuid, gpu="0", model=A100, gpu_instance=gi, mig_profile=profile,
                              namespace=ns, pod=f"{ns}-{pod}")
        s = OccupancySeries(labels=labels, metric=PROF if gi else UTIL,
                            samples={MINUTES[m - 1]: per_minute for m in minutes})
        s.activity[H + 3600] = activity * per_minute * len(minutes)
        occupancy.append(s)
    requests = {m: (360.0 if i in busy_minutes else 0.0) for i, m in enumerate(MINUTES)}
    return SourceBatch(H, H + 3600, occupancy=occupancy,
                       services={"search-chat": ServiceMinutes("search-chat", requests_in_window=requests)})


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=st.lists(series_strategy, min_size=1, max_size=8),
       busy=st.sets(st.integers(0, 59), max_size=60))
def test_namespaces_add_up_to_their_usage_row_exactly(spec, busy):
    rollup = attribute_hour(_batch(spec, busy), hour=H, policy=mixed_policy(), scrape_interval_s=30)
    sums: dict[tuple, Decimal] = defaultdict(Decimal)
    samples: dict[tuple, int] = defaultdict(int)
    for n in rollup.namespaces:
        key = (n.pool, n.tenant, n.klass, n.dark)
        assert n.gpu_seconds >= 0 and n.gpu_seconds == n.gpu_seconds.quantize(Decimal("0.000001"))
        sums[key] += n.gpu_seconds
        samples[key] += n.activity_samples
    rows = {(u.pool, u.tenant, u.klass, u.dark): u for u in rollup.usage}
    assert set(sums) <= set(rows)
    for key, row in rows.items():
        assert sums.get(key, Decimal(0)) == row.gpu_seconds, key
        assert samples.get(key, 0) == row.activity_samples, key
    # each namespace is attributed as its tenant: unclaimed namespaces only ever to `unallocated`
    for n in rollup.namespaces:
        if n.namespace in ("scratch", "ml-sandbox"):
            assert n.tenant == "unallocated"


def test_unallocated_use_names_its_namespaces():
    spec = [(0, "scratch", 0, list(range(1, 31)), 2, 0.5), (1, "ml-sandbox", 0, list(range(1, 61)), 2, 0.25),
            (0, "vision-train", 1, list(range(31, 61)), 2, 0.9)]
    rollup = attribute_hour(_batch(spec, set()), hour=H, policy=mixed_policy(), scrape_interval_s=30)
    by_ns = {n.namespace: (n.tenant, n.gpu_seconds) for n in rollup.namespaces}
    assert by_ns == {"scratch": ("unallocated", Decimal(1800)), "ml-sandbox": ("unallocated", Decimal(3600)),
                     "vision-train": ("vision", Decimal(1800))}


def test_ingestion_stores_namespace_rows_that_sum_to_usage_rows(session):
    version = add_policy(session)
    spec = [(0, "scratch", 0, list(range(1, 40)), 2, 0.5), (0, "vision-train", 1, list(range(20, 61)), 2, 0.9),
            (2, "search-prod", 0, list(range(1, 61)), 2, 0.3), (2, "data-prep", 0, list(range(1, 61)), 3, 0.7)]
    rollup = attribute_hour(_batch(spec, set(range(30))), hour=H, policy=mixed_policy(), scrape_interval_s=30)
    for _ in range(2):  # re-ingesting replaces the hour, namespaces included
        with session.begin_nested():
            replace_hour(session, rollup, version)
    hour = from_epoch(H)
    usage = dict(((p, t, k, d), Decimal(str(s))) for p, t, k, d, s in session.execute(
        select(UsageRollup.pool, UsageRollup.tenant, UsageRollup.klass, UsageRollup.dark, UsageRollup.gpu_seconds)
        .where(UsageRollup.hour == hour)))
    namespaces = dict(((p, t, k, d), Decimal(str(s))) for p, t, k, d, s in session.execute(
        select(NamespaceUsage.pool, NamespaceUsage.tenant, NamespaceUsage.klass, NamespaceUsage.dark,
               func.sum(NamespaceUsage.gpu_seconds))
        .where(NamespaceUsage.hour == hour)
        .group_by(NamespaceUsage.pool, NamespaceUsage.tenant, NamespaceUsage.klass, NamespaceUsage.dark)))
    assert usage and namespaces == usage
    stored = session.execute(select(func.count()).select_from(NamespaceUsage).where(NamespaceUsage.hour == hour)).scalar_one()
    assert stored == len(rollup.namespaces)
