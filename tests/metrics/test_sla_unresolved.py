"""SLA minutes on vLLM's real buckets: a red line inside the bucket holding P99 is unresolved, not billed."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

from sqlmodel import select

from app.core.timeutil import from_epoch
from app.metrics.attribution import attribute_hour, split_hours
from app.metrics.ingest import ingest_hours
from app.metrics.models import BreachMinuteRollup, SlaUnresolvedHour
from app.metrics.prometheus_source import PrometheusSource
from app.metrics.simulator import Simulator
from tests.support import scenario
from tests.support.ingest import HOUR, add_policy
from tests.support.policies import mixed_policy
from tests.support.simulator import DAY

H = scenario.H


def with_red_line(p99_ms: int):
    policy = mixed_policy()
    sla = policy.sla[0].model_copy(update={"p99_ms": Decimal(p99_ms)})
    return policy.model_copy(update={"sla": [sla]})


def test_a_red_line_inside_the_p99_bucket_is_unresolved_and_not_billed(session, scenario_prometheus):
    # The scenario's slow requests fall in vLLM's (0.5, 0.8] bucket; 600 ms lies inside it.
    add_policy(session, with_red_line(600))
    source = PrometheusSource(scenario_prometheus.url, scrape_interval_s=30, timeout_s=10)
    report = ingest_hours(session=session, source=source, start=from_epoch(H), end=from_epoch(H) + HOUR, scrape_interval_s=30)
    assert report.ok == [from_epoch(H)]
    assert session.exec(select(BreachMinuteRollup)).all() == []  # interpolation (797 ms) would have billed 9 minutes
    row = session.exec(select(SlaUnresolvedHour)).one()
    assert (row.service, row.service_tenant, row.pool, row.minutes) == ("search-chat", "search", "mixed-a100", 9)


def test_a_red_line_on_a_boundary_resolves_every_minute(session, scenario_prometheus):
    add_policy(session, with_red_line(500))
    source = PrometheusSource(scenario_prometheus.url, scrape_interval_s=30, timeout_s=10)
    ingest_hours(session=session, source=source, start=from_epoch(H), end=from_epoch(H) + HOUR, scrape_interval_s=30)
    breaches = session.exec(select(BreachMinuteRollup)).all()
    assert sorted(int(b.minute_end.timestamp()) for b in breaches) == scenario.EXPECTED_BREACH_MINUTES
    assert session.exec(select(SlaUnresolvedHour)).all() == []


def test_vllm_buckets_cannot_resolve_a_red_line_under_300_ms():
    """The simulator's fast minutes have P99 in vLLM's first bucket (0, 0.3]: at 250 ms every such
    minute is unresolved instead of a breach, while slow minutes (0.5-0.8 s) still breach."""
    sim = Simulator(seed=42, gpus=32)
    policy = sim.policy()
    strict = [s.model_copy(update={"p99_ms": Decimal(250)}) for s in policy.sla]
    policy = policy.model_copy(update={"sla": strict})
    start, end = DAY, DAY + timedelta(hours=3)
    batch = sim.source().fetch(start=start, end=end, policy=policy)
    truth = sim.truth(start, end)
    breaches, unresolved = set(), 0
    for hour, part in split_hours(batch).items():
        rollup = attribute_hour(part, hour=hour, policy=policy, scrape_interval_s=sim.scrape_interval_s)
        breaches |= {(b.service, b.minute_end) for b in rollup.breaches}
        unresolved += sum(rollup.unresolved.values())
    assert breaches == truth.breaches  # the slow minutes, exactly
    with_traffic = sum(1 for s in batch.services.values() for m in s.p99_bucket)
    assert unresolved == with_traffic - len(breaches) > 0
