"""Per-unit rollups: a pool's units carry exactly what its usage rows bill (up to the 1e-6 rounding of each
row), every reporting unit has a row, and ingestion stores them with the hour (both backends)."""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlmodel import select

from app.metrics.attribution import attribute_hour, split_hours
from app.metrics.ingest import ingest_hours
from app.metrics.models import UnitHourRollup, UsageRollup
from app.metrics.simulator import Simulator
from app.metrics.unit_read import tenant_memory_peaks
from app.policy.service import import_version

MICRO = Decimal("0.000001")
DAY0 = datetime(2026, 11, 2, tzinfo=UTC)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), hour=st.integers(0, 24 * 28 - 2), step=st.sampled_from([15, 20, 30]))
def test_unit_rollups_sum_to_the_pool_rollups(seed, hour, step):
    sim = Simulator(seed=seed, gpus=33, scrape_interval_s=step)
    start = DAY0 + timedelta(hours=hour)
    batch = sim.source().fetch(start=start, end=start + timedelta(hours=2), policy=sim.policy())
    for h, part in split_hours(batch).items():
        rollup = attribute_hour(part, hour=h, policy=sim.policy())
        pools, units = defaultdict(Decimal), defaultdict(Decimal)
        rows = defaultdict(int)
        for u in rollup.usage:
            pools[u.pool] += u.gpu_seconds
            rows[u.pool] += 1
        for u in rollup.units:
            units[u.pool] += u.gpu_seconds
            rows[u.pool] += 1
            assert Decimal(0) <= u.gpu_seconds <= u.capacity_gpu_seconds
        assert set(pools) <= set(units)
        for pool in units:
            # Each row is rounded once to 1e-6: the sums may differ by at most half a micro per row.
            assert abs(pools[pool] - units[pool]) <= MICRO / 2 * rows[pool], (pool, pools[pool], units[pool])
        assert len(rollup.units) == len(sim.topology.units)  # every unit reports, held or free
        capacity = {p.pool: p.capacity_gpu_seconds for p in rollup.pools}
        for pool, whole in capacity.items():
            # MIG layouts may leave slices unpartitioned: units never exceed the pool's GPUs.
            assert sum((u.capacity_gpu_seconds for u in rollup.units if u.pool == pool), Decimal(0)) <= whole


def test_ingestion_stores_unit_hours_and_peaks(session):
    sim = Simulator(seed=5, gpus=32)
    start = DAY0 + timedelta(days=3, hours=10)
    import_version(session=session, document=sim.policy(), actor="test", effective_from=start - timedelta(days=1))
    report = ingest_hours(session=session, source=sim.source(), start=start, end=start + timedelta(hours=2))
    assert len(report.ok) == 2
    stored = session.exec(select(UnitHourRollup)).all()
    assert len(stored) == 2 * len(sim.topology.units)
    usage = sum((u.gpu_seconds for u in session.exec(select(UsageRollup)).all()), Decimal(0))
    assert abs(sum((u.gpu_seconds for u in stored), Decimal(0)) - usage) <= MICRO * len(stored)
    mig = [u for u in stored if u.mig_profile == "3g.40gb"]
    assert mig and all(u.tenants == "search" and u.fb_used_peak_mib == 40960 * 78 // 100 for u in mig)
    # Re-ingesting an hour replaces its unit rows.
    ingest_hours(session=session, source=sim.source(), start=start, end=start + timedelta(hours=1))
    assert len(session.exec(select(UnitHourRollup)).all()) == len(stored)
    peaks = tenant_memory_peaks(session=session, until=start + timedelta(hours=2))
    assert peaks["search"] == 8 * (40960 * 78 // 100)
