"""The first page: GPU-hours per tenant and class from the rollups, a date range, tenant members see only theirs."""

from datetime import timedelta

import pytest

from app.core.settings import get_settings
from app.core.timeutil import utcnow
from tests.support import rollups as builders
from tests.support.routes import make_user, sign_in

pytestmark = pytest.mark.anyio


@pytest.fixture
def rollups(session):
    return builders.overview_rollups(session)


async def test_overview_sums_rollups_per_tenant_and_class(client, session, rollups):
    sign_in(client, session, make_user(session, "vic", "viewer"))
    page = await client.get("/")
    assert page.status_code == 200
    chart = builders.overview_chart(page.text)
    assert chart["labels"] == ["team-a", "team-b"]  # largest first; team-old is outside the 30 days
    assert {d["label"]: d["data"] for d in chart["datasets"]} == {"inference": [6.0, 0.0], "training": [1.5, 3.0]}
    assert "10.5" in page.text  # grand total of GPU-hours in the table (7.5 + 3.0)
    assert "team-old" not in page.text


async def test_date_range_picker_and_htmx_fragment(client, session, rollups):
    sign_in(client, session, make_user(session, "vic", "viewer"))
    today = utcnow().astimezone(get_settings().tz).date()
    start = (today - timedelta(days=60)).isoformat()
    fragment = await client.get(f"/?start={start}&end={today.isoformat()}", headers={"HX-Request": "true"})
    assert fragment.status_code == 200
    assert "<html" not in fragment.text and "team-old" in fragment.text
    assert builders.overview_chart(fragment.text)["labels"] == ["team-old", "team-a", "team-b"]
    bad = await client.get(f"/?start={today.isoformat()}&end={start}")
    assert bad.status_code == 422 and "query.start" in bad.text
    garbage = await client.get("/?start=yesterday")
    assert garbage.status_code == 422 and "query.start" in garbage.text


async def test_tenant_member_sees_only_own_tenants(client, session, rollups):
    sign_in(client, session, make_user(session, "tm", "tenant", tenants=["team-b"]))
    page = await client.get("/")
    assert page.status_code == 200
    assert builders.overview_chart(page.text)["labels"] == ["team-b"]
    assert "team-a" not in page.text
    assert "Admin" not in page.text and "Policy" not in page.text  # nav shows only what the role may open


async def test_empty_range_says_so(client, session):
    sign_in(client, session, make_user(session, "vic", "viewer"))
    page = await client.get("/")
    assert page.status_code == 200
    assert "No GPU usage has been ingested for this range yet" in page.text
    assert 'id="overview-data"' not in page.text


async def test_gaps_are_called_out(client, session, rollups):
    builders.ingest_hour(session, rollups[0] - timedelta(hours=1), status="gap")
    session.commit()
    sign_in(client, session, make_user(session, "vic", "viewer"))
    page = await client.get("/")
    assert "1 hour in this range could not be read from Prometheus yet" in page.text
