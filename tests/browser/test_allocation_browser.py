"""The allocation explorer in headless chromium: its CSV is its table (page rounding accounted for) and the API's
rows; a tenant member sees only its own rows in page, CSV and API; the overview and tenant pages link the CSV."""

from __future__ import annotations

import csv
from datetime import date, timedelta
from decimal import Decimal

import pytest

from tests.support.browser import SHOTS

pytestmark = pytest.mark.browser

ROWS_JS = """() => Array.from(document.querySelectorAll('#alloc-table tbody tr[data-kind], #alloc-table tfoot tr'))
    .map(tr => ({kind: tr.dataset.kind, cells: Array.from(tr.children).map(c => c.textContent.trim())}))"""
FIGURES = ("busy_gpu_hours", "dark_gpu_hours", "gpu_hours", "efficiency", "cost")


def month_window(month: str) -> tuple[str, str]:
    year, mon = map(int, month.split("-"))
    first = date(year, mon, 1)
    last = date(year + (mon == 12), mon % 12 + 1, 1) - timedelta(days=1)
    return first.isoformat(), last.isoformat()


def download(page, selector: str) -> list[dict]:
    """Click a CSV link and parse the file the browser saved."""
    with page.expect_download() as info:
        page.click(selector)
    path = info.value.path()
    with open(path, encoding="utf-8") as f:
        return list(csv.DictReader(f))


def api_rows(page, base: str, window: str, aggregate: str, tenant: str = "") -> list[dict]:
    """The API's rows and totals, asked with the browser's own session cookie."""
    response = page.request.get(f"{base}/api/v1/allocation", params={"window": window, "aggregate": aggregate,
                                                                         "tenant": tenant})
    assert response.ok, response.text()
    body = response.json()
    return [*body["rows"], body["total"]]


def as_page(row: dict, with_tenant: bool) -> list[str]:
    """A CSV row as the page prints it: GPU-hours to 1 decimal, efficiency a rounded percentage, money 2 decimals."""
    name = {"idle": f"idle · {row['name']}", "total": "Total"}.get(row["kind"], row["name"])
    eff = row["efficiency"]
    cells = [name] + ([row["tenant"]] if with_tenant else [])
    cells += [f"{Decimal(row[k]):,.1f}" for k in ("busy_gpu_hours", "dark_gpu_hours", "gpu_hours")]
    cells.append("–" if eff in ("", None) else f"{Decimal(str(eff)) * 100:,.1f}%")
    cells.append(f"{Decimal(row['cost']):,.2f} {row['currency']}")
    return cells


def check_page_csv_api(page, base: str, start: str, end: str, aggregate: str, tenant: str = "") -> list[dict]:
    query = f"start={start}&end={end}&aggregate={aggregate}" + (f"&tenant={tenant}" if tenant else "")
    page.goto(f"{base}/allocation?{query}")
    shown = page.evaluate(ROWS_JS)
    rows = download(page, "#alloc-csv")
    assert len(rows) == len(shown) and rows[-1]["kind"] == "total"
    for csv_row, page_row in zip(rows, shown):
        assert csv_row["kind"] == page_row["kind"]
        assert as_page(csv_row, aggregate == "namespace") == page_row["cells"], (csv_row, page_row)
    # exact figures: the CSV's totals are the sums of its rows (costs to the cent), not page-rounded
    body = rows[:-1]
    assert sum(Decimal(r["cost"]) for r in body) == Decimal(rows[-1]["cost"])
    assert abs(sum(Decimal(r["gpu_hours"]) for r in body) - Decimal(rows[-1]["gpu_hours"])) <= Decimal("0.000001") * len(body)
    api = api_rows(page, base, f"{start},{end}", aggregate, tenant)
    assert [[r["kind"], r["name"], r["tenant"] or ""] + [("" if r[k] is None else str(r[k])) for k in FIGURES] for r in api] == \
        [[r["kind"], r["name"], r["tenant"]] + [r[k] for k in FIGURES] for r in rows]
    return rows


def test_explorer_csv_is_its_table_and_the_api(portal, sessions, console):
    page = sessions("fin")
    base = portal["base"]
    start, end = month_window(portal["months"][0])
    for aggregate in ("tenant", "namespace", "pool"):
        rows = check_page_csv_api(page, base, start, end, aggregate)
        kinds = {r["kind"] for r in rows}
        assert {"allocated", "idle", "total"} <= kinds, kinds
        if aggregate == "namespace":
            page.screenshot(path=str(SHOTS / "allocation-namespace.png"), full_page=True)
    # the default window: this month to date, priced as an estimate
    page.goto(f"{base}/allocation")
    assert page.locator(".lede .estimate").count() >= 1
    page.screenshot(path=str(SHOTS / "allocation.png"), full_page=True)
    assert not console.problems, console.problems


def test_tenant_member_sees_only_its_rows(portal, sessions, console):
    page = sessions("tess")  # a member of `search`
    base = portal["base"]
    start, end = month_window(portal["months"][0])
    for aggregate in ("tenant", "namespace", "class"):
        rows = check_page_csv_api(page, base, start, end, aggregate)
        assert {r["kind"] for r in rows} == {"allocated", "total"}, rows
        if aggregate == "tenant":
            assert [r["name"] for r in rows[:-1]] == ["search"]
        if aggregate == "namespace":
            assert {r["tenant"] for r in rows[:-1]} == {"search"}
            page.screenshot(path=str(SHOTS / "allocation-tenant-member.png"), full_page=True)
    # asking for another tenant's rows yields nothing, in the page, the CSV and the API
    rows = check_page_csv_api(page, base, start, end, "tenant", tenant="vision")
    assert [r["kind"] for r in rows] == ["total"] and rows[0]["cost"] == "0"
    assert not console.problems, console.problems


def test_overview_and_tenant_pages_link_the_matching_csv(portal, sessions, console):
    page = sessions("fin")
    base = portal["base"]
    start, end = month_window(portal["months"][0])
    page.goto(f"{base}/?start={start}&end={end}")
    from_overview = download(page, "#overview-csv")
    page.screenshot(path=str(SHOTS / "overview-with-csv.png"), full_page=True)
    page.goto(f"{base}/allocation?start={start}&end={end}&aggregate=tenant")
    assert download(page, "#alloc-csv") == from_overview
    page.goto(f"{base}/tenants/search?start={start}&end={end}")
    from_tenant = download(page, "#tenant-csv")
    page.screenshot(path=str(SHOTS / "tenant-with-csv.png"), full_page=True)
    assert from_tenant[:-1] and {r["tenant"] for r in from_tenant[:-1]} == {"search"}
    assert not console.problems, console.problems
