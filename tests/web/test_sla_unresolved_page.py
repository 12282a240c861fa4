"""The SLA page shows minutes the histogram could not resolve, next to breach minutes."""

from __future__ import annotations

import pytest

from app.metrics.models import SlaUnresolvedHour
from tests.support.routes import make_user, sign_in

pytestmark = pytest.mark.anyio


async def test_sla_page_counts_unresolved_minutes(client, session, seeded):
    for hour, minutes in zip(seeded["hours"], (7, 5)):
        session.add(SlaUnresolvedHour(hour=hour, service="search-chat", service_tenant="search", pool="mixed-a100",
                                      minutes=minutes))
    session.commit()
    sign_in(client, session, make_user(session, "uv", "viewer"))
    page = await client.get(f"/sla?{seeded['query']}")
    assert page.status_code == 200, page.text
    assert "Unresolved minutes" in page.text
    assert 'not billed; put the red line on a bucket boundary">12</span>' in page.text
