"""One answer to "what do I owe": the tenant page, the budgets API and the draft invoice state the same figure for
a month rated just now, and once an hour arrives after the rating the page and API move on while the draft says
it is behind. The portal's clock is the real one: the seeded hours are last month's and this month's up to now."""

from __future__ import annotations

import re
from datetime import timedelta
from decimal import Decimal as D

from sqlalchemy import delete, select, update

from app.billing import periods
from app.core.timeutil import floor_hour, utcnow
from app.metrics.models import IngestHour, PoolHourModel, PoolHourRollup, UsageRollup
from tests.support.billing import add_hour
from tests.support.budgets import seed_to_now
from tests.support.routes import VISION_MEMBER


def _figure(html: str, testid: str) -> D:
    match = re.search(rf'data-testid="{testid}">([0-9,.\-]+) USD<', html)
    assert match, testid
    return D(match.group(1).replace(",", ""))


def test_the_tenant_page_the_api_and_the_fresh_draft_owe_the_same(session, session_api):
    month, known, _ = seed_to_now(session)
    last = floor_hour(utcnow()) - timedelta(hours=1)
    if known > 2:  # hold the last hour back, to arrive after the rating
        for table in (UsageRollup, PoolHourModel, PoolHourRollup, IngestHour):
            session.execute(delete(table).where(table.hour == last))
    periods.rate(session=session, period=month, actor="fin")
    member = session_api.as_(VISION_MEMBER)
    page = member.get("/tenants/vision")
    assert page.status_code == 200, page.text
    owed = _figure(page.text, "owed-total")
    api = member.get("/api/v1/budgets/tenants/vision").json()["owed"]
    invoice = member.get(f"/billing/{month}/vision")
    assert invoice.status_code == 200
    draft = D(re.search(r'data-testid="total">([0-9,.\-]+)', invoice.text).group(1).replace(",", ""))
    assert owed == D(api["total"]) == D(api["draft_total"]) == draft and api["draft_stale"] is False
    assert D(api["total"]) == D(api["cost"]) + D(api["sla_penalties"]) + D(api["sla_credits"])
    assert D(api["sla_penalties"]) == D("1.00")  # the month's first hour: 2 breach minutes beside search-chat
    assert "It covers the same hours as the figure above" in page.text
    if known <= 2:
        return
    version = session.execute(select(PoolHourRollup.policy_version_id).limit(1)).scalar_one()
    add_hour(session, hour=last, version=version, breaches=())
    session.execute(update(IngestHour).where(IngestHour.hour == last).values(ingested_at=utcnow() + timedelta(seconds=1)))
    page = member.get("/tenants/vision")
    api = member.get("/api/v1/budgets/tenants/vision").json()["owed"]
    assert _figure(page.text, "owed-total") == D(api["total"]) == owed + D("1.30")
    assert D(api["draft_total"]) == draft and api["draft_stale"] is True
    assert "the owed figure above includes them, the draft does not yet" in page.text


def test_the_tenants_list_owes_what_the_tenant_page_owes_over_the_same_days(session, session_api):
    month, _, _ = seed_to_now(session)
    today = utcnow().date()
    member = session_api.as_(VISION_MEMBER)
    owed = _figure(member.get("/tenants/vision").text, "owed-total")
    listed = member.get(f"/tenants?start={month}-01&end={today.isoformat()}").text
    row = re.search(r'href="/tenants/vision\?[^"]*">vision</a></th>\s*<td>([0-9,.\-]+) USD</td>', listed)
    assert row, listed[:2000]
    assert D(row.group(1).replace(",", "")) == owed  # this month's days: the same hours, the same figure
    assert "Spend" not in listed and re.search(r">Owed\s*<", listed)
