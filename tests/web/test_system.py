"""/healthz and the portal's own /metrics (Prometheus text format, checked with the official parser)."""

import os
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest
from prometheus_client.parser import text_string_to_metric_families

from app.core.timeutil import utcnow
from tests.support import rollups as builders

pytestmark = pytest.mark.anyio


def _samples(text: str) -> dict[tuple[str, tuple], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


async def test_healthz_pings_the_database(client):
    response = await client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


async def test_healthz_503_when_the_database_is_down(app, client):
    from sqlmodel import Session

    from app.core.db import make_engine
    from app.core.deps import get_session

    dead = make_engine("postgresql://postgres@127.0.0.1:1/nowhere")

    def _dead_session():
        with Session(dead) as s:
            yield s

    app.dependency_overrides[get_session] = _dead_session
    response = await client.get("/healthz")
    assert response.status_code == 503
    assert response.headers["content-type"] == "application/problem+json"
    assert "1/nowhere" not in response.text


async def test_metrics_report_ingestion_state_and_requests(client, session):
    hours = builders.recent_hours(6)
    for hour in hours[:3]:
        builders.ingest_hour(session, hour, duration_s=0.25)
    builders.ingest_hour(session, hours[3], status="gap")
    builders.ingest_hour(session, hours[4], duration_s=1.5)  # newest ok hour: an hour ago, ended 0-60 min ago
    session.commit()
    await client.get("/healthz")
    response = await client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain; version=")
    samples = _samples(response.text)
    assert samples[("chargeback_ingestion_gap_hours", ())] == 1
    assert samples[("chargeback_ingested_hours", ())] == 4
    lag = samples[("chargeback_ingestion_lag_seconds", ())]
    expected = (utcnow() - (hours[4] + timedelta(hours=1))).total_seconds()
    assert abs(lag - expected) < 60
    assert samples[("chargeback_ingest_last_duration_seconds", ())] == 1.5
    key = ("chargeback_http_requests_total", (("method", "GET"), ("route", "/healthz"), ("status", "200")))
    assert samples[key] >= 1
    assert ("chargeback_http_request_duration_seconds_count", (("method", "GET"), ("route", "/healthz"))) in samples


async def test_metrics_label_routes_by_template_not_raw_path(client):
    for token_id in (11, 12, 13):
        await client.delete(f"/api/v1/tokens/{token_id}")
    text = (await client.get("/metrics")).text
    assert 'route="/api/v1/tokens/{token_id}"' in text
    assert "/api/v1/tokens/11" not in text


async def test_metrics_without_any_ingested_hour(client):
    samples = _samples((await client.get("/metrics")).text)
    assert samples[("chargeback_ingested_hours", ())] == 0
    lag = samples[("chargeback_ingestion_lag_seconds", ())]
    assert lag != lag  # NaN: unknown, not "no lag"


async def test_security_headers(client):
    page = await client.get("/login")
    assert page.headers["x-content-type-options"] == "nosniff"
    assert page.headers["x-frame-options"] == "DENY"
    csp = page.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp
    api = await client.get("/api/v1/me")
    assert api.headers["x-content-type-options"] == "nosniff"
    assert "content-security-policy" not in api.headers


async def test_metrics_and_health_panel_report_use_cut_at_capacity(client, session):
    """A unit-hour reported above capacity is a data-quality finding: counted on /metrics and shown, never billed."""
    from decimal import Decimal

    from app.metrics.models import DataQualityFinding
    from tests.support.routes import make_user, sign_in

    hour = builders.recent_hours(2)[0]
    builders.ingest_hour(session, hour, duration_s=0.5)
    session.add(DataQualityFinding(hour=hour, pool="mixed-a100", kind="over_capacity", unit="gpu-a100-01/GPU-A",
                                   gpu_seconds_cut=Decimal("3600"), detail="2 series reported 7200 GPU-s"))
    session.add(DataQualityFinding(hour=hour, pool="mixed-a100", kind="over_capacity", unit="gpu-a100-01/GPU-B",
                                   gpu_seconds_cut=Decimal("1800.5"), detail="2 series reported 5400.5 GPU-s"))
    session.commit()
    samples = _samples((await client.get("/metrics")).text)
    assert samples[("chargeback_data_quality_findings", ())] == 2
    assert samples[("chargeback_data_quality_cut_gpu_seconds", ())] == 5400.5
    sign_in(client, session, make_user(session, "dq-viewer", "viewer"))
    day = hour.date()
    panel = (await client.get(f"/overview/health?start={day}&end={day + timedelta(days=1)}",
                              headers={"HX-Request": "true"})).text
    assert 'id="data-quality"' in panel and "2 unit-hours reported more than capacity" in panel
    assert "1.5 GPU-hours cut, not billed" in panel and "gpu-a100-01/GPU-B" in panel


def test_metrics_count_the_requests_of_every_serve_worker(tmp_path, fresh_db_url):
    """`chargeback serve --workers 2`: whichever worker answers the scrape reports both workers' requests."""
    import httpx

    from tests.support.billing import CLI
    from tests.support.server import running_portal

    shared = tmp_path / "metrics"
    shared.mkdir()
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(shared)}
    with running_portal(fresh_db_url, command=(str(CLI), "serve"), extra_args=("--workers", "2"), env=env) as portal:
        sent, deadline = 0, time.monotonic() + 60
        # Concurrent connections until both workers have served one (each then holds a counter file of its
        # own): one at a time, the worker that answered the last one usually accepts the next as well.
        with ThreadPoolExecutor(16) as pool:
            while len(list(shared.glob("counter_*.db"))) < 2:
                assert time.monotonic() < deadline, "one worker got every connection"
                codes = list(pool.map(lambda _: httpx.get(f"{portal.base}/no-such-page").status_code, range(16)))
                assert codes == [404] * 16
                sent += 16
        key = ("chargeback_http_requests_total", (("method", "GET"), ("route", "unmatched"), ("status", "404")))
        for _ in range(6):  # scrapes land on either worker
            assert _samples(httpx.get(f"{portal.base}/metrics").text)[key] == sent
