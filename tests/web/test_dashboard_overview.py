"""Overview dashboard panels: cost this month vs last (rated or priced from rollups), GPU-hours by class per day with
idle, dark-time share, ingestion health and SLA status partials (htmx, polled), tenant isolation."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from app.core.timeutil import utcnow
from app.web import overview_panels
from tests.support.billing import add_hour, store_policy
from tests.support.pages import date_range_over, overview_month
from tests.support.routes import make_user, sign_in

pytestmark = pytest.mark.anyio



@pytest.fixture
def seeded(session) -> dict:
    return overview_month(session)


async def test_health_and_sla_partials(client, session, seeded):
    sign_in(client, session, make_user(session, "vic", "viewer"))
    health = await client.get("/overview/health", headers={"HX-Request": "true"})
    assert health.status_code == 200 and "<html" not in health.text
    assert 'hx-trigger="every 60s"' in health.text and 'id="panel-health"' in health.text
    assert "1 gap hour" in health.text
    sla = await client.get("/overview/sla", headers={"HX-Request": "true"})
    assert sla.status_code == 200 and "<html" not in sla.text and 'hx-trigger="every 60s"' in sla.text
    assert "search-chat" in sla.text and f">{2 * len(seeded['hours'])}<" in sla.text
    bad = await client.get("/overview/health?start=2026-12-01&end=2026-11-01", headers={"HX-Request": "true"})
    assert bad.status_code == 422 and "query.start" in bad.text


async def test_sla_partial_shows_a_member_only_its_services(client, session, seeded):
    sign_in(client, session, make_user(session, "tv", "tenant", tenants=["vision"]))
    sla = await client.get("/overview/sla", headers={"HX-Request": "true"})
    assert sla.status_code == 200 and "search-chat" not in sla.text and "search" not in sla.text
    sign_in(client, session, make_user(session, "ts", "tenant", tenants=["search"]))
    assert "search-chat" in (await client.get("/overview/sla")).text


def _json(html: str, element_id: str) -> dict:
    import json
    import re

    match = re.search(rf'<script type="application/json" id="{element_id}">(.*?)</script>', html, re.S)
    assert match, f"no #{element_id}"
    return json.loads(match.group(1))


async def test_overview_page_has_the_panels(client, session, seeded):
    sign_in(client, session, make_user(session, "vic", "viewer"))
    page = await client.get("/")
    assert page.status_code == 200, page.text
    daily = _json(page.text, "overview-daily-data")
    series = {d["label"]: sum(v or 0 for v in d["data"]) for d in daily["datasets"]}  # null: a day not ingested
    n = len(seeded["hours"])
    assert series["training"] == pytest.approx(1.2 * n) and series["idle"] == pytest.approx(0.2 * n)
    assert "Fleet cost" in page.text and "priced from the rollups" in page.text
    assert 'id="panel-health"' in page.text and 'id="panel-sla"' in page.text
    assert 'href="/tenants/vision?start=' in page.text  # drill-down from the top tenants
    assert "Last month" in page.text  # date presets


async def test_overview_for_a_member_has_no_fleet_cost_or_idle(client, session, seeded):
    sign_in(client, session, make_user(session, "tv", "tenant", tenants=["vision"]))
    page = await client.get("/")
    assert page.status_code == 200
    assert "Fleet cost" not in page.text and "search" not in page.text and "etl" not in page.text
    assert [d["label"] for d in _json(page.text, "overview-daily-data")["datasets"]] == ["training"]


async def test_overview_cache_follows_new_ingestion(session, seeded):
    """The cached aggregates are keyed by the data version: a newly ingested hour shows at once."""
    from app.auth.deps import Principal

    user = Principal(name="vic", roles=frozenset({"viewer"}))
    period = date_range_over(seeded["hours"])
    now, today = utcnow(), period.end
    first = overview_panels.extras(session=session, user=user, period=period, now=now, today=today)
    again = overview_panels.extras(session=session, user=user, period=period, now=now, today=today)
    assert again["daily_json"] == first["daily_json"]
    version = store_policy(session, effective_from=datetime(2026, 1, 2, tzinfo=UTC))
    add_hour(session, hour=seeded["hours"][0] - timedelta(hours=2), version=version.id)
    session.flush()
    after = overview_panels.extras(session=session, user=user, period=period, now=now, today=today)
    assert after["daily_json"] != first["daily_json"]
