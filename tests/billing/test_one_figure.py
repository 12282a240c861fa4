"""One definition of each figure: the JSON API, the HTML pages, the CSV/PDF and the dashboard show the same number.

Seeded with the worked example's hour plus a second class for vision on MIG-sized slices (many samples per
GPU-second, busier engines), so the two efficiency weightings that used to coexist give different answers.
"""

from __future__ import annotations

import csv
import io
import re
import subprocess
from datetime import UTC, datetime
from decimal import Decimal

import pytest
from sqlalchemy import update

from app.billing import exports
from app.billing.fleet_cost import month_cost
from app.billing.loader import DocumentCache, load_hours
from app.billing.period import rated_period
from app.billing.rating import rate_period
from app.billing.totals import account_totals
from app.metrics.models import UsageRollup
from tests.support.billing import EXAMPLE_USAGE, add_hour, store_policy
from tests.support.routes import make_user, sign_in

pytestmark = pytest.mark.anyio

OCT1 = datetime(2026, 10, 1, tzinfo=UTC)
NOV1 = datetime(2026, 11, 1, tzinfo=UTC)
MONTH = "2026-10"
# vision also preprocesses 360 GPU-s on 1/7 slices scraped every 15 s: 168 samples at 0.9 engine activity
USAGE = [*EXAMPLE_USAGE, ("vision", "preprocessing", False, 360)]
MIG_SAMPLES, MIG_ACTIVITY = 168, 0.9
# sample-weighted (SPEC 4): (2520/30 x 0.5 + 1800/30 x 0.5 + 168 x 0.9) / (84 + 60 + 168)
EFFICIENCY = (144 * 0.5 + MIG_SAMPLES * MIG_ACTIVITY) / (144 + MIG_SAMPLES)  # exact: shown rounded once
# what the GPU-hour weighting gave: 1.2 GPU-h at 0.5 and 0.1 GPU-h at 0.9
GPU_HOUR_WEIGHTED = round((1.2 * 0.5 + 0.1 * 0.9) / 1.3, 4)


def money(value: str | Decimal) -> str:
    return f"{Decimal(value):,.2f}"


def pdf_text(data: bytes) -> str:
    """The text drawn on the PDF's pages, as pdftotext reads it (the fonts are embedded CID subsets)."""
    return subprocess.run(["pdftotext", "-layout", "-", "-"], input=data, check=True, capture_output=True).stdout.decode()


@pytest.fixture
def finance(client, session):
    version = store_policy(session)
    add_hour(session, hour=OCT1, version=version.id, usage=USAGE)
    session.execute(
        update(UsageRollup)
        .where(UsageRollup.tenant == "vision", UsageRollup.klass == "preprocessing")
        .values(activity_samples=MIG_SAMPLES, activity_sum=MIG_SAMPLES * MIG_ACTIVITY)
    )
    session.commit()
    sign_in(client, session, make_user(session, "fin", "finance"))
    return client


async def _rate(client) -> None:
    page = await client.get("/billing")
    token = re.search(r'name="csrf_token" value="([0-9a-f]+)"', page.text).group(1)
    response = await client.post(f"/billing/{MONTH}/rate", data={"csrf_token": token})
    assert response.status_code in (200, 303), response.text


async def test_fleet_cost_before_and_after_rating_and_on_the_statement(finance, session):
    def dashboard():
        return month_cost(session=session, month=MONTH, start=OCT1, end=NOV1, docs=DocumentCache(session))

    computed = dashboard()
    assert computed.source == "computed" and computed.cost == Decimal("2.60")  # 2 A100s at 1.30 for one hour
    await _rate(finance)
    rated = dashboard()
    statement = (await finance.get(f"/api/v1/periods/{MONTH}/statement")).json()
    assert rated.source == "rated" and rated.cost == computed.cost == Decimal(statement["cost_total"])
    page = (await finance.get(f"/billing/{MONTH}")).text
    assert f"<td>{money(statement['cost_total'])}</td>" in page


async def test_fleet_cost_of_a_month_with_an_unpriced_model_is_not_a_partial_sum(finance, session):
    version = store_policy(session)
    add_hour(session, hour=OCT1.replace(hour=1), version=version.id, model="NVIDIA L40S")
    cost = month_cost(session=session, month=MONTH, start=OCT1, end=NOV1, docs=DocumentCache(session))
    assert cost.cost is None and cost.source == "unpriced"  # rating refuses this month, so C is not shown either


async def test_tenant_month_total_and_department_rollup_everywhere(finance, session):
    await _rate(finance)
    listed = (await finance.get(f"/api/v1/periods/{MONTH}/invoices")).json()
    totals = {i["tenant"]: i["total"] for i in listed["invoices"]}
    departments = {d["department"]: d["total"] for d in listed["departments"]}
    assert totals["vision"] == "2.43"  # 0.91 busy training + 0.39 dark + 0.13 preprocessing + 1.00 penalty
    assert departments == {"consumer": totals["search"], "data": totals["etl"], "research": totals["vision"]}

    row = rated_period(session=session, month=MONTH)
    lines = list(csv.DictReader(io.StringIO(exports.render(session=session, period=row, fmt="csv").decode())))
    amount = next(k for k in lines[0] if k.lower() in ("amount", "billedcost"))
    account = next(k for k in lines[0] if k.lower() in ("account", "tenant"))
    period_page = (await finance.get(f"/billing/{MONTH}")).text
    tenants_page = (await finance.get("/tenants?start=2026-10-01&end=2026-10-31")).text
    pdf = pdf_text(exports.render(session=session, period=row, fmt="pdf"))
    as_billed = account_totals(rate_period(load_hours(session=session, start=OCT1, end=NOV1),
                                           period_start=int(OCT1.timestamp()), period_end=int(NOV1.timestamp())).lines)
    for tenant, total in totals.items():
        invoice = (await finance.get(f"/api/v1/periods/{MONTH}/invoices/{tenant}")).json()
        assert invoice["total"] == total
        assert sum(Decimal(l[amount]) for l in lines if l[account] == tenant) == Decimal(total)
        assert as_billed[tenant] == Decimal(total)  # what the pricing preview calls "before"
        assert f"<td>{money(total)}</td>" in period_page
        assert f'<strong data-testid="total">{money(total)} USD</strong>' in (await finance.get(f"/billing/{MONTH}/{tenant}")).text
        assert f"<td>{money(total)} USD</td>" in tenants_page  # money on pages carries its currency
        detail = (await finance.get(f"/tenants/{tenant}?start=2026-10-01&end=2026-10-31")).text
        assert f"<strong>{money(total)} USD</strong>" in detail
        assert money(total) in pdf
    for total in departments.values():
        assert f"<td>{money(total)}</td>" in period_page


async def test_efficiency_is_sample_weighted_everywhere(finance, session):
    assert EFFICIENCY != GPU_HOUR_WEIGHTED  # the seed tells the two definitions apart
    await _rate(finance)
    invoice = (await finance.get(f"/api/v1/periods/{MONTH}/invoices/vision")).json()
    usage = (await finance.get("/api/v1/usage", params={"start": "2026-10-01T00:00:00Z", "end": "2026-11-01T00:00:00Z"})).json()
    assert invoice["efficiency"] == pytest.approx(EFFICIENCY, rel=1e-12)
    assert next(r for r in usage["rows"] if r["key"] == "vision")["efficiency"] == pytest.approx(EFFICIENCY, rel=1e-12)
    shown = f"{EFFICIENCY:.1%}"
    assert f"efficiency: {shown}" in (await finance.get(f"/billing/{MONTH}/vision")).text
    assert f"<td>{shown}</td>" in (await finance.get("/tenants?start=2026-10-01&end=2026-10-31&q=vision")).text
    row = rated_period(session=session, month=MONTH)
    assert shown in pdf_text(exports.render_invoice(session=session, period=row, tenant="vision"))


async def test_invoices_rated_before_sample_counts_keep_the_figure_they_were_issued_with(finance, session):
    """Rows rated before migration 0008 carry no sample count: a closed period's exports must keep
    matching the hashes stored when it closed, so such rows keep the GPU-hour weighting they were issued with."""
    from app.billing.models import TenantUsageRecord

    await _rate(finance)
    session.exec(update(TenantUsageRecord).values(activity_samples=0))  # what 0008 leaves on older rows
    session.commit()
    invoice = (await finance.get(f"/api/v1/periods/{MONTH}/invoices/vision")).json()
    assert invoice["efficiency"] == GPU_HOUR_WEIGHTED
    await _rate(finance)  # re-rating a draft stores the sample counts: the one definition again
    assert (await finance.get(f"/api/v1/periods/{MONTH}/invoices/vision")).json()["efficiency"] == pytest.approx(EFFICIENCY, rel=1e-12)
