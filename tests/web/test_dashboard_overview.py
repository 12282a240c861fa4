"""Overview dashboard panels: cost this month vs last (rated or priced from rollups), GPU-hours by class per day with
idle, dark-time share, ingestion health and SLA status partials (htmx, polled), tenant isolation."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from app.billing import periods
from app.billing.loader import DocumentCache
from app.core.settings import get_settings
from app.core.timeutil import floor_hour, utcnow
from app.metrics import usage_read
from app.metrics.date_ranges import DateRange
from app.web import overview_panels
from app.billing.fleet_cost import month_cost
from tests.support.routes import make_user, sign_in
from tests.support.billing import add_hour, store_policy

pytestmark = pytest.mark.anyio


@pytest.fixture(autouse=True)
def _fresh_cache():
    """Rolled-back tests can repeat a data fingerprint with other rows: start each test with an empty cache."""
    overview_panels._CACHE.clear()
    yield
    overview_panels._CACHE.clear()


def _hours(n: int = 3) -> list[datetime]:
    """Up to n hours of this month, ending with the current one (so the month's panels hold data in its first hour)."""
    last = floor_hour(utcnow())
    start = max(last.replace(day=1, hour=0), last - timedelta(hours=n - 1))
    return [start + timedelta(hours=i) for i in range(n) if start + timedelta(hours=i) <= last]


@pytest.fixture
def seeded(session):
    version = store_policy(session, effective_from=datetime(2026, 1, 1, tzinfo=UTC))
    hours = _hours()
    for hour in hours:
        add_hour(session, hour=hour, version=version.id)
    gap = hours[0] - timedelta(hours=1)
    add_hour(session, hour=gap, version=version.id, status="gap")
    session.commit()
    return {"hours": hours, "gap": gap}


def _period(hours) -> DateRange:
    tz = get_settings().tz
    return DateRange(start=hours[0].astimezone(tz).date() - timedelta(days=1), end=hours[-1].astimezone(tz).date(), tz=tz)


async def test_daily_usage_idle_and_dark_share(session, seeded):
    period = _period(seeded["hours"])
    usage = usage_read.daily_usage(session=session, period=period, tenants=None)
    n = len(seeded["hours"])
    assert sum(usage.by_class["training"].values()) == Decimal(4320 * n) / 3600
    # Capacity 2 GPUs x 3600 s per hour; used 1800 + 2520 + 1800 + 360 = 6480 s: idle 720 s an hour.
    assert sum(usage.idle.values()) == Decimal(720 * n) / 3600
    member = usage_read.daily_usage(session=session, period=period, tenants=frozenset({"etl"}))
    assert member.idle is None and set(member.by_class) == {"preprocessing"}
    dark = usage_read.dark_share(session=session, period=period, tenants=None)
    assert dark.minute_share == Decimal(25) / 60 and dark.hour_share == Decimal(1800) / Decimal(6480)


async def test_month_cost_priced_from_rollups_then_from_rated_period(session, seeded):
    hours = seeded["hours"]
    tz = get_settings().tz
    month, start, end = overview_panels._month_bounds(hours[0].astimezone(tz).date(), tz)
    computed = month_cost(session=session, month=month, start=start, end=end,
                                                docs=DocumentCache(session))
    # SPEC worked example: 2 A100s at 1.30 per GPU-hour = 2.60 per hour.
    assert computed.source == "computed" and computed.cost == Decimal("2.60") * len(hours)
    assert computed.utilisation == Decimal(6480) / Decimal(7200)
    periods.rate(session=session, period=month, actor="test")
    rated = month_cost(session=session, month=month, start=start, end=end,
                                             docs=DocumentCache(session))
    assert rated.source == "rated" and rated.cost == computed.cost


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
    series = {d["label"]: sum(d["data"]) for d in daily["datasets"]}
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
    period = _period(seeded["hours"])
    now, today = utcnow(), period.end
    first = overview_panels.extras(session=session, user=user, period=period, now=now, today=today)
    again = overview_panels.extras(session=session, user=user, period=period, now=now, today=today)
    assert again["daily_json"] == first["daily_json"]
    version = store_policy(session, effective_from=datetime(2026, 1, 2, tzinfo=UTC))
    add_hour(session, hour=seeded["hours"][0] - timedelta(hours=2), version=version.id)
    session.flush()
    after = overview_panels.extras(session=session, user=user, period=period, now=now, today=today)
    assert after["daily_json"] != first["daily_json"]
