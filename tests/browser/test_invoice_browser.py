"""A training tenant's member reconciles its invoice in chromium (issue 12): every line's quantity x rate = amount to
the cent (mixed-rate lines through their per-day drill-down), lines add up to the total, and a penalty line leads to
the breach minutes with the tenant's own GPU-seconds and no other tenant's name."""

from __future__ import annotations

import re
from decimal import ROUND_HALF_EVEN, Decimal

import pytest
from playwright.sync_api import expect

from tests.support.browser import SERVER_TIMEOUT_MS, SHOTS

pytestmark = pytest.mark.browser

CENT = Decimal("0.01")
OTHER_TENANTS = ("search", "assist", "nlp", "etl")  # the seed policy's tenants other than vision


def number(text: str) -> Decimal:
    """The first number of a cell as shown ('1,030.672 GPU-hour', '-1.00 USD')."""
    match = re.search(r"-?[\d,]+(\.\d+)?", text)
    assert match, text
    return Decimal(match.group(0).replace(",", ""))


def product(quantity: Decimal, rate: Decimal) -> Decimal:
    return (quantity * rate).quantize(CENT, ROUND_HALF_EVEN)


def test_tenant_reconciles_its_invoice_and_follows_a_penalty(portal, sessions, console):
    page = sessions("vic")
    base = portal["base"]
    month = None
    for m in portal["months"]:  # the month in which vision paid an SLA penalty
        page.goto(f"{base}/billing/{m}/vision")
        if page.locator("tbody[data-group=sla] tr.invoice-line[data-kind=sla_penalty]").count():
            month = m
            break
    assert month is not None, "the seeded week holds no SLA penalty for vision"
    assert page.locator("[data-testid=invoice-status]").inner_text() in ("draft", "finalized")
    expect(page.locator("[data-testid=coverage]")).to_contain_text("hours of the month measured")
    groups = page.locator("tbody[data-group]").evaluate_all("els => els.map(e => e.dataset.group)")
    order = ["reserved_fee", "inference_overage", "usage_busy", "usage_dark", "sla", "correction"]
    assert groups == sorted(groups, key=order.index) and "usage_dark" in groups

    total = Decimal(0)
    rows = page.locator("tr.invoice-line")
    checked_days = 0
    for i in range(rows.count()):
        row = rows.nth(i)
        quantity = number(row.locator("td.qty").inner_text())
        rate_text = row.locator("td.rate").inner_text()
        amount = number(row.locator("td.amount").inner_text())
        total += amount
        if rate_text.strip() == "–":
            assert quantity == 0 and amount == 0
        else:
            assert product(quantity, number(rate_text)) == amount, (row.inner_text(), quantity, rate_text, amount)
        line_id = row.get_attribute("data-line-id")
        drill = page.locator(f"tr.drilldown[data-line-id='{line_id}']")
        if drill.count():
            with page.expect_response(lambda r: "/days?" in r.url, timeout=SERVER_TIMEOUT_MS):
                drill.locator("[data-testid=per-day]").click()
            days = drill.locator(".line-days tbody tr.day")
            expect(days.first).to_be_visible(timeout=SERVER_TIMEOUT_MS)
            assert drill.locator(".line-days").get_attribute("data-adds-up") == "true"
            day_q = day_a = Decimal(0)
            for j in range(days.count()):
                cells = days.nth(j).locator("td").all_inner_texts()
                q, r, a = number(cells[0]), number(cells[1]), number(cells[2])
                assert product(q, r) == a, cells
                day_q, day_a = day_q + q, day_a + a
            assert (day_q, day_a) == (quantity, amount), line_id
            checked_days += 1
    assert checked_days >= 2  # at least the busy and dark lines
    assert total == number(page.locator("[data-testid=total]").inner_text())
    dark = page.locator("tr.dark-discount").first
    assert number(dark.locator("[data-testid=multiplier]").inner_text()) == Decimal("0.6")
    page.screenshot(path=str(SHOTS / "invoice-explained.png"), full_page=True)

    penalty = page.locator("tr.invoice-line[data-kind=sla_penalty]").first
    shares = number(penalty.locator("td.qty").inner_text())
    service = re.search(r"service=([\w-]+)", page.locator("a[data-testid=evidence]").first.get_attribute("href")).group(1)
    page.locator(f"a[data-testid=evidence][href*='service={service}']").click()
    page.wait_for_url(re.compile(r"/sla/paid\?"))
    minutes = page.locator("tr.paid-minute")
    expect(minutes.first).to_be_visible()
    seconds = [number(minutes.nth(i).locator("td").nth(2).inner_text()) for i in range(min(minutes.count(), 50))]
    assert all(s > 0 for s in seconds)
    count = int(page.locator("[data-testid=minute-count]").inner_text())
    assert count >= shares > 0  # each minute's share is at most 1
    main = page.locator("main").inner_text()
    without_services = re.sub(r"\b[\w-]+-chat\b", "", main)  # service names may contain their owner's name
    for other in OTHER_TENANTS:
        assert not re.search(rf"\b{other}\b", without_services), other
    page.screenshot(path=str(SHOTS / "sla-evidence.png"))  # the top: the table lists every minute

    page.goto(f"{base}/sla")
    expect(page.locator("main")).to_contain_text("SLA penalties your tenants paid")
    page.screenshot(path=str(SHOTS / "sla-tenant.png"), full_page=True)
    assert not console.problems, console.problems


@pytest.mark.parametrize("width", [390, 1280])
def test_no_amount_of_the_invoice_hides_off_screen(portal, sessions, console, width):
    """Every line's name, amount, subtotal and the total sit inside the viewport, at a phone's width and a laptop's
    (issue 30: at 390 px the Line column was a few characters wide and amounts were off-screen)."""
    page = sessions("vic")
    page.set_viewport_size({"width": width, "height": 900})
    page.goto(f"{portal['base']}/billing/{portal['months'][-1]}/vision")
    cells = page.locator(".invoice-lines tr.invoice-line th, .invoice-lines td.amount, [data-testid=total]")
    assert cells.count() >= 3
    boxes = cells.evaluate_all("els => els.map(e => { const r = e.getBoundingClientRect(); "
                               "return [e.innerText.trim(), r.left, r.right, e.scrollWidth <= e.clientWidth + 1]; })")
    for text, left, right, fits in boxes:
        assert 0 <= left and right <= width and fits, (text, left, right, width)
    names = page.locator(".invoice-lines tr.invoice-line th").all_inner_texts()
    assert not any("_" in name.split("\n")[0] for name in names), names  # people's names, not kind codes
    page.screenshot(path=str(SHOTS / f"invoice-{width}.png"), full_page=True)
    assert not console.problems, console.problems
