"""GPU-hours of a tenant have one definition: /api/v1/usage, the overview, the tenants page and the invoice agree.

The invoice's definition won: each (tenant, pool, class, busy|dark) cell rounded to the micro-hour, then
added. Three cells of one GPU-second each are 3 x 0.000278 = 0.000834 GPU-hours on the invoice; the usage
API used to round the sum (0.000833) and the overview to the milli-hour (0.001 and 0.000).
"""

from datetime import UTC, date, datetime
from decimal import Decimal

import pytest

from app.billing.periods import rate
from app.metrics import usage_read
from app.metrics.date_ranges import DateRange
from app.web import tenants_table
from tests.support import rollups as builders
from tests.support.billing import add_hour, store_policy
from tests.support.routes import make_user, sign_in

pytestmark = pytest.mark.anyio

HOUR = datetime(2026, 10, 15, 12, tzinfo=UTC)
ODD_USAGE = [("vision", "training", False, 1), ("vision", "training", True, 1), ("vision", "preprocessing", False, 1)]
INVOICED = Decimal("0.000834")


@pytest.fixture
def rated_month(session):
    version = store_policy(session)
    add_hour(session, hour=HOUR, version=version.id, usage=ODD_USAGE, breaches=())
    rate(session=session, period="2026-10", actor="test")
    session.commit()


async def test_gpu_hours_agree_on_the_api_the_pages_and_the_invoice(client, session, rated_month):
    sign_in(client, session, make_user(session, "fiona", "finance"))
    invoice = (await client.get("/api/v1/periods/2026-10/invoices/vision")).json()
    assert Decimal(invoice["gpu_hours_total"]) == INVOICED

    usage = (await client.get("/api/v1/usage", params={"start": "2026-10-01T00:00:00Z",
                                                       "end": "2026-11-01T00:00:00Z"})).json()
    assert {r["key"]: Decimal(r["gpu_hours"]) for r in usage["rows"]} == {"vision": INVOICED}

    page = await client.get("/?start=2026-10-01&end=2026-10-31")
    chart = builders.overview_chart(page.text)
    assert chart["labels"] == ["vision"]
    assert sum(Decimal(str(d["data"][0])) for d in chart["datasets"]) == INVOICED

    period = DateRange(start=date(2026, 10, 1), end=date(2026, 10, 31), tz=UTC)
    [row] = tenants_table.tenant_rows(session=session, period=period, tenants=None, spend=None)
    assert row.gpu_hours == INVOICED
    tenants_page = await client.get("/tenants?start=2026-10-01&end=2026-10-31")
    assert tenants_page.status_code == 200 and "vision" in tenants_page.text


def test_usage_cells_round_each_cell_then_add(session, rated_month):
    cells = usage_read.usage_cells(session=session, start=HOUR, end=datetime(2026, 10, 16, tzinfo=UTC), tenants=None)
    assert [(c.klass, c.busy_gpu_hours, c.dark_gpu_hours) for c in cells] == [
        ("preprocessing", Decimal("0.000278"), Decimal(0)), ("training", Decimal("0.000278"), Decimal("0.000278"))]
    assert usage_read.usage_cells(session=session, start=HOUR, end=datetime(2026, 10, 16, tzinfo=UTC),
                                  tenants=frozenset({"search"})) == []
