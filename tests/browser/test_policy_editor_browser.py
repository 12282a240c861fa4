"""The structured policy editor in headless chromium: an operator changes a quota with the form (no YAML), sees the
capacity error beside the field, fixes it and submits the change for review. Screenshots in artifacts/screenshots/."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from tests.browser.test_layout_a11y import audit  # the crawl's own check: overflow and axe-core
from tests.support.browser import SERVER_TIMEOUT_MS, SHOTS, submit

pytestmark = pytest.mark.browser

VISION = 'input[name="quotas[vision/mixed-a100].guaranteed_gpus"]'
ETL = 'input[name="quotas[etl/mixed-a100].guaranteed_gpus"]'


WIDER_THAN_WINDOW = """() => Array.from(document.querySelectorAll('body *'))
    .filter(e => e.getBoundingClientRect().right > window.innerWidth + 1)
    .slice(0, 5).map(e => e.tagName + '.' + e.className + ' ' + Math.round(e.getBoundingClientRect().right))"""


def shot(page, name: str) -> None:
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def new_draft(portal, sessions, title: str):
    """Olga's page on a new draft change request (its URL is the page's)."""
    op = sessions("olga")
    op.goto(f"{portal['base']}/policy/changes/new")
    op.fill("#title", title)
    op.fill("#justification", f"{title} (issue 13 browser test).")
    op.click("main button:has-text('Save draft')")
    op.wait_for_url(re.compile(r"/policy/changes/\d+$"))
    return op


def test_operator_edits_a_quota_with_the_form_and_submits_it(portal, sessions, console):
    op = new_draft(portal, sessions, "More guaranteed GPUs for vision")
    change_url = op.url

    op.click("main nav[aria-label='Edit the draft'] >> text=Quotas")
    op.wait_for_url(re.compile(r"/sections/quotas$"))
    expect(op.locator(VISION)).to_have_value("10")
    assert "Peak GPUs (30 d)" in op.locator("main table").first.inner_text()  # actual use beside the quota
    shot(op, "policy-form-quotas")

    # 15 + etl's 2 is above the pool's 16 GPUs: the form comes back with the error beside a guaranteed field.
    op.fill(VISION, "15")
    op.click("main button:has-text('Save to the draft')")
    error = op.locator("#section-form .field-invalid .field-error")
    expect(error.first).to_contain_text("sum to 17, above its 16 GPUs", timeout=SERVER_TIMEOUT_MS)
    expect(op.locator(VISION)).to_have_value("15")  # the input is kept
    expect(op.locator(f"{ETL}[aria-invalid=true]")).to_have_count(1)
    shot(op, "policy-form-quotas-error")

    op.fill(VISION, "12")
    op.fill(ETL, "2")
    op.click("main button:has-text('Save to the draft')")
    op.wait_for_url(re.compile(r"/sections/quotas\?saved=1$"), timeout=SERVER_TIMEOUT_MS)
    expect(op.locator("main .alert-ok")).to_contain_text("Saved to the draft")
    expect(op.locator(VISION)).to_have_value("12")

    op.goto(change_url)
    diff = op.locator("main section:has(h2:has-text('Changes against'))").inner_text()
    assert "quotas[vision/mixed-a100].guaranteed_gpus" in diff and "10" in diff and "12" in diff
    submit(op, "main button:has-text('Submit for review')")
    expect(op.locator("main p").first).to_contain_text("submitted")
    shot(op, "policy-form-submitted")
    assert not console.problems, console.problems


def test_set_field_with_a_bad_path_is_not_a_dead_end(portal, sessions, console):
    op = new_draft(portal, sessions, "Typo")
    op.fill("input[name=path]", "quotas[nobody/mixed-a100].guaranteed_gpus")
    op.fill("input[name=value]", "6")
    with op.expect_response(lambda r: r.request.method == "POST", timeout=SERVER_TIMEOUT_MS) as answer:
        op.click("main button:has-text('Set field')")
    assert answer.value.status == 422
    expect(op.locator("#set-path-err")).to_contain_text("does not exist")
    expect(op.locator("input[name=path]")).to_have_value("quotas[nobody/mixed-a100].guaranteed_gpus")
    expect(op.locator("input[name=value]")).to_have_value("6")
    shot(op, "policy-set-field-error")
    op.fill("input[name=path]", "quotas[vision/mixed-a100].guaranteed_gpus")
    submit(op, "main button:has-text('Set field')", shows="guaranteed_gpus")
    assert not [p for p in console.problems if "status of 422" not in p], console.problems
    console.problems.clear()  # chromium logs the refused post (422) above, which is what this test asks for


def test_every_section_form_fits_and_passes_axe(portal, sessions, console):
    op = new_draft(portal, sessions, "Look at every form")
    change_url = op.url
    shot(op, "policy-change-draft")
    problems = []
    for width in (1280, 390):
        page = sessions("olga", width=width, height=900)
        for section in ("quotas", "priorities", "tenants", "pools", "isolation", "sla", "pricing"):
            overflow, violations = audit(page, f"{change_url}/sections/{section}")
            expect(page.locator("main button:has-text('Save to the draft')")).to_be_visible()
            if width == 1280:
                shot(page, f"policy-form-{section}")
            if overflow > 0:  # wide tables scroll inside their card, never the page
                problems.append(f"{width}px {section}: sideways by {overflow} px {page.evaluate(WIDER_THAN_WINDOW)}")
            problems += [f"{width}px {section}: {v['id']} {v['nodes']}" for v in violations]
    assert not problems, "\n".join(problems)
    assert not console.problems, console.problems
