"""Dashboard pages (tenants, tenant detail, fleet, SLA) over rollups on both backends: figures, htmx partials,
tenant isolation, date-range validation."""

from __future__ import annotations

import json
import re

import pytest

from tests.support.pages import MIG_NODE
from tests.support.routes import make_user, sign_in

pytestmark = pytest.mark.anyio

def _json(html: str, element_id: str) -> dict:
    match = re.search(rf'<script type="application/json" id="{element_id}">(.*?)</script>', html, re.S)
    assert match, f"no #{element_id} on the page"
    return json.loads(match.group(1))


def _tenant_order(html: str) -> list[str]:
    return re.findall(r'<th scope="row"><a href="/tenants/([a-z0-9-]+)\?', html)


async def test_tenant_list_figures_and_sorting(client, session, seeded):
    sign_in(client, session, make_user(session, "vic", "viewer"))
    page = await client.get(f"/tenants?{seeded['query']}")
    assert page.status_code == 200, page.text
    # GPU-hours per tenant over 3 hours: vision (2520+1800)*3/3600 = 3.6, search 1.5, etl 0.3; largest first.
    assert _tenant_order(page.text) == ["vision", "search", "etl"]
    assert "<td>3.6</td>" in page.text and 'id="range-start"' in page.text  # GPU-hours: one decimal
    # Owed over the range, as the invoice says: vision pays 3 x (0.91 + 0.39 + 1.00 penalty) = 6.90, with its currency.
    assert "6.90 USD" in page.text
    by_name = await client.get(f"/tenants?{seeded['query']}&sort=tenant&dir=asc")
    assert _tenant_order(by_name.text) == ["etl", "search", "vision"]
    by_spend = await client.get(f"/tenants?{seeded['query']}&sort=spend&dir=asc")
    assert _tenant_order(by_spend.text)[0] in ("etl", "search")
    assert _tenant_order(by_spend.text)[-1] == "vision"


async def test_sort_and_filter_partials_return_only_the_table(client, session, seeded):
    sign_in(client, session, make_user(session, "vic", "viewer"))
    headers = {"HX-Request": "true", "HX-Target": "tenant-table"}
    part = await client.get(f"/tenants?{seeded['query']}&sort=tenant&dir=desc", headers=headers)
    assert part.status_code == 200
    assert part.text.lstrip().startswith('<div id="tenant-table"')
    assert "<html" not in part.text and 'id="range-start"' not in part.text and "<h1>" not in part.text
    assert _tenant_order(part.text) == ["vision", "search", "etl"]
    assert 'aria-sort="descending"' in part.text
    filtered = await client.get(f"/tenants?{seeded['query']}&q=VIS", headers=headers)
    assert _tenant_order(filtered.text) == ["vision"] and "1 of 3 tenants" in filtered.text
    nothing = await client.get(f"/tenants?{seeded['query']}&q=zzz", headers=headers)
    assert _tenant_order(nothing.text) == [] and "No tenant matches" in nothing.text
    # The range picker asks for the page content (not just the table).
    content = await client.get(f"/tenants?{seeded['query']}", headers={"HX-Request": "true", "HX-Target": "main"})
    assert "<html" not in content.text and 'id="range-start"' in content.text
    bad_sort = await client.get("/tenants?sort=password", headers=headers)
    assert bad_sort.status_code == 422
    # Back after an htmx navigation: htmx asks for the page again and swaps the whole body with it.
    restore = await client.get(f"/tenants?{seeded['query']}",
                               headers={"HX-Request": "true", "HX-History-Restore-Request": "true"})
    assert "<html" in restore.text and 'class="site-nav"' in restore.text


async def test_tenant_detail(client, session, seeded):
    sign_in(client, session, make_user(session, "vic", "viewer"))
    page = await client.get(f"/tenants/vision?{seeded['query']}")
    assert page.status_code == 200, page.text
    chart = _json(page.text, "tenant-usage-data")
    data = {d["label"]: d["data"] for d in chart["datasets"]}
    assert sum(data["busy"]) == pytest.approx(2.1) and sum(data["dark"]) == pytest.approx(1.5)
    assert f'href="/billing/{seeded["month"]}/vision"' in page.text
    assert "3.00 USD" in page.text  # penalties paid: 2 breach minutes x 0.50 x 3 hours
    # Quota 1 guaranteed GPU; the busiest hour used (2520 + 1800) / 3600 = 1.2 GPUs: borrowing.
    assert "<td>1.2</td>" in page.text and "borrowing" in page.text
    assert "<td>2.1</td>" in page.text or "2.1<" in page.text  # busy GPU-hours, one decimal
    search = await client.get(f"/tenants/search?{seeded['query']}")
    assert "3.00 USD" in search.text  # credits received by the service's tenant
    missing = await client.get("/tenants/nobody")
    assert missing.status_code == 404


async def test_fleet_heatmap_mig_and_memory(client, session, seeded):
    sign_in(client, session, make_user(session, "vic", "viewer"))
    page = await client.get(f"/fleet?{seeded['query']}")
    assert page.status_code == 200, page.text
    # Range of one or two days: hourly cells; each hour used (1800+2520+1800+360)/7200 = 90%.
    assert page.text.count('title="mixed-a100') >= 3
    assert ": 90.0%" in page.text
    assert MIG_NODE in page.text and "2× 3g.40gb" in page.text and "6 / 7" in page.text
    assert "no measurement" in page.text


async def test_sla_page(client, session, seeded):
    sign_in(client, session, make_user(session, "vic", "viewer"))
    page = await client.get(f"/sla?{seeded['query']}")
    assert page.status_code == 200, page.text
    daily = _json(page.text, "sla-daily-data")
    assert [d["label"] for d in daily["datasets"]] == ["search-chat"]
    assert sum(daily["datasets"][0]["data"]) == 6
    p99 = _json(page.text, "sla-p99-data")
    assert p99["datasets"][0]["data"] == [412.5] * 6
    assert p99["datasets"][1]["data"] == [300.0] * 6  # the red line
    assert 'href="/tenants/vision"' in page.text  # co-located training
    assert "3.00 USD" in page.text  # penalties charged in the rated month, with the currency
    assert '<span class="badge badge-error">6</span>' in page.text  # 2 breach minutes x 3 hours, whole minutes
    assert (await client.get("/sla?service=nope")).status_code == 404


async def test_tenant_member_sees_only_own_tenant(client, session, seeded):
    sign_in(client, session, make_user(session, "tm", "tenant", tenants=["search"]))
    listing = await client.get(f"/tenants?{seeded['query']}")
    assert listing.status_code == 200 and _tenant_order(listing.text) == ["search"]
    assert "vision" not in listing.text and "etl" not in listing.text
    assert (await client.get(f"/tenants/search?{seeded['query']}")).status_code == 200
    for other in ("vision", "etl", "no-such-tenant"):
        response = await client.get(f"/tenants/{other}?{seeded['query']}")
        assert response.status_code == 404, other
        assert "vision" not in response.text or other == "vision"
    sla = await client.get(f"/sla?{seeded['query']}")
    assert sla.status_code == 200 and "search-chat" in sla.text
    assert "vision" not in sla.text and "1 other tenant" in sla.text  # co-located, but not named to them
    assert (await client.get("/fleet")).status_code == 403  # fleet-wide capacity is staff-only
    # A training member does not see the inference service's SLA (status, P99, breaches); it sees only the
    # service's name, as on its own invoice line, where it paid penalties for that service's breaches.
    sign_in(client, session, make_user(session, "tv", "tenant", tenants=["vision"]))
    vision_sla = (await client.get(f"/sla?{seeded['query']}")).text
    services, _, paid = vision_sla.partition('id="paid-title"')
    assert "search-chat" not in services
    assert "search" not in paid.replace("search-chat", "")  # the service's owner is never named
    assert (await client.get("/sla?service=search-chat")).status_code == 404


@pytest.mark.parametrize("path", ["/tenants", "/tenants/vision", "/fleet", "/sla"])
async def test_bad_dates_are_a_readable_422(client, session, seeded, path):
    sign_in(client, session, make_user(session, "vic", "viewer"))
    reversed_range = await client.get(f"{path}?start=2026-11-20&end=2026-11-01")
    assert reversed_range.status_code == 422
    assert "query.start" in reversed_range.text and "must be on or before the end date" in reversed_range.text
    garbage = await client.get(f"{path}?start=2026-13-45")
    assert garbage.status_code == 422 and "query.start" in garbage.text
    too_long = await client.get(f"{path}?start=2020-01-01&end=2026-01-01")
    assert too_long.status_code == 422 and "query.end" in too_long.text
    htmx = await client.get(f"{path}?start=2026-11-20&end=2026-11-01", headers={"HX-Request": "true"})
    assert htmx.status_code == 422 and "<html" not in htmx.text and "query.start" in htmx.text
