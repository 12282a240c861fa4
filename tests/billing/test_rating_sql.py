"""The SQL rating path (`rating_sql.rate_stored`) equals the reference `rate_period` over the same stored
rollups, on SQLite and on PostgreSQL (hypothesis).

Random scenarios as in test_rating_properties (pools, two policy versions split at a random hour,
random prices, reservation weights, fractions, usage and breach minutes), stored in the rollup
tables with pools spread over two clusters and each cluster's own `unpooled` pool (whose rows of one
hour add up, as the loader reads them). The reference reads them back through `load_hours`; the SQL
path must give the identical RatingResult, without falling back to the reference.
"""

from __future__ import annotations

import hashlib
import random
from datetime import UTC, datetime
from decimal import ROUND_DOWN
from decimal import Decimal as D

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import insert

from app.billing import rating_sql
from app.billing.loader import load_hours
from app.billing.rating import RatingInputError, rate_period
from app.billing.rating_sql import rate_stored
from app.core.timeutil import from_epoch
from app.metrics.models import BreachMinuteRollup, BreachShare, PoolHourModel, PoolHourRollup, UsageRollup
from app.policy.models import PolicyVersion
from app.policy.service import canonical_json
from tests.billing.conftest import OCT1
from tests.billing.test_rating_properties import HOUR, MICRO, NOV, policies, pool_hours
from tests.support.billing import EXAMPLE_USAGE, add_hour, store_policy

DEC = NOV + 30 * 24 * HOUR
CLUSTERS = ("east", "west")
UNPOOLED = "unpooled"
UNPOOLED_KEYS = (("t0", "training"), ("i0", "inference"), ("unallocated", "unallocated"))

SQL_SETTINGS = settings(max_examples=25, deadline=None,
                        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                               HealthCheck.function_scoped_fixture])


def _store_version(session, doc) -> int:
    canonical = canonical_json(doc)
    v = PolicyVersion(created_at=datetime(2026, 1, 1, tzinfo=UTC), created_by="test", source="bootstrap",
                      effective_from=datetime(2026, 1, 1, tzinfo=UTC), sha256=hashlib.sha256(canonical.encode()).hexdigest(),
                      document=canonical)
    session.add(v)
    session.flush()
    return v.id


@st.composite
def stored_scenarios(draw):
    """(pools, {version: doc}, [(hour, pool, version, RatingHour-like draw)], unpooled rows, cluster of each pool)."""
    pools = tuple(f"p{i}" for i in range(draw(st.integers(1, 3))))
    old, new = draw(policies(pools)), draw(policies(pools))
    n_hours = draw(st.integers(1, 6))
    change = draw(st.integers(0, n_hours))
    hours = []
    for i in range(n_hours):
        doc, version = (old, 1) if i < change else (new, 2)
        for pool in pools:
            hours.append(draw(pool_hours(NOV + HOUR * (5 * i), pool, version, doc)))
    home = {pool: draw(st.sampled_from(CLUSTERS)) for pool in pools}
    # GPUs on nodes no pool names, in each cluster, in some hours
    rnd = random.Random(draw(st.integers(0, 2**32)))
    unpooled = []  # (hour index, cluster, gpus, [(tenant, klass, dark, gs)])
    for i in range(n_hours):
        for cluster in CLUSTERS:
            if rnd.random() < 0.4:
                gpus = rnd.randint(1, 3)
                rows = [(t, k, d, (D(gpus * HOUR) * D(rnd.randint(0, 40)) / 100).quantize(MICRO, rounding=ROUND_DOWN))
                        for t, k in UNPOOLED_KEYS for d in (False, True) if rnd.random() < 0.6]
                unpooled.append((i, cluster, gpus, rows))
    return old, new, hours, home, unpooled


def _store(session, scenario) -> None:
    old, new, hours, home, unpooled = scenario
    ids = {1: _store_version(session, old), 2: _store_version(session, new)}
    pool_rows, model_rows, usage_rows, breach_rows, share_rows = [], [], [], [], []
    for h in hours:
        at, cluster, version = from_epoch(h.hour), home[h.pool], ids[h.policy_version]
        pool_rows.append({"hour": at, "cluster": cluster, "pool": h.pool, "gpus": h.gpus, "capacity_gpu_seconds": h.capacity_gpu_seconds,
                          "dark_minutes": 0, "policy_version_id": version})
        model_rows += [{"hour": at, "cluster": cluster, "pool": h.pool, "model": m.model, "gpus": m.gpus,
                        "measured_gpus": m.measured_gpus, "measured_kwh": m.measured_kwh} for m in h.models]
        usage_rows += [{"hour": at, "cluster": cluster, "pool": h.pool, "tenant": r.tenant, "klass": r.klass, "dark": r.dark,
                        "gpu_seconds": r.gpu_seconds, "activity_sum": r.activity_sum, "activity_samples": r.activity_samples,
                        "policy_version_id": version} for r in h.usage]
        for b in h.breaches:
            breach_rows.append({"hour": at, "cluster": cluster, "service": b.service, "service_tenant": b.service_tenant,
                                "pool": b.pool, "minute_end": from_epoch(b.minute_end), "p99_ms": b.p99_ms})
            shares: dict[str, D] = {}
            for tenant, gs in b.colocated:  # one row per tenant: the loader's shares of a minute
                shares[tenant] = shares.get(tenant, D(0)) + gs
            share_rows.append(shares)
    n_hours = len({h.hour for h in hours})
    first_of = sorted({h.hour for h in hours})
    for i, cluster, gpus, rows in unpooled:
        if i >= n_hours:
            continue
        at = from_epoch(first_of[i])
        version = ids[next(h.policy_version for h in hours if h.hour == first_of[i])]
        pool_rows.append({"hour": at, "cluster": cluster, "pool": UNPOOLED, "gpus": gpus, "capacity_gpu_seconds": D(gpus * HOUR),
                          "dark_minutes": 0, "policy_version_id": version})
        model_rows.append({"hour": at, "cluster": cluster, "pool": UNPOOLED, "model": "NVIDIA H100 80GB HBM3", "gpus": gpus,
                           "measured_gpus": 0, "measured_kwh": D(0)})
        usage_rows += [{"hour": at, "cluster": cluster, "pool": UNPOOLED, "tenant": t, "klass": k, "dark": d, "gpu_seconds": gs,
                        "activity_sum": 0.25 * float(gs) / 30, "activity_samples": int(gs // 30), "policy_version_id": version}
                       for t, k, d, gs in rows]
    session.execute(insert(PoolHourRollup), pool_rows)
    if model_rows:
        session.execute(insert(PoolHourModel), model_rows)
    if usage_rows:
        session.execute(insert(UsageRollup), usage_rows)
    for row, shares in zip(breach_rows, share_rows, strict=True):
        b = BreachMinuteRollup(**row)
        session.add(b)
        session.flush()
        for tenant, gs in shares.items():
            session.add(BreachShare(breach_id=b.id, tenant=tenant, gpu_seconds=gs))
    session.flush()


def _reference(session):
    return rate_period(load_hours(session=session, start=from_epoch(NOV), end=from_epoch(DEC)), period_start=NOV, period_end=DEC)


def _no_fallback(*_args, **_kwargs):
    raise AssertionError("the SQL path fell back to the reference")


@SQL_SETTINGS
@given(scenario=stored_scenarios())
def test_sql_path_equals_the_reference(session, monkeypatch, scenario):
    nested = session.begin_nested()
    try:
        _store(session, scenario)
        expected = _reference(session)
        with monkeypatch.context() as m:
            m.setattr(rating_sql, "rate_period", _no_fallback)
            got = rate_stored(session=session, start=from_epoch(NOV), end=from_epoch(DEC))
        assert got.lines == expected.lines
        assert got.usage == expected.usage
        assert got.cost_by_pool == expected.cost_by_pool
        assert got.unattributed == expected.unattributed
        assert got.unpooled == expected.unpooled
        assert got == expected
    finally:
        nested.rollback()


def test_a_row_the_reference_refuses_is_refused_the_same_way(session):
    """A negative GPU-seconds row: the SQL path re-rates by the reference, which names the row."""
    v = store_policy(session)
    add_hour(session, hour=OCT1, version=v.id, usage=[*EXAMPLE_USAGE, ("etl", "preprocessing", True, -5)])
    start, end = OCT1, from_epoch(int(OCT1.timestamp()) + 31 * 24 * HOUR)
    with pytest.raises(RatingInputError) as reference:
        rate_period(load_hours(session=session, start=start, end=end), period_start=int(start.timestamp()), period_end=int(end.timestamp()))
    with pytest.raises(RatingInputError) as sql:
        rate_stored(session=session, start=start, end=end)
    assert "negative GPU-seconds" in str(reference.value.errors)
    assert sql.value.errors == reference.value.errors


def test_the_worked_example_is_rated_in_sql(session, monkeypatch):
    """Two hours of the SPEC example through the SQL path alone (no fallback), equal to the reference."""
    v = store_policy(session)
    add_hour(session, hour=OCT1, version=v.id)
    add_hour(session, hour=from_epoch(int(OCT1.timestamp()) + HOUR), version=v.id, breaches=())
    start, end = OCT1, from_epoch(int(OCT1.timestamp()) + 31 * 24 * HOUR)
    expected = rate_period(load_hours(session=session, start=start, end=end), period_start=int(start.timestamp()),
                           period_end=int(end.timestamp()))
    monkeypatch.setattr(rating_sql, "rate_period", _no_fallback)
    assert rate_stored(session=session, start=start, end=end) == expected
