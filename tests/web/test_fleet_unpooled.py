"""The fleet view shows GPUs on nodes no pool names as their own, unpriced row (both backends)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from app.core.timeutil import floor_hour, utcnow
from tests.support.billing import add_hour, store_policy
from tests.support.routes import make_user, sign_in

pytestmark = pytest.mark.anyio


async def test_fleet_shows_unpooled_gpus_unpriced(client, session):
    version = store_policy(session, effective_from=floor_hour(utcnow()) - timedelta(days=30))
    hour = floor_hour(utcnow()) - timedelta(hours=2)
    add_hour(session, hour=hour, version=version.id)
    add_hour(session, hour=hour, version=version.id, pool="unpooled", gpus=4, model="NVIDIA H100 80GB HBM3",
             usage=[("vision", "training", False, 7200)], breaches=())
    session.commit()
    sign_in(client, session, make_user(session, "vic", "viewer"))
    day = hour.date().isoformat()
    page = await client.get(f"/fleet?start={day}&end={(hour + timedelta(days=1)).date().isoformat()}")
    assert page.status_code == 200, page.text
    assert "4 GPUs · unpriced" in page.text and 'id="unpooled-note"' in page.text
    assert 'title="unpooled' in page.text and ": 50.0%" in page.text  # 7200 of 4 x 3600 GPU-seconds
