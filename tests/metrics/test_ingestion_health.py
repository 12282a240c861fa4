"""Ingestion health has one definition: the /metrics gauges and the overview's health panel show the same figures."""

import re
from datetime import timedelta

import pytest
from prometheus_client.parser import text_string_to_metric_families

from app.core.settings import get_settings
from app.core.timeutil import utcnow
from app.metrics.ingestion_health import ingestion_health
from tests.support import rollups as builders
from tests.support.routes import make_user, sign_in

pytestmark = pytest.mark.anyio


def _gauges(text: str) -> dict[str, float]:
    return {s.name: s.value for family in text_string_to_metric_families(text) for s in family.samples if not s.labels}


async def test_metrics_and_the_health_panel_show_the_same_figures(client, session):
    hours = builders.recent_hours(5)
    for hour in hours[:2]:
        builders.ingest_hour(session, hour, duration_s=0.25)
    builders.ingest_hour(session, hours[2], status="gap")
    builders.ingest_hour(session, hours[3], duration_s=1.5)
    session.commit()
    sign_in(client, session, make_user(session, "vic", "viewer"))

    gauges = _gauges((await client.get("/metrics")).text)
    tz = get_settings().tz
    start, end = (hours[0] - timedelta(days=1)).astimezone(tz).date(), utcnow().astimezone(tz).date()
    panel = (await client.get(f"/overview/health?start={start.isoformat()}&end={end.isoformat()}")).text
    assert gauges["chargeback_ingested_hours"] == 3 and "3 hours ingested" in panel
    assert gauges["chargeback_ingestion_gap_hours"] == 1 and "1 gap hour" in panel
    assert gauges["chargeback_ingest_last_duration_seconds"] == 1.5

    health = ingestion_health(session=session, now=utcnow())
    lag_hours = float(re.search(r"lag ([0-9.]+) h", panel).group(1))
    assert abs(lag_hours - health.lag_hours) < 0.1
    assert abs(gauges["chargeback_ingestion_lag_seconds"] - health.lag_seconds) < 60
    assert health.lag_seconds >= 0 and [g.hour for g in health.gaps] == [hours[2]]


def _labelled(text: str, name: str) -> dict[str, float]:
    return {s.labels["cluster"]: s.value for family in text_string_to_metric_families(text) for s in family.samples
            if s.name == name}


async def test_several_clusters_the_fleet_counts_hours_every_cluster_has(client, session, monkeypatch):
    from app.core import settings

    monkeypatch.setenv("CHARGEBACK_CLUSTERS", '[{"name": "east"}, {"name": "west"}]')
    settings.get_settings.cache_clear()
    try:
        hours = builders.recent_hours(4)
        for hour in hours:
            builders.ingest_hour(session, hour, cluster="east")
        for hour in hours[:2]:  # west is two hours behind, and one of them is a gap
            builders.ingest_hour(session, hour, cluster="west")
        builders.ingest_hour(session, hours[2], status="gap", cluster="west")
        session.commit()
        sign_in(client, session, make_user(session, "vic", "viewer"))

        text = (await client.get("/metrics")).text
        gauges = _gauges(text)
        assert gauges["chargeback_ingested_hours"] == 2 and gauges["chargeback_ingestion_gap_hours"] == 1
        assert _labelled(text, "chargeback_cluster_ingested_hours") == {"east": 4, "west": 2}
        assert _labelled(text, "chargeback_cluster_ingestion_gap_hours") == {"east": 0, "west": 1}
        lags = _labelled(text, "chargeback_cluster_ingestion_lag_seconds")
        assert lags["west"] - lags["east"] == pytest.approx(2 * 3600, abs=60)
        assert gauges["chargeback_ingestion_lag_seconds"] == pytest.approx(lags["west"], abs=60)  # the most behind

        tz = get_settings().tz
        start, end = (hours[0] - timedelta(days=1)).astimezone(tz).date(), utcnow().astimezone(tz).date()
        panel = (await client.get(f"/overview/health?start={start.isoformat()}&end={end.isoformat()}")).text
        assert "2 hours ingested in every cluster" in panel
        assert "Cluster <strong>west</strong>" in panel and "<strong>1 gap</strong>" in panel
        east = (await client.get(f"/overview/health?start={start.isoformat()}&end={end.isoformat()}&cluster=east")).text
        assert "4 hours ingested, no gaps" in " ".join(east.split()) and "Cluster <strong>" not in east
    finally:
        settings.get_settings.cache_clear()
