"""Two clusters, two real Prometheus servers, one killed mid-month (issue 15).

Each cluster is a simulator of its own (seeds 1 and 2, the same node names: two clusters, so two sets of
nodes) backfilled into its own Prometheus. The worker ingests both; `west` is killed after two hours:
`east`'s later hours are ingested and billed, `west`'s are gaps of `west` alone, filled once it is back.
Oracles, both independent of the multi-cluster code: each cluster's stored rollups equal its simulator's
ground truth, and the period's lines equal the union of each cluster rated on its own by the reference
`rate_period` over its own single-cluster attribution (pools never span clusters, so neither do lines).
"""

from __future__ import annotations

import json
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from sqlmodel import Session, select

from app.billing import periods
from app.billing.checklist import ItemStatus, period_checklist
from app.billing.invoices import load_view, tenant_invoice
from app.billing.models import ChargeLineRecord, LineSource
from app.billing.period import parse_period
from app.billing.rating import rate_period
from app.billing.types import PLATFORM, RatingHour
from app.core import settings as settings_module
from app.core.db import unit_of_work
from app.core.events import Event
from app.core.timeutil import HOUR, epoch
from app.metrics.attribution import attribute_hour, split_hours
from app.metrics.models import IngestHour, PoolHourRollup, UsageRollup
from app.metrics.prometheus_source import PrometheusSource
from app.metrics.simulator import Simulator
from app.metrics.simulator.policy import clusters_policy
from app.metrics.usage_read import hours_coverage
from app.metrics.worker import run_worker
from app.policy.document import PolicyDocument
from app.policy.service import import_version
from tests.support.prometheus import PrometheusServer

START = datetime(2026, 11, 20, tzinfo=UTC)  # the Asia/Shanghai peak (SLA breaches) starts at 01:00 UTC
HOURS = 4
KILLED_AFTER = 2  # west's Prometheus stops once hours 0 and 1 are ingested
CLUSTERS = ("east", "west")
SEEDS = {"east": 1, "west": 2}
MONTH = "2026-11"


@pytest.fixture(scope="module")
def sims() -> dict[str, Simulator]:
    return {c: Simulator(seed=SEEDS[c], gpus=25, scrape_interval_s=30) for c in CLUSTERS}


@pytest.fixture(scope="module")
def servers(sims, tmp_path_factory):
    out = {c: PrometheusServer.from_simulator(tmp_path_factory.mktemp(f"prom-{c}"), sims[c], START,
                                              START + HOUR * HOURS) for c in CLUSTERS}
    for server in out.values():
        server.start()
    try:
        yield out
    finally:
        for server in out.values():
            server.stop()


def renamed(cluster: str, pool: str) -> str:
    return f"{cluster}-{pool}"


def service_of(cluster: str, service: str) -> str:
    return f"{service}-{cluster}"


def alone_policy(sims, cluster: str) -> PolicyDocument:
    """The cluster as a single-cluster install would have it (its pools in the default cluster), for the oracle:
    the simulator's seed policy, renamed here as `clusters_policy` names the combined document's pools."""
    data = sims[cluster].policy().to_data()
    for pool in data["pools"]:
        pool["name"] = renamed(cluster, pool["name"])
    for sla in data["sla"]:
        sla["service"], sla["pool"] = service_of(cluster, sla["service"]), renamed(cluster, sla["pool"])
    for quota in data["quotas"]:
        quota["pool"] = renamed(cluster, quota["pool"])
    data["isolation"]["node_taints"] = {renamed(cluster, p): t for p, t in data["isolation"]["node_taints"].items()}
    return PolicyDocument.model_validate(data)


@pytest.fixture
def configured(servers, monkeypatch):
    monkeypatch.setenv("CHARGEBACK_CLUSTERS", json.dumps([{"name": c, "url": servers[c].url} for c in CLUSTERS]))
    monkeypatch.setenv("CHARGEBACK_SCRAPE_INTERVAL_S", "30")
    settings_module.get_settings.cache_clear()
    yield settings_module.get_settings()
    settings_module.get_settings.cache_clear()


def sources(servers) -> dict[str, PrometheusSource]:
    return {c: PrometheusSource(servers[c].url, scrape_interval_s=30, timeout_s=10, retries=0) for c in CLUSTERS}


def oracle_lines(sims, servers, cluster: str, hours: int) -> list:
    """The cluster rated on its own: fetched and attributed as a single-cluster install, rated by rate_period."""
    doc = alone_policy(sims, cluster)
    batch = PrometheusSource(servers[cluster].url, scrape_interval_s=30).fetch(start=START, end=START + HOUR * hours,
                                                                               policy=doc)
    rating_hours = []
    for hour, part in sorted(split_hours(batch).items()):
        rollup = attribute_hour(part, hour=hour, policy=doc, scrape_interval_s=30)
        for p in rollup.pools:
            rating_hours.append(RatingHour(
                hour=hour, pool=p.pool, policy_version=1, policy=doc, gpus=p.gpus,
                capacity_gpu_seconds=p.capacity_gpu_seconds, models=p.models,
                usage=tuple(u for u in rollup.usage if u.pool == p.pool),
                breaches=tuple(b for b in rollup.breaches if b.pool == p.pool)))
    period = parse_period(MONTH)
    return rate_period(rating_hours, period_start=epoch(period.start), period_end=epoch(period.end)).lines


def line_key(account, pool, kind, klass, service, start, end) -> tuple:
    return (account, pool, kind, klass, service, epoch(start) if isinstance(start, datetime) else start,
            epoch(end) if isinstance(end, datetime) else end)


def as_oracle(lines) -> dict[tuple, tuple]:
    return {line_key(l.account, l.pool, l.kind, l.klass, l.service, l.charge_start, l.charge_end): (l.quantity, l.amount)
            for l in lines}


def stored_lines(session: Session) -> dict[tuple, tuple]:
    rows = session.exec(select(ChargeLineRecord).where(ChargeLineRecord.source == LineSource.RATING)).all()
    return {line_key(r.account, r.pool, r.kind, r.klass, r.service, r.charge_start, r.charge_end):
            (Decimal(r.quantity), Decimal(r.amount)) for r in rows}


def truth_of(sim: Simulator, cluster: str, hours: int) -> dict:
    """The simulator's ground truth, named as the combined policy names its pools."""
    truth = sim.truth(START, START + HOUR * hours)
    return {(h, renamed(cluster, pool), tenant, klass, dark): gs for (h, pool, tenant, klass, dark), gs in truth.usage.items()}


def stored_usage(session: Session, cluster: str) -> dict:
    rows = session.exec(select(UsageRollup).where(UsageRollup.cluster == cluster)).all()
    return {(epoch(u.hour), u.pool, u.tenant, u.klass, u.dark): u.gpu_seconds for u in rows}


def statuses(session: Session) -> dict[str, list[str]]:
    out: dict[str, list[str]] = defaultdict(list)
    for row in session.exec(select(IngestHour).order_by(IngestHour.cluster, IngestHour.hour)):
        out[row.cluster].append(row.status)
    return dict(out)


def test_one_cluster_killed_mid_month_is_a_gap_of_its_own_then_filled(fresh_engine, sims, servers, configured):
    settings = configured
    doc = clusters_policy(sims)  # tenants shared, pools and services per cluster, the same node names in both
    with unit_of_work(fresh_engine) as session:
        import_version(session=session, document=doc, actor="test", effective_from=START - timedelta(days=1))
    clock = [START + HOUR * KILLED_AFTER + timedelta(seconds=200)]
    run = dict(engine=fresh_engine, settings=settings, once=True, backfill_start=START, now=lambda: clock[0])

    first = run_worker(sources=sources(servers), **run)
    assert {c: len(first.of(c).ingested) for c in CLUSTERS} == {"east": KILLED_AFTER, "west": KILLED_AFTER}

    west_before = as_oracle(oracle_lines(sims, servers, "west", KILLED_AFTER))  # west alone, up to the outage
    servers["west"].stop()  # killed mid-month
    try:
        clock[0] = START + HOUR * HOURS + timedelta(seconds=200)
        down = run_worker(sources=sources(servers), **run)
        assert down.of("east").ingested == [START + HOUR * k for k in range(KILLED_AFTER, HOURS)]
        assert down.of("west").gaps == [START + HOUR * k for k in range(KILLED_AFTER, HOURS)]
        assert down.of("east").gaps == [] and down.of("west").ingested == []
        with Session(fresh_engine) as session:
            assert statuses(session) == {"east": ["ok"] * HOURS, "west": ["ok"] * KILLED_AFTER + ["gap"] * 2}
            # east is ingested in full, and exactly as its simulator says; west up to the outage.
            assert stored_usage(session, "east") == truth_of(sims["east"], "east", HOURS)
            assert stored_usage(session, "west") == truth_of(sims["west"], "west", KILLED_AFTER)
            # The same node names in both clusters: each cluster's own GPUs, none of the other's (no unpooled).
            pools = {(p.cluster, p.pool) for p in session.exec(select(PoolHourRollup))}
            assert {c for c, _ in pools} == set(CLUSTERS) and all(p.startswith(c + "-") for c, p in pools)
            cov = hours_coverage(session=session, start=START, end=START + HOUR * HOURS, now=clock[0])
            assert (cov.ok, cov.gaps) == (KILLED_AFTER, HOURS - KILLED_AFTER)
            assert [(c.cluster, c.ok, c.gaps) for c in cov.clusters] == [("east", HOURS, 0), ("west", KILLED_AFTER, 2)]
            assert (hours_coverage(session=session, start=START, end=START + HOUR * HOURS, now=clock[0],
                                   cluster="east").ok) == HOURS
            # The outbox says whose hours they are (webhooks, e-mail): one event per west hour, none of east's.
            gaps = [e.data for e in session.exec(select(Event).where(Event.type == "ingestion.gap"))]
            assert sorted((g["cluster"], g["hour"]) for g in gaps) == [
                ("west", (START + HOUR * k).isoformat().replace("+00:00", "Z")) for k in range(KILLED_AFTER, HOURS)]

        # Rated now, the draft bills east's four hours and west's two: the gap hours are not billed as zero use.
        with unit_of_work(fresh_engine) as session:
            periods.rate(session=session, period=MONTH, actor="finance")
        with Session(fresh_engine) as session:
            expected = as_oracle(oracle_lines(sims, servers, "east", HOURS))
            assert stored_lines(session) == expected | west_before
            item = next(i for i in period_checklist(session=session, period=parse_period(MONTH), now=clock[0]).items
                        if i.key == "coverage")
            assert item.status == ItemStatus.BLOCKS and "west: 2 ingested, 2 gaps" in item.detail and "east:" not in item.detail
    finally:
        servers["west"].start()

    clock[0] += timedelta(minutes=5)  # past the gaps' retry time
    back = run_worker(sources=sources(servers), **run)
    assert back.of("west").ingested == [START + HOUR * k for k in range(KILLED_AFTER, HOURS)]
    assert back.of("east").ingested == []  # nothing of east is read again
    with unit_of_work(fresh_engine) as session:
        periods.rate(session=session, period=MONTH, actor="finance")
    with Session(fresh_engine) as session:
        assert statuses(session) == {c: ["ok"] * HOURS for c in CLUSTERS}
        assert stored_usage(session, "west") == truth_of(sims["west"], "west", HOURS)
        east, west = (as_oracle(oracle_lines(sims, servers, c, HOURS)) for c in CLUSTERS)
        assert not east.keys() & west.keys()
        assert stored_lines(session) == east | west  # the period = each cluster rated alone, line for line

        # A tenant's one invoice spans both clusters; its total is the sum of its totals in each.
        view = load_view(session=session, period=periods.get_period(session=session, month=MONTH))
        invoice = tenant_invoice(view, "vision")
        assert invoice["clusters"] == list(CLUSTERS) and invoice["several_clusters"]
        assert {line["cluster"] for line in invoice["lines"]} == set(CLUSTERS)
        assert all(line["pool"].startswith(line["cluster"] + "-") for line in invoice["lines"])

        def total(lines: dict, tenant: str) -> Decimal:
            return sum((amount for (account, *_), (_, amount) in lines.items() if account == tenant), Decimal(0))

        for tenant in ("search", "assist", "vision", "nlp", "etl"):
            billed = tenant_invoice(view, tenant)["total"]
            assert billed == total(east, tenant) + total(west, tenant), tenant
        assert total(east, "vision") > 0 and total(west, "vision") > 0
        assert total(east | west, PLATFORM) == sum((Decimal(r.amount) for r in view.lines if r.account == PLATFORM),
                                                   Decimal(0))

