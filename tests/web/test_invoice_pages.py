"""The invoice page explains itself (issue 12): groups, rates, the multiplier, the per-day drill-down and the SLA
evidence a tenant member may read (its own figures only)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from urllib.parse import quote

from app.core.db import unit_of_work
from tests.support.billing import add_hour, store_policy
from tests.support.routes import FINANCE, VISION_MEMBER

OCT1 = datetime(2026, 10, 1, tzinfo=UTC)
HTML = {"accept": "text/html"}


def _rated(api, fresh_engine):
    with unit_of_work(fresh_engine) as s:
        v = store_policy(s)
        add_hour(s, hour=OCT1, version=v.id, breaches=(("search-chat", "search", 2, (("vision", 60), ("etl", 30))),))
        add_hour(s, hour=OCT1 + timedelta(hours=1), version=v.id, breaches=(("search-chat", "search", 1, ()),))
    assert api.post("/billing/2026-10/rate", headers=HTML, data={}).status_code == 303


def test_tenant_reads_its_invoice_drills_down_and_follows_its_penalty(api, fresh_engine):
    _rated(api, fresh_engine)
    api.as_(VISION_MEMBER)
    page = api.get("/billing/2026-10/vision", headers=HTML).text
    groups = re.findall(r'<tbody role="rowgroup" data-group="([a-z_]+)">', page)
    assert groups == ["usage_busy", "usage_dark", "sla"]
    assert "Draft total, not yet due" in page and "Total due" not in page
    assert "2026-10-01 to 2026-10-31" in page and "2 of 744 hours" in page and ">partial<" in page
    assert 'data-testid="multiplier">0.6<' in page and 'data-testid="discount">0.52 USD<' in page
    busy = re.search(r'data-line-id="([^"]+)" data-kind="usage_busy" data-quantity="([^"]+)"\s+data-rate="([^"]+)" '
                     r'data-amount="([^"]+)"', page)
    line_id, quantity, rate, amount = busy.groups()
    assert (quantity, rate, amount) == ("1.400000", "1.3000", "1.82")

    days = api.get(f"/billing/2026-10/vision/days?line={quote(line_id)}", headers={**HTML, "HX-Request": "true"})
    assert days.status_code == 200 and "<html" not in days.text and 'data-adds-up="true"' in days.text
    assert "2026-10-01" in days.text and "1.82 USD" in days.text

    assert "/sla/paid?period=2026-10&amp;tenant=vision&amp;service=search-chat" in page
    evidence = api.get("/sla/paid?period=2026-10&tenant=vision&service=search-chat", headers=HTML)
    assert evidence.status_code == 200
    text = evidence.text
    assert text.count('class="paid-minute"') == 2 and 'data-gpu-seconds="60' in text and "shared" in text
    assert "etl" not in text and ">search<" not in text and "/tenants/search" not in text
    assert 'data-testid="line">1.333333 breach-minute shares, 0.67 USD<' in text

    # another tenant's line, drill-down or evidence: 404, never its figures
    assert api.get("/billing/2026-10/search/days?line=x", headers=HTML).status_code == 404
    assert api.get(f"/billing/2026-10/vision/days?line={quote(line_id.replace('vision', 'search'))}",
                   headers=HTML).status_code == 404
    assert api.get("/sla/paid?period=2026-10&tenant=etl&service=search-chat", headers=HTML).status_code == 404
    assert api.get("/sla/paid?period=2026-10&tenant=vision&service=nope", headers=HTML).status_code == 404
    assert api.get("/sla/paid?period=2026-13&tenant=vision&service=search-chat", headers=HTML).status_code == 422

    listed = api.get("/sla/paid", headers=HTML)  # no line named: the penalties the viewer's tenants paid
    assert listed.status_code == 200 and "/sla/paid?period=2026-10&amp;tenant=vision&amp;service=search-chat" in listed.text
    sla = api.get("/sla?start=2026-10-01&end=2026-10-31", headers=HTML).text
    assert "SLA penalties your tenants paid" in sla and "/sla/paid?period=2026-10" in sla


def test_statement_explains_breach_minutes_the_credit_does_not_cover(api, fresh_engine):
    _rated(api, fresh_engine)
    api.as_(FINANCE)
    page = api.get("/billing/2026-10", headers=HTML).text
    assert "search-chat (mixed-a100):\n    3 breach minutes = 2 credited\n    + 1 unattributed" in page
