"""One "carried by the platform" figure (issue 30 item 4): the period page, the period PDF and the API agree.

What the platform carries is the part of the pools' cost C billed to no tenant: the platform balance
(SPEC 5.5: idle, dark-time discount, reserved-but-unused, rounding) plus the use no tenant claims, billed to
the platform (SPEC 5.6). The month is seeded with unallocated use so the balance alone is a different figure,
and over a whole month so the money runs into thousands (separators on every figure of the PDF).
"""

from __future__ import annotations

import re
import subprocess
from decimal import Decimal

from app.core.db import unit_of_work
from app.http.numbers import money
from tests.support.billing import EXAMPLE_USAGE, fill_month, store_policy

HTML = {"accept": "text/html"}
USAGE = [*EXAMPLE_USAGE, ("unallocated", "unallocated", False, 720)]


def _pdf_text(data: bytes) -> str:
    return subprocess.run(["pdftotext", "-layout", "-", "-"], input=data, check=True, capture_output=True).stdout.decode()


def _rated_month(api, fresh_engine, *, usage=USAGE, gpus: int = 2) -> None:
    with unit_of_work(fresh_engine) as s:
        v = store_policy(s)
        fill_month(s, "2026-10", v.id, usage=usage, gpus=gpus)
    assert api.post("/billing/2026-10/rate", headers=HTML, data={}).status_code == 303


def test_page_pdf_and_api_show_one_carried_by_the_platform_figure(api, fresh_engine):
    _rated_month(api, fresh_engine)
    statement = api.get("/api/v1/periods/2026-10/statement").json()
    carried = Decimal(statement["carried_total"])
    balance, unallocated = Decimal(statement["balance_total"]), Decimal(statement["unallocated"]["amount"])
    assert unallocated > 0 and carried == balance + unallocated != balance
    assert Decimal(statement["cost_total"]) == Decimal(statement["tenant_charges_total"]) + carried > 1000
    assert sum(Decimal(p["carried"]) for p in statement["pools"]) == carried
    for p in statement["pools"]:
        assert Decimal(p["cost"]) == Decimal(p["tenant_charges"]) + Decimal(p["carried"])

    page = api.get("/billing/2026-10", headers=HTML).text
    figures = re.findall(r'data-testid="carried-(?:total|pools)">([^<]+)<', page)
    assert figures == [money(carried, "USD")] * 2
    pools = page[page.index('id="statement-pools"'):]
    pools = pools[:pools.index("</table>")]
    assert money(balance) not in pools  # the balance alone is not shown as what the platform carries

    pdf = _pdf_text(api.get("/api/v1/periods/2026-10/export?format=pdf").content)
    statement_page = pdf[pdf.index("Platform statement"):pdf.index("Hours ingested")]
    assert re.search(rf"Carried by the platform\s+{re.escape(money(carried, 'USD'))}", statement_page), statement_page
    assert re.search(rf"All pools\s+{re.escape(money(statement['cost_total'], 'USD'))}\s+"
                     rf"{re.escape(money(statement['tenant_charges_total'], 'USD'))}\s+"
                     rf"{re.escape(money(carried, 'USD'))}\s+conserved", statement_page), statement_page
    assert statement_page.count("Carried by the platform") == 2  # the balance table's total and the pools' column


def test_period_pdf_has_totals_rows_and_thousands_separators(api, fresh_engine):
    # vision also preprocesses a GPU-hour every hour on four GPUs: its own figures run past a thousand
    _rated_month(api, fresh_engine, usage=[*USAGE, ("vision", "preprocessing", False, 3600)], gpus=4)
    invoices = api.get("/api/v1/periods/2026-10/invoices").json()
    total = sum(Decimal(i["total"]) for i in invoices["items"])
    hours = sum(Decimal(i["gpu_hours"]) for i in invoices["items"])
    (vision,) = [i for i in invoices["items"] if i["tenant"] == "vision"]
    assert Decimal(vision["gpu_hours"]) > 1000 and Decimal(vision["total"]) > 1000
    pdf = _pdf_text(api.get("/api/v1/periods/2026-10/export?format=pdf").content)
    assert re.search(rf"All tenants \(3\)\s+{re.escape(f'{hours:,.2f}')}\s+{re.escape(money(total, 'USD'))}", pdf), pdf
    assert re.search(rf"All departments \(3\)\s+3\s+{re.escape(money(total, 'USD'))}", pdf), pdf
    # every figure of four or more digits before its decimal point is grouped ("1,334.00", never "1334.00")
    assert re.findall(r"(?<![\d,.])\d{4,}\.\d+", pdf) == []
    assert re.search(r"\d,\d{3}\.\d{2} USD", pdf)
