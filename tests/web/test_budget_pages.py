"""The Budgets page (finance, admin), the tenant page's cost/forecast/budget chart and the overview's forecast panel."""

from __future__ import annotations

import json
import re
from decimal import Decimal as D

import pytest

from app.billing import budgets
from app.web.charts import CLASS_COLOURS, THRESHOLD_COLOUR
from tests.support.billing import store_policy
from tests.support.budgets import seed_to_now
from tests.support.routes import make_user, sign_in

pytestmark = pytest.mark.anyio



def chart(html: str, script_id: str) -> dict:
    match = re.search(rf'<script type="application/json" id="{script_id}">(.*?)</script>', html, re.S)
    assert match, script_id
    return json.loads(match.group(1))


async def test_finance_sets_budgets_and_sees_errors_beside_the_field(client, session):
    store_policy(session)
    token = sign_in(client, session, make_user(session, "fin", "finance"))
    page = await client.get("/budgets")
    assert page.status_code == 200 and 'href="/budgets"' in page.text  # in the navigation for finance
    assert all(f'action="/budgets/tenants/{t}"' in page.text for t in ("vision", "search", "etl"))
    assert 'action="/budgets/departments/research"' in page.text
    saved = await client.post("/budgets/tenants/vision", data={"amount": "1,500.00", "thresholds": "60, 90 %",
                                                               "csrf_token": token})
    assert saved.status_code == 303 and saved.headers["location"] == "/budgets"
    budget = budgets.get_budget(session=session, scope="tenant", name="vision")
    assert (budget.amount, budget.threshold_list) == (D("1500.00"), [60, 90])
    bad = await client.post("/budgets/tenants/vision", data={"amount": "12.345", "thresholds": "90, 60",
                                                             "csrf_token": token})
    assert bad.status_code == 422
    assert 'value="12.345"' in bad.text and 'value="90, 60"' in bad.text  # the input kept
    assert bad.text.count('aria-invalid="true"') == 2 and "2 decimal places" in bad.text and "go up" in bad.text
    words = await client.post("/budgets/departments/research", data={"amount": "100", "thresholds": "half",
                                                                     "csrf_token": token})
    assert words.status_code == 422 and "not a whole percent" in words.text
    assert budgets.get_budget(session=session, scope="department", name="research") is None
    assert budgets.get_budget(session=session, scope="tenant", name="vision").amount == D("1500.00")
    removed = await client.post("/budgets/tenants/vision/delete", data={"csrf_token": token},
                                headers={"HX-Request": "true"})
    assert removed.status_code == 204 and removed.headers["HX-Redirect"] == "/budgets"
    assert budgets.get_budget(session=session, scope="tenant", name="vision") is None
    assert (await client.post("/budgets/tenants/nobody", data={"amount": "1", "csrf_token": token})).status_code == 404


async def test_only_finance_and_admins_get_the_page_and_its_link(client, session):
    store_policy(session)
    sign_in(client, session, make_user(session, "vic", "viewer"))
    assert 'href="/budgets"' not in (await client.get("/")).text
    assert (await client.get("/budgets")).status_code == 403
    sign_in(client, session, make_user(session, "root", "admin"))
    assert 'href="/budgets"' in (await client.get("/")).text


async def test_the_tenant_page_charts_cost_forecast_budget_and_thresholds(client, session):
    month, known, total = seed_to_now(session)
    budgets.set_budget(session=session, scope="tenant", name="vision", amount="1200", thresholds=[50, 80, 100],
                       actor="fin")
    sign_in(client, session, make_user(session, "member", "tenant", tenants=["vision"]))  # members see their own
    page = (await client.get("/tenants/vision")).text
    assert f"This month ({month}): what vision owes, forecast and budget" in page
    assert f"{D('1.30') * total:,.2f} USD" in page  # the forecast month end
    data = chart(page, "tenant-budget-data")
    labels = [d["label"] for d in data["datasets"]]
    assert labels == ["cost so far", "forecast", "budget", "50 % of budget", "80 % of budget"]
    actual, forecast, budget, *thresholds = data["datasets"]
    training = CLASS_COLOURS["training"]  # vision trains: its class colour, solid and dashed
    assert actual["color"] == forecast["color"] == training and forecast["borderDash"]
    assert budget["color"] == CLASS_COLOURS["platform"] and {t["color"] for t in thresholds} == {THRESHOLD_COLOUR}
    assert budget["data"] == [1200.0] * len(data["labels"]) and thresholds[0]["data"][0] == 600.0
    assert len(data["labels"]) == total // 24
    assert forecast["data"][-1] == pytest.approx(float(D("1.30") * total))
    known_days = [v for v in actual["data"] if v is not None]
    assert known_days and known_days[-1] == pytest.approx(float(D("1.30") * known))
    assert 'data-kind="cumulative"' in page and 'data-unit="USD"' in page


async def test_a_tenant_without_a_budget_shows_its_forecast_and_where_to_set_one(client, session):
    seed_to_now(session)
    sign_in(client, session, make_user(session, "fin", "finance"))
    page = (await client.get("/tenants/etl")).text
    assert "No budget set" in page and 'href="/budgets">set one' in page
    assert [d["label"] for d in chart(page, "tenant-budget-data")["datasets"]] == ["cost so far", "forecast"]


async def test_the_overview_panel_lists_budgets_first_and_members_see_their_own(client, session):
    _, known, _ = seed_to_now(session)
    budgets.set_budget(session=session, scope="tenant", name="etl", amount="50", thresholds=None, actor="fin")
    state = "over budget" if D("0.13") * known >= 50 else "forecast over budget"  # 96.72 by the month's end
    sign_in(client, session, make_user(session, "fin", "finance"))
    page = (await client.get("/")).text
    panel = page[page.index('id="panel-forecast"'):]
    panel = panel[:panel.index("</section>")]
    names = re.findall(r'<th scope="row">(?:<a [^>]*>)?([a-z]+)', panel)
    assert names[0] == "etl" and f">{state}</span>" in panel  # the only budget, and over it by forecast
    assert set(names) >= {"etl", "search", "vision"} and 'href="/budgets">All budgets' in panel
    sign_in(client, session, make_user(session, "member", "tenant", tenants=["vision"]))
    member = (await client.get("/")).text
    panel = member[member.index('id="panel-forecast"'):]
    panel = panel[:panel.index("</section>")]
    assert re.findall(r'<th scope="row">(?:<a [^>]*>)?([a-z]+)', panel) == ["vision"]
    assert "All budgets" not in panel
