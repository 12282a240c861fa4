"""A real Prometheus scraping the simulator's live exporter every second for about 20 scrapes, then ingested.

The rollups must name exactly the pools and tenants the exporter exposed, and their GPU-seconds must
equal what the raw scraped samples imply (1 s x unit fraction, split among the pods on a unit).
"""

from __future__ import annotations

import re
import time
from collections import defaultdict
from fractions import Fraction

import httpx
import pytest
from sqlmodel import select

from app.core.timeutil import HOUR, epoch, floor_hour, from_epoch, utcnow
from app.metrics.ingest import ingest_hours
from app.metrics.models import UsageRollup
from app.metrics.prometheus_source import PrometheusSource
from app.metrics.simulator import Simulator, serve_exporter
from tests.support.ingest import add_policy
from tests.support.prometheus import PrometheusServer

SCRAPE_S = 1
# Scrapes Prometheus must have stored before the capture ends: enough samples per unit to compare
# (tens), and a third of the old fixed minute, which was half the suite's time.
CAPTURE_SCRAPES = 20
OCCUPANCY = ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_PROF_GR_ENGINE_ACTIVE")
LABEL_RE = re.compile(r'(\w+)="([^"]*)"')


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    """Scrape the live exporter until Prometheus holds CAPTURE_SCRAPES scrapes; yields (sim, prometheus, exposed bodies, start)."""
    sim = Simulator(seed=42, gpus=32, scrape_interval_s=30)
    exporter = serve_exporter(sim)
    target = f"127.0.0.1:{exporter.server_address[1]}"
    server = PrometheusServer(tmp_path_factory.mktemp("prom-live"), scrape_target=target, scrape_interval_s=SCRAPE_S)
    bodies = []
    try:
        server.start()
        began = time.time()
        while _stored(server, "up") < CAPTURE_SCRAPES or len(bodies) < CAPTURE_SCRAPES:
            bodies.append(httpx.get(f"http://{target}/metrics", timeout=5).text)
            time.sleep(SCRAPE_S)  # our own polls at the scrape pace (what was exposed), not a wait for state
    finally:
        exporter.shutdown()  # from here the scrapes fail and the series go stale
        exporter.server_close()
    try:
        # Until Prometheus has recorded a failed scrape: every sample it will ever hold is stored.
        deadline = time.time() + 60
        while not any(float(item["value"][1]) == 0 for item in server.query("up")):
            assert time.time() < deadline, "Prometheus never noticed the exporter stopped"
            time.sleep(0.2)  # state-free: polls until `up` shows the failed scrape
        yield sim, server, bodies, began
    finally:
        server.stop()


def _stored(server: PrometheusServer, metric: str) -> int:
    """How many samples of `metric` Prometheus holds from the last ten minutes."""
    result = server.query(f"count_over_time({metric}[10m])")
    return int(float(result[0]["value"][1])) if result else 0


def occupied(policy, labels: dict) -> tuple[str, str] | None:
    """(pool, tenant) of an occupancy series that carries a pod, from the exposition's labels."""
    if not labels.get("pod"):
        return None
    pool = policy.pool_for_node(labels.get("Hostname") or labels.get("hostname", ""))
    tenant = policy.tenant_for_namespace(labels.get("namespace", ""))
    return (pool.name if pool else "unpooled", tenant.name if tenant else "unallocated")


def exposed_pairs(policy, bodies: list[str]) -> dict[tuple[str, str], int]:
    """(pool, tenant) -> in how many of our own polls of the exporter it appeared."""
    seen: dict[tuple[str, str], int] = defaultdict(int)
    for body in bodies:
        pairs = set()
        for line in body.splitlines():
            if line.startswith(OCCUPANCY):
                found = occupied(policy, dict(LABEL_RE.findall(line.split("}", 1)[0])))
                if found:
                    pairs.add(found)
        for pair in pairs:
            seen[pair] += 1
    return seen


def scraped_gpu_seconds(policy, server: PrometheusServer) -> dict[tuple[str, str, str], Fraction]:
    """GPU-seconds per (pool, tenant, class) from the raw samples: each sample is 1 s of its unit, split by pods."""
    per_unit: dict[tuple, dict[str, list]] = defaultdict(lambda: defaultdict(list))  # unit -> metric -> series
    for metric in OCCUPANCY:
        for item in server.query(f"{metric}[30m]"):
            m = item["metric"]
            unit = (m.get("Hostname") or m.get("hostname"), m["UUID"], m.get("GPU_I_ID", ""))
            per_unit[unit][metric].append((m, [float(t) for t, _ in item["values"]]))
    out: dict[tuple, Fraction] = defaultdict(Fraction)
    for metrics in per_unit.values():
        series = metrics.get(OCCUPANCY[0]) or metrics[OCCUPANCY[1]]
        pods_at: dict[float, list[dict]] = defaultdict(list)
        for m, stamps in series:
            if m.get("pod"):
                for t in stamps:
                    pods_at[t].append(m)
        for pods in pods_at.values():
            for m in pods:
                profile = m.get("GPU_I_PROFILE", "")
                fraction = Fraction(int(profile.split("g.")[0]), 7) if profile else Fraction(1)
                pool, tenant = occupied(policy, m)
                klass = policy.tenant(tenant).klass if tenant != "unallocated" else "unallocated"
                out[(pool, tenant, klass)] += Fraction(SCRAPE_S) * fraction / len(pods)
    return out


def test_live_scrape_ingests_what_the_exporter_exposed(session, live):
    sim, server, bodies, began = live
    policy = sim.policy()
    add_policy(session, policy, effective_epoch=epoch(floor_hour(from_epoch(began))) - 86400)
    start, end = floor_hour(from_epoch(began)), floor_hour(utcnow()) + HOUR
    report = ingest_hours(session=session, source=PrometheusSource(server.url, scrape_interval_s=SCRAPE_S),
                          start=start, end=end, scrape_interval_s=SCRAPE_S)
    assert not report.gaps and report.ok
    rows = session.exec(select(UsageRollup).where(UsageRollup.hour >= start, UsageRollup.hour < end)).all()
    got_pairs, exposed = {(r.pool, r.tenant) for r in rows}, exposed_pairs(policy, bodies)
    # Everything Prometheus scraped was exposed; everything exposed for more than a few seconds was
    # scraped (our polls and Prometheus's scrapes are not the same instants at the edges).
    assert got_pairs <= set(exposed), (got_pairs, exposed)
    assert {p for p, polls in exposed.items() if polls >= 5} <= got_pairs, (got_pairs, exposed)
    assert got_pairs  # inference runs around the clock: something is always held

    got: dict[tuple, Fraction] = defaultdict(Fraction)
    for r in rows:
        got[(r.pool, r.tenant, r.klass)] += Fraction(r.gpu_seconds)
    expected = scraped_gpu_seconds(policy, server)
    assert set(got) == set(expected)
    # CAPTURE_SCRAPES scrapes at 1 s: tens of samples per occupied unit.
    assert sum(expected.values()) > 10 * CAPTURE_SCRAPES * Fraction(1, 7)
    for key, seconds in expected.items():
        # Exact unless a unit's pods changed inside a minute bucket (the exporter's minute slots and the
        # scrape clock can disagree by one sample at a boundary): then off by at most that one sample.
        assert abs(got[key] - seconds) <= Fraction(SCRAPE_S) + Fraction(1, 1_000_000), key
    assert abs(sum(got.values()) - sum(expected.values())) <= Fraction(SCRAPE_S) * 2
