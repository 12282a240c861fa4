"""Every view, found by following the portal's own links, at a phone's 390 px and a desktop's 1280 px:
no page scrolls sideways (tables scroll inside their own focusable region) and axe-core finds no
WCAG 2.1 A/AA violation.

The views are crawled rather than listed, so a new page is checked without remembering to add it.
axe-core is vendored under tests/support/vendor (never served) and injected by Playwright.
"""

from __future__ import annotations

import re
from collections import Counter, deque
from pathlib import Path
from urllib.parse import urlsplit

import pytest

pytestmark = pytest.mark.browser

AXE = (Path(__file__).resolve().parents[1] / "support" / "vendor" / "axe-4.14.1.min.js").read_text()
WCAG = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]
WIDTHS = (390, 1280)
# Downloads, the sign-out form's target, and Swagger UI (a vendored third-party page, not ours).
SKIP = re.compile(r"\.(pdf|csv|zip|json|yaml)$|/export|/logout|/api/|/static/|/metrics|/healthz")
PER_SECTION = 8  # pages crawled per first path segment: enough to meet every template once

LINKS_JS = """() => Array.from(document.querySelectorAll('a[href]')).map(a => a.href)"""
AXE_JS = """async (tags) => (await axe.run(document, {runOnly: {type: 'tag', values: tags}})).violations.map(v =>
    ({id: v.id, nodes: v.nodes.slice(0, 3).map(n => n.target.join(' ') + ' :: ' + (n.failureSummary || '').split('\\n')[1])}))"""


def crawl(page, base: str) -> list[str]:
    """Paths reachable from the overview by GET links (query strings dropped), breadth first, at most PER_SECTION per section."""
    seen, order, per_section = {"/"}, [], Counter()
    queue = deque(["/"])
    while queue:
        path = queue.popleft()
        page.goto(base + path)
        page.wait_for_load_state("load")
        order.append(path)
        for href in page.evaluate(LINKS_JS):
            parts = urlsplit(href)
            if f"{parts.scheme}://{parts.netloc}" != base or SKIP.search(parts.path):
                continue
            target = parts.path  # a view once, whatever its query (ranges, filters, pages)
            section = parts.path.strip("/").split("/")[0]
            if target in seen or per_section[section] >= PER_SECTION:
                continue
            seen.add(target)
            per_section[section] += 1
            queue.append(target)
    return order


def audit(page, url: str) -> tuple[int, list[dict]]:
    page.goto(url)
    page.wait_for_load_state("networkidle")
    overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    page.evaluate(AXE)
    return overflow, page.evaluate(AXE_JS, WCAG)


@pytest.mark.parametrize("who", ["ada", "tess"])
def test_every_view_fits_a_phone_and_passes_axe(portal, sessions, console, who):
    base = portal["base"]
    if who == "ada":  # a change request and its page exist before the crawl
        op = sessions("olga")
        op.goto(f"{base}/policy/changes/new")
        op.fill("#title", "Layout check")
        op.fill("#justification", "A draft so the change page is crawled.")
        op.click("main button:has-text('Save draft')")
        op.wait_for_url(re.compile(r"/policy/changes/\d+$"))
    paths = crawl(sessions(who), base)
    assert len(paths) >= (12 if who == "ada" else 4), paths
    problems = []
    for width in WIDTHS:
        page = sessions(who, width=width, height=900)
        for path in paths:
            overflow, violations = audit(page, base + path)
            if overflow > 0:
                problems.append(f"{width}px {path}: the page scrolls sideways by {overflow} px")
            problems += [f"{width}px {path}: {v['id']} {v['nodes']}" for v in violations]
    assert not problems, "\n".join(problems)
    assert not console.problems, console.problems
