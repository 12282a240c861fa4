"""The change page's invoice impact: money with its currency, and an increase marked, never green."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from tests.support.billing import add_hour
from tests.support.review import draft, seed, set_price
from tests.support.routes import make_user, sign_in

pytestmark = pytest.mark.anyio


async def test_invoice_impact_shows_currency_and_marks_increases(client, session):
    v1 = seed(session)
    start = datetime(2026, 10, 7, 12, tzinfo=UTC)
    for i in range(3):
        add_hour(session, hour=start + timedelta(hours=i), version=v1.id, breaches=())
    change = draft(session, v1, edit=set_price("0.40"))  # dearer energy: every account pays more
    session.commit()
    sign_in(client, session, make_user(session, "fin", "finance"))
    page = await client.get(f"/policy/changes/{change.id}?month=2026-10")
    assert page.status_code == 200, page.text
    impact = page.text.split('id="price-title"', 1)[1].split("</table>", 1)[0]
    rows = impact.split("<tr>")[2:]  # after the header row
    assert rows and all(row.count(" USD</td>") == 3 for row in rows)  # before, after, difference
    assert all('<td class="change-up">+' in row for row in rows)  # each increase marked, never green
