"""The live fleet view and the per-unit fleet heatmap on both backends: the embedded simulator as the live
source, drill-down to a GPU and a MIG instance from unit_hour, stored memory peaks, staff only."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest

from app.core.settings import get_settings
from app.core.timeutil import floor_hour, utcnow
from app.metrics.ingest import ingest_hours
from app.metrics.simulator import Simulator
from app.metrics.simulator.policy import seed_policy
from app.policy.service import import_version
from tests.support.routes import make_user, sign_in

pytestmark = pytest.mark.anyio
HOURS = 3


@pytest.fixture
def simulated(session):
    """The simulator the embedded default reads (settings' seed and size), its policy and 3 ingested hours."""
    settings = get_settings()
    sim = Simulator(seed=settings.simulator_seed, gpus=settings.simulator_gpus, scrape_interval_s=30)
    end = floor_hour(utcnow())
    start = end - timedelta(hours=HOURS)
    import_version(session=session, document=seed_policy(sim), actor="test", effective_from=start - timedelta(days=1))
    report = ingest_hours(session=session, source=sim.source(), start=start, end=end, scrape_interval_s=30)
    assert len(report.ok) == HOURS
    session.commit()
    day = start.astimezone(settings.tz).date()
    last = (end - timedelta(seconds=1)).astimezone(settings.tz).date()
    return {"sim": sim, "query": f"start={day.isoformat()}&end={last.isoformat()}", "month": last.strftime("%b")}


async def test_live_view_shows_every_unit_with_holder_and_mig_layout(client, session, simulated):
    sign_in(client, session, make_user(session, "vic", "viewer"))
    page = await client.get("/fleet/live")
    assert page.status_code == 200, page.text
    sim = simulated["sim"]
    assert page.text.count("<tr data-gpu=") == len(sim.topology.units)
    mig = next(g for g in sim.topology.gpus if g.mig)
    # A MIG instance by its profile, held by the inference tenant the schedule puts there, with no drift.
    row = re.search(rf'<tr data-gpu="{mig.index}" data-instance="1" data-uuid="{mig.uuid}".*?</tr>', page.text, re.S)
    assert row and "3g.40gb" in row.group(0) and "<strong>search</strong>" in row.group(0)
    assert "MIG layout running" in page.text and "matches" in page.text and "drift" not in page.text
    assert 'data-service="search-chat"' in page.text and 'data-pool="mixed-a100"' in page.text
    assert 'hx-trigger="every 15s"' in page.text
    # The refresh asks for the live block only.
    part = await client.get("/fleet/live", headers={"HX-Request": "true", "HX-Target": "live"})
    assert part.status_code == 200 and part.text.lstrip().startswith('<div id="live"') and "<h1>" not in part.text


async def test_live_view_is_staff_only(client, session, simulated):
    sign_in(client, session, make_user(session, "tm", "tenant", tenants=["search"]))
    assert (await client.get("/fleet/live")).status_code == 403


async def test_heatmap_goes_down_to_a_gpu_and_its_mig_instances(client, session, simulated):
    sign_in(client, session, make_user(session, "vic", "viewer"))
    sim, query = simulated["sim"], simulated["query"]
    fleet = await client.get(f"/fleet?{query}")
    assert fleet.status_code == 200 and "/fleet?" in fleet.text and "pool=mixed-a100" in fleet.text
    # Continuous scale: cells carry their own colour and a text colour picked for contrast.
    assert re.search(r'style="background:#[0-9a-f]{6};color:#(000000|ffffff)"', fleet.text)
    assert "linear-gradient" in fleet.text
    assert re.search(rf'<span class="heat-month">(\d\d )?{simulated["month"]}</span>', fleet.text)  # headers carry the month
    pool = await client.get(f"/fleet?{query}&pool=mixed-a100")
    assert pool.status_code == 200
    mig = next(g for g in sim.topology.gpus if g.mig)
    gpus = sum(len(n.gpus) for n in sim.topology.nodes if n.pool == "mixed-a100")
    assert pool.text.count('<div class="heat-row">') == gpus
    assert f"gpu={mig.uuid}" in pool.text and "search" in pool.text
    gpu = await client.get(f"/fleet?{query}&pool=mixed-a100&gpu={mig.uuid}")
    assert gpu.status_code == 200
    assert gpu.text.count('<div class="heat-row">') == len(mig.units)
    assert "GI 1 · 3g.40gb" in gpu.text and "GI 2 · 3g.40gb" in gpu.text
    # An inference instance is held the whole time: 100 % every hour.
    assert gpu.text.count(": 100.0%") >= HOURS
    unknown = await client.get(f"/fleet?{query}&pool=no-such-pool")
    assert unknown.status_code == 200 and "No unit-hours ingested" in unknown.text


async def test_a_large_pool_is_shown_a_page_of_nodes_at_a_time(client, session, simulated, monkeypatch):
    """Each page lists the GPUs of its nodes only; the pages together list every GPU once; links keep the range,
    the pool and the cluster; a page past the end shows the last; page 0 is refused with a readable error."""
    from app.web import fleet

    monkeypatch.setattr(fleet, "NODES_PER_PAGE", 1)
    sign_in(client, session, make_user(session, "vic", "viewer"))
    sim, query = simulated["sim"], simulated["query"]
    nodes = sorted((n for n in sim.topology.nodes if n.pool == "mixed-a100"), key=lambda n: n.name)
    assert len(nodes) >= 2, "the simulated pool needs two nodes for this test"
    cluster = get_settings().cluster_names()[0]
    seen: list[str] = []
    for number in range(1, len(nodes) + 1):
        page = await client.get(f"/fleet?{query}&pool=mixed-a100&cluster={cluster}&page={number}")
        assert page.status_code == 200
        rows = re.findall(r'<div class="heat-row"><a href="[^"]*gpu=([^&"]+)', page.text)
        assert rows and {g.uuid for g in nodes[number - 1].gpus} == set(rows)
        assert f"page {number} of {len(nodes)}" in page.text
        seen += rows
        if number < len(nodes):
            assert re.search(rf'href="/fleet\?start=[^"]*pool=mixed-a100&amp;cluster={cluster}&amp;page={number + 1}" rel="next"',
                             page.text)
    assert sorted(seen) == sorted(g.uuid for n in nodes for g in n.gpus)
    last = await client.get(f"/fleet?{query}&pool=mixed-a100&page=999")
    assert f"page {len(nodes)} of {len(nodes)}" in last.text and 'rel="next"' not in last.text
    assert (await client.get(f"/fleet?{query}&pool=mixed-a100&page=0")).status_code == 422


async def test_memory_headroom_is_measured_from_stored_peaks(client, session, simulated):
    sign_in(client, session, make_user(session, "vic", "viewer"))
    page = await client.get(f"/fleet?{simulated['query']}")
    table = page.text[page.text.index('id="mem-title"'):]
    assert "no measurement" not in table
    # search's replicas hold 78 % of their 40,960 MiB instances: 8 on the MIG node at once.
    assert f"{8 * (40960 * 78 // 100):,}" in table


async def test_live_view_charts_each_gpu_and_mig_instance_over_the_last_hours(client, session, simulated):
    """One chart per unit row (whole GPU or MIG instance) of the last 12 finished hours from unit_hour: the
    3 ingested hours drawn, the 9 before them named as not ingested; each chart opens the unit's heatmap."""
    sign_in(client, session, make_user(session, "vic", "viewer"))
    page = await client.get("/fleet/live")
    assert page.status_code == 200, page.text
    sim = simulated["sim"]
    assert page.text.count('<svg class="hours"') == len(sim.topology.units)
    assert re.search(r'Last 12 h <span class="muted">to \d\d:00</span></th>', page.text) and 'id="history-note"' in page.text
    mig = next(g for g in sim.topology.gpus if g.mig)
    row = re.search(rf'<tr data-gpu="{mig.index}" data-instance="1" data-uuid="{mig.uuid}".*?</tr>', page.text, re.S)
    assert row, "no row for the MIG instance"
    title = re.search(r"<title>(.*?)</title>", row.group(0)).group(1)
    hours = title.split(", ")
    assert len(hours) == 12 and sum("not ingested" in h for h in hours) == 12 - HOURS
    # the inference tenant holds the instance the whole time: every ingested hour 100 %, drawn as full bars
    assert [h.split(" ", 1)[1] for h in hours[-HOURS:]] == ["100 %"] * HOURS
    assert row.group(0).count("v-22.0h7") == HOURS
    assert f'href="/fleet?pool=mixed-a100&amp;gpu={mig.uuid}"' in row.group(0)
