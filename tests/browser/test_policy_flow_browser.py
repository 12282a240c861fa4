"""The operator's policy flow in headless chromium, without JavaScript shortcuts: from an approved change request
the next-step card leads to the releases board, "Plan and attach", Apply policy (a confirm step, then a success
message), Mark deployed (the same), and back on the change page "Done: deployed" with the diff as approved. The
detach button reads dark on white (contrast measured). Screenshots go to artifacts/screenshots/flow-*.png."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from playwright.sync_api import expect

from app.core.db import unit_of_work
from app.core.timeutil import floor_hour, utcnow
from app.policy.parsing import parse_document
from app.policy.service import import_version, latest_version
from app.review import changes, releases
from app.review.models import Release, ReleaseState
from tests.support.browser import SHOTS, ask, submit
from tests.support.review import edited, set_p99

pytestmark = pytest.mark.browser


def shot(page, name: str) -> None:
    page.screenshot(path=str(SHOTS / f"flow-{name}.png"), full_page=True)


def trim_vision(data: dict) -> None:
    data["quotas"][0]["guaranteed_gpus"] -= 1


def _rgb(css: str) -> tuple[float, ...]:
    return tuple(float(v) for v in re.findall(r"[\d.]+", css)[:3])


def _transparent(css: str) -> bool:
    return css.startswith("rgba") and float(re.findall(r"[\d.]+", css)[3]) == 0


def _luminance(rgb: tuple[float, ...]) -> float:
    def channel(c: float) -> float:
        c /= 255
        return c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4
    r, g, b = (channel(c) for c in rgb)
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def contrast(fg: str, bg: str) -> float:
    """WCAG contrast ratio of two CSS rgb() colours."""
    hi, lo = sorted((_luminance(_rgb(fg)), _luminance(_rgb(bg))), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


@pytest.fixture(scope="module")
def scene(engine) -> dict:
    """An approved request attached to a planned release, then a newer version (so that request is stale), then an
    approved request on the newer version to take from approved to deployed."""
    with unit_of_work(engine) as session:
        current = latest_version(session=session)
        spare = _approved(session, current, "Trim it for the spare release")
        release = releases.create_release(session=session, actor="olga", name="spare 1.0", service="etl",
                                          planned_at=floor_hour(utcnow()) + timedelta(days=2))
        releases.attach(session=session, release_id=release.id, change_id=spare, actor="olga")
        newer = import_version(session=session, document=parse_document(edited(current, set_p99(250))), actor="ops",
                               source="change", effective_from=floor_hour(utcnow()))
        walk = _approved(session, newer, "Trim the vision guarantee")
        return {"walk": walk, "spare": spare, "spare_release": release.id}


def _approved(session, version, title: str) -> int:
    change = changes.create_change(session=session, actor="olga", title=title, justification="etl needs GPUs",
                                   document=edited(version, trim_vision))
    changes.submit(session=session, change_id=change.id, actor="olga")
    changes.approve(session=session, change_id=change.id, actor="rex")
    return change.id


def test_operator_goes_from_approved_to_deployed_by_the_next_step_links(portal, sessions, console, scene, engine):
    base = portal["base"]
    olga = sessions("olga")
    olga.goto(f"{base}/policy/changes/{scene['walk']}")
    card = olga.locator("#next-step")
    expect(card).to_contain_text("Next step: Attach it to a release")
    # The card is the first thing after the request's header, above the evidence.
    assert card.bounding_box()["y"] < olga.locator("#validation-title").bounding_box()["y"]
    shot(olga, "change-approved")
    olga.click("#next-step a:has-text('Attach to a release')")
    olga.wait_for_url(re.compile(rf"/policy/releases\?change={scene['walk']}"))
    expect(olga.locator("#attach")).to_contain_text("Trim the vision guarantee")
    expect(olga.locator("#attach button:has-text('Attach to spare 1.0')")).to_be_visible()
    shot(olga, "attach")

    olga.fill("#plan input[name=name]", "vision 4.0")
    olga.fill("#plan input[name=service]", "vision-train")
    olga.fill("#plan input[name=planned_at]", floor_hour(utcnow()).strftime("%Y-%m-%dT%H:%M"))
    submit(olga, f"#plan button:has-text('Plan and attach #{scene['walk']}')", shows="attached to vision 4.0. Next: apply policy.")
    with unit_of_work(engine) as session:
        release_id = releases.release_of_change(session=session, change_id=scene["walk"])
    article = olga.locator(f"#release-{release_id}")
    expect(article).to_contain_text("Next: Apply policy.")

    olga.goto(f"{base}/policy/changes/{scene['walk']}")
    expect(olga.locator("#next-step")).to_contain_text("Next step: Apply policy")
    olga.click("#next-step a:has-text('Apply vision 4.0')")
    olga.wait_for_url(re.compile(rf"/policy/releases#release-{release_id}$"))
    article.locator("input[name=effective_from]").fill(floor_hour(utcnow()).strftime("%Y-%m-%dT%H:%M"))
    ask(olga, f"#release-{release_id} button:has-text('Apply policy')", shows="Apply vision 4.0?")
    shot(olga, "confirm-apply")
    with unit_of_work(engine) as session:
        assert session.get(Release, release_id).state == ReleaseState.PLANNED  # nothing happened yet
    submit(olga, "main form button:has-text('Apply policy')", shows="Release vision 4.0 (vision-train) applied: version")
    expect(olga.locator("#done")).to_be_visible()
    shot(olga, "applied")

    ask(olga, f"#release-{release_id} button:has-text('Mark deployed')", shows="Mark vision 4.0 deployed?")
    submit(olga, "main form button:has-text('Mark deployed')", shows="Release vision 4.0 (vision-train) marked deployed")
    with unit_of_work(engine) as session:
        assert session.get(Release, release_id).state == ReleaseState.DEPLOYED

    olga.goto(f"{base}/policy/changes/{scene['walk']}")
    expect(olga.locator("#next-step-title")).to_have_text("Done: deployed")
    expect(olga.locator("#artifacts h2")).to_contain_text("(its base)")
    expect(olga.locator("#artifacts .diff-add").first).to_be_visible()  # the diff as approved, not "no changes"
    shot(olga, "change-deployed")
    assert not console.problems, console.problems


def test_detach_is_readable_and_a_refused_apply_says_what_to_do(portal, sessions, console, scene):
    base = portal["base"]
    olga = sessions("olga")
    olga.goto(f"{base}/policy/releases#release-{scene['spare_release']}")
    detach = olga.locator(f"#release-{scene['spare_release']} button:has-text('Detach')")
    expect(detach).to_be_visible()
    color, background, card = detach.evaluate(
        "b => [getComputedStyle(b).color, getComputedStyle(b).backgroundColor,"
        " getComputedStyle(b.closest('.card')).backgroundColor]")
    shown_on = card if _transparent(background) else background  # the header's .link-button had none: white on white
    assert contrast(color, shown_on) >= 4.5, (color, background, card)
    shot(olga, "board")

    # The spare request is based on an older version: applying is refused, with the way out.
    olga.locator(f"#release-{scene['spare_release']} input[name=effective_from]").fill(
        floor_hour(utcnow()).strftime("%Y-%m-%dT%H:%M"))
    with olga.expect_response(lambda r: r.request.method == "POST") as posted:
        olga.click(f"#release-{scene['spare_release']} button:has-text('Apply policy')")
    assert posted.value.status == 409
    main = olga.locator("main")
    expect(main).to_contain_text("spare 1.0 was not applied")
    expect(main).to_contain_text(f"What to do next: Rebase change request #{scene['spare']}")
    assert "409 · Conflict" not in main.inner_text()
    shot(olga, "refused-apply")
    olga.click(f"main a:has-text('Change request #{scene['spare']}')")
    olga.wait_for_url(f"{base}/policy/changes/{scene['spare']}")
    assert not console.problems, console.problems  # the 409 document itself is an expected failed load


def test_change_page_next_step_at_phone_width(portal, sessions, scene):
    page = sessions("olga", width=390)
    page.goto(f"{portal['base']}/policy/changes/{scene['spare']}")
    box = page.locator("#next-step").bounding_box()
    assert box["x"] >= 0 and box["x"] + box["width"] <= 390
    shot(page, "change-390")


def test_a_new_request_starts_in_a_section_form(portal, sessions, console):
    base = portal["base"]
    olga = sessions("olga")
    olga.goto(f"{base}/policy/changes/new")
    olga.fill("#title", "Vision gives back a GPU")
    olga.fill("#justification", "etl is short in the day")
    olga.check("input[name=then][value=quotas]")
    shot(olga, "new")
    submit(olga, "main button:has-text('Save draft')", shows="Quotas")
    assert re.search(r"/policy/changes/\d+/sections/quotas$", olga.url), olga.url
    expect(olga.locator("main input[name$='.guaranteed_gpus']").first).to_be_visible()
    narrow = sessions("olga", width=390)
    narrow.goto(f"{base}/policy/changes/new")
    options = narrow.locator(".start-options")
    box = options.bounding_box()
    assert box["x"] >= 0 and box["x"] + box["width"] <= 390
    shot(narrow, "new-390")
    assert not console.problems, console.problems
