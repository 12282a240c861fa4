"""Coverage where decisions are made: "2 of 744 hours" badges, no change figure against a partial baseline, cost
increases never green, and days with no ingested hour drawn as gaps (null), never as zero."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from app.core.settings import get_settings
from app.core.timeutil import floor_hour, utcnow
from app.web import overview_panels
from app.web.charts import sparkline
from tests.support.billing import add_hour, fill_month, month_hours, store_policy
from tests.support.pages import this_month_hours
from tests.support.routes import make_user, sign_in

pytestmark = pytest.mark.anyio
OCT1 = datetime(2026, 10, 1, tzinfo=UTC)
CSS = Path(__file__).resolve().parents[2] / "static" / "app.css"



def _json(html: str, element_id: str) -> dict:
    match = re.search(rf'<script type="application/json" id="{element_id}">(.*?)</script>', html, re.S)
    assert match, f"no #{element_id}"
    return json.loads(match.group(1))


def _last_month() -> str:
    first = floor_hour(utcnow()).astimezone(get_settings().tz).replace(day=1, hour=0)
    return (first - timedelta(days=1)).strftime("%Y-%m")


def _this_month(session, version: int, gpus: int) -> list[datetime]:
    hours = this_month_hours()
    for hour in hours:
        add_hour(session, hour=hour, version=version, gpus=gpus, breaches=())
    return hours


def _october(session, version: int, gpus: int) -> None:
    for hour in month_hours("2026-10"):
        add_hour(session, hour=hour, version=version, gpus=gpus, breaches=())


# The cards follow the chosen range: 1-30 October against the 30 days before it, all of September.
RANGE = "/?start=2026-10-01&end=2026-10-30"


async def test_overview_marks_a_partial_baseline_and_compares_with_none(client, session):
    v = store_policy(session)
    for hour in month_hours("2026-09")[:3]:  # the 30 days before the range: 3 hours of 720
        add_hour(session, hour=hour, version=v.id, breaches=())
    _october(session, v.id, gpus=4)
    session.commit()
    sign_in(client, session, make_user(session, "fin", "finance"))
    page = (await client.get(RANGE)).text
    expected = len(month_hours("2026-09"))
    assert "Fleet cost 2026-10-01 – 2026-10-30" in page and "the 30 days before (2026-09)" in page
    assert f"3 of {expected} hours" in page  # the badge beside the earlier days' cost and utilisation
    assert f"No comparison: 2026-09 holds only 3 of {expected} hours." in page
    assert "cost per ingested hour" not in page and "+35" not in page


async def test_overview_compares_cost_per_hour_with_a_whole_baseline_and_an_increase_is_not_green(client, session):
    v = store_policy(session)
    fill_month(session, "2026-09", v.id)  # 2 GPUs every hour
    _october(session, v.id, gpus=4)  # twice the GPUs: twice the cost per hour
    session.commit()
    sign_in(client, session, make_user(session, "fin", "finance"))
    page = (await client.get(RANGE)).text
    change = re.search(r'<span class="stat-sub" id="cost-change">(.*?)</span>\s*</div>', page, re.S).group(1)
    assert 'class="change-up"' in change and "▲ +100.0%" in change and "cost per ingested hour" in change
    assert "No comparison" not in page
    # Another range, other figures: the whole of October is priced, and compared with the 31 days before it.
    whole = (await client.get("/?start=2026-10-01&end=2026-10-31")).text
    assert "Fleet cost 2026-10<" in whole and "the 31 days before (2026-08-31 – 2026-09-30)" in whole
    css = CSS.read_text()
    up = re.search(r"\.change-up \{ color: (#[0-9a-f]+)", css).group(1)
    down = re.search(r"\.change-down \{ color: (#[0-9a-f]+)", css).group(1)
    assert up != down and up.lower() != "#1a7f37"  # an increase in cost is never the "good" green


def test_hourly_cost_change_needs_a_whole_baseline():
    from decimal import Decimal

    from app.metrics.usage_read import Coverage

    whole, partial = Coverage(744, 744, 0, 744), Coverage(744, 3, 0, 744)
    now = Coverage(10, 10, 0, 720)
    change = overview_panels.hourly_cost_change
    assert change(Decimal("20"), now, Decimal("744"), whole) == Decimal(1)
    assert change(Decimal("20"), now, Decimal("3"), partial) is None
    assert change(None, now, Decimal("744"), whole) is None and change(Decimal("1"), now, None, whole) is None


async def test_overview_chart_draws_days_without_ingested_hours_as_null(client, session):
    v = store_policy(session)
    fill_month(session, "2026-10", v.id, skip=set(range(24, 48)))  # 2 October: nothing ingested
    session.commit()
    sign_in(client, session, make_user(session, "vic", "viewer"))
    page = (await client.get("/?start=2026-10-01&end=2026-10-03")).text
    daily = _json(page, "overview-daily-data")
    assert daily["labels"] == ["2026-10-01", "2026-10-02", "2026-10-03"]
    for dataset in daily["datasets"]:
        first, missing, third = dataset["data"]
        assert missing is None and first is not None and third is not None, dataset
    training = next(d for d in daily["datasets"] if d["label"] == "training")
    assert training["data"][2] == pytest.approx(1.2 * 24)
    assert "48 of 72 hours" in page  # the range's badge


async def test_tenants_page_suppresses_change_against_a_partial_baseline_and_gaps_its_sparklines(client, session):
    v = store_policy(session)
    # 8-14 October is shown; 1-7 October is its baseline, with only 3 of its 168 hours ingested
    fill_month(session, "2026-10", v.id, skip=set(range(3, 7 * 24)) | set(range(9 * 24, 10 * 24)))
    session.commit()
    sign_in(client, session, make_user(session, "vic", "viewer"))
    page = (await client.get("/tenants?start=2026-10-08&end=2026-10-14")).text
    assert 'id="baseline-partial"' in page and "hold only 3 of 168 ingested hours" in page
    assert 'class="change-' not in page  # no change figure in any row
    assert "144 of 168 hours" in page  # the range's own badge (10 October missing)
    path = re.search(r'aria-label="GPU-hours per day for vision; gaps are days with no ingested hour"><path d="([^"]+)"',
                     page).group(1)
    assert path.count("M") == 2  # 8-9 October, a gap, 11-14 October


async def test_tenants_page_shows_change_against_a_whole_baseline(client, session):
    v = store_policy(session)
    fill_month(session, "2026-10", v.id, skip=set(range(9 * 24, 10 * 24)))
    session.commit()
    sign_in(client, session, make_user(session, "vic", "viewer"))
    page = (await client.get("/tenants?start=2026-10-08&end=2026-10-14")).text
    assert 'id="baseline-partial"' not in page
    # 6 days against 7: a decrease, shown as such
    assert '<span class="change-down">▼ -14.3%</span>' in page


async def test_tenant_page_chart_nulls_and_invoice_coverage(client, session):
    from app.billing import periods

    v = store_policy(session)
    fill_month(session, "2026-10", v.id, skip=set(range(24, 48)))
    add_hour(session, hour=datetime(2026, 9, 3, tzinfo=UTC), version=v.id)
    add_hour(session, hour=datetime(2026, 9, 3, 1, tzinfo=UTC), version=v.id, breaches=())
    periods.rate(session=session, period="2026-09", actor="fin")
    session.commit()
    sign_in(client, session, make_user(session, "vic", "viewer"))
    page = (await client.get("/tenants/vision?start=2026-10-01&end=2026-10-03")).text
    chart = _json(page, "tenant-usage-data")
    assert [d["data"][1] for d in chart["datasets"]] == [None, None]
    assert all(d["data"][0] is not None for d in chart["datasets"])
    assert "2 of 720 hours" in page  # the September invoice covers 2 of its 720 hours


def test_sparkline_breaks_at_missing_days():
    from decimal import Decimal

    assert sparkline([]) == "" and sparkline([None, None]) == ""
    d = sparkline([Decimal(1), None, Decimal(2), Decimal(2)], width=30)
    assert d.startswith("M0.0,") and " h0 M20.0," in d and " L30.0," in d  # a dot, a gap, a line
    assert "0.0,26.0" not in d  # the missing day is not drawn at zero (y = 26)


async def test_sla_chart_draws_days_without_ingested_hours_as_null(client, session):
    v = store_policy(session)
    fill_month(session, "2026-10", v.id, skip=set(range(24, 48)))  # the first hour carries 2 breach minutes
    session.commit()
    sign_in(client, session, make_user(session, "vic", "viewer"))
    page = (await client.get("/sla?start=2026-10-01&end=2026-10-03")).text
    [dataset] = _json(page, "sla-daily-data")["datasets"]
    assert dataset["label"] == "search-chat" and dataset["data"] == [2, None, 0]


async def test_a_short_range_is_charted_by_hour_with_gaps(client, session):
    v = store_policy(session)
    fill_month(session, "2026-10", v.id, skip={24 + 5})  # 2 October, the 6th hour of the month's second day: not ingested
    session.commit()
    sign_in(client, session, make_user(session, "vic", "viewer"))
    page = (await client.get("/?start=2026-10-02&end=2026-10-02")).text
    assert "GPU-hours by class per hour" in page
    daily = _json(page, "overview-daily-data")
    hours = month_hours("2026-10")[24:48]  # the billing time zone's 2 October
    assert len(daily["labels"]) == 24 and daily["labels"][0] == hours[0].astimezone(get_settings().tz).strftime("%m-%d %H:%M")
    training = next(d for d in daily["datasets"] if d["label"] == "training")
    assert training["data"][5] is None and all(x == pytest.approx(1.2) for i, x in enumerate(training["data"]) if i != 5)
    week = (await client.get("/?start=2026-10-01&end=2026-10-07")).text
    assert "GPU-hours by class per day" in week and len(_json(week, "overview-daily-data")["labels"]) == 7
