"""The live block as rendered: each pool's state by name and meaning (never "busy" with nothing occupied), P99
as a number with its bucket as a footnote, no "within in"; the per-unit bars of the last hours."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from app.core.settings import get_settings
from app.metrics.live import LiveReading, ServiceNow, live_fleet
from app.web import heat
from app.web.fleet_live import _live_html
from tests.metrics.test_live_states import AT, FREE_RTX, QUIET, TRAINING_A100, util
from tests.support.policies import mixed_policy


def _render(series, services) -> str:
    policy = mixed_policy()
    fleet = live_fleet(LiveReading(at=AT, series=series, services=services), policy)
    return _live_html(fleet, policy, get_settings(), "/fleet/live")


def _row(html: str, attr: str, name: str) -> str:
    found = re.search(rf'<tr data-{attr}="{re.escape(name)}".*?</tr>', html, re.S)
    assert found, f"no row for {name}"
    return re.sub(r"\s+", " ", found.group(0))


def test_pool_rows_name_the_state_and_its_meaning():
    latency = [(Decimal("0.3"), 100.0), (Decimal("Infinity"), 100.0)]
    html = _render(FREE_RTX + TRAINING_A100 + [util("gpu-x-99", 0)],
                   {"search-chat": ServiceNow(requests_in_window=QUIET, buckets=latency)})
    rtx = _row(html, "pool", "rtx")
    assert 'data-state="idle"' in rtx and ">Idle<" in rtx and "no unit is occupied" in rtx
    assert "busy" not in rtx.lower() and "inference active" not in rtx  # the old "busy · inference active"
    assert "0 / 1" in rtx
    a100 = _row(html, "pool", "mixed-a100")
    assert 'data-state="dark"' in a100 and ">Dark time<" in a100 and "dark-time rate (× 0.6)" in a100
    assert 'data-state="unpooled"' in _row(html, "pool", "unpooled")


def test_p99_reads_as_a_number_with_the_bucket_as_footnote():
    latency = [(Decimal("0.3"), 100.0), (Decimal("Infinity"), 100.0)]
    html = _render(TRAINING_A100, {"search-chat": ServiceNow(requests_in_window=QUIET, buckets=latency)})
    row = _row(html, "service", "search-chat")
    assert "<strong>≤ 300 ms</strong>" in row and "bucket (0 ms, 300 ms]" in row
    assert "within the red line" in row and "within in" not in html
    assert "the number is the bucket's upper bound" in re.sub(r"\s+", " ", html)


def test_hour_bars_tell_an_empty_hour_from_a_missing_one():
    values = [None, Decimal(0), Decimal("0.5"), Decimal(1)]
    bars = heat.hour_bars(values)
    assert bars["slots"].count("M") == 3  # three ingested hours, the first none
    assert bars["bars"] == "M16,22v-11.0h7v11.0zM24,22v-22.0h7v22.0z"  # 0 % draws no bar, only its slot
    hours = [datetime(2026, 12, 8, 10, tzinfo=UTC) + timedelta(hours=i) for i in range(4)]
    assert heat.hours_text(values, hours, UTC) == "10:00 not ingested, 11:00 0 %, 12:00 50 %, 13:00 100 %"
