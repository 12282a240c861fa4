"""Every chart draws a workload class in its one colour, whatever order the datasets come in."""

from __future__ import annotations

import json
import re

import pytest

from app.metrics.usage_read import CLASSES
from app.web.charts import CLASS_COLOURS, OTHER_COLOUR, class_colour
from tests.support.pages import overview_month
from tests.support.routes import make_user, sign_in

pytestmark = pytest.mark.anyio

# Okabe-Ito (colour-blind safe) plus a light grey for idle capacity.
OKABE_ITO = {"#E69F00", "#56B4E9", "#009E73", "#F0E442", "#0072B2", "#D55E00", "#CC79A7", "#000000"}


def test_every_class_has_its_own_colour_blind_safe_colour():
    assert set(CLASSES) | {"idle", "platform"} <= CLASS_COLOURS.keys()
    assert len(set(CLASS_COLOURS.values())) == len(CLASS_COLOURS)  # no two classes share a colour
    assert set(CLASS_COLOURS.values()) - {"#BBBBBB"} <= OKABE_ITO
    assert class_colour("something-new") == OTHER_COLOUR == CLASS_COLOURS["platform"]


def _datasets(html: str, script_id: str) -> list[dict]:
    match = re.search(rf'<script type="application/json" id="{script_id}">(.*?)</script>', html, re.S)
    assert match, script_id
    return json.loads(match.group(1))["datasets"]


async def test_overview_charts_carry_the_class_colour(client, session):
    overview_month(session)
    sign_in(client, session, make_user(session, "fin", "finance"))
    page = (await client.get("/")).text
    tenants_chart, daily_chart = _datasets(page, "overview-data"), _datasets(page, "overview-daily-data")
    # the two charts build their class lists apart (the tenant table's classes, the fixed class order) ...
    assert {d["label"] for d in tenants_chart} >= {"inference", "training", "preprocessing"}
    assert {d["label"] for d in daily_chart} >= {"inference", "training", "preprocessing"}
    # ... and each class has its colour on both
    for dataset in tenants_chart + daily_chart:
        assert dataset["color"] == CLASS_COLOURS[dataset["label"]], dataset["label"]


def test_a_rise_is_never_green():
    """One pair of classes marks a change everywhere (overview, tenants, invoice impact): a rise is never green."""
    from tests.support.deploy import ROOT

    css = "".join((ROOT / "static" / name).read_text() for name in ("app.css", "dashboard.css", "allocation.css"))
    (up,) = re.findall(r"\.change-up \{ color: (#[0-9a-fA-F]+)", css)
    (down,) = re.findall(r"\.change-down \{ color: (#[0-9a-fA-F]+)", css)
    assert up.lower() != down.lower() and up.lower() not in {"#1a7f37", "#009e73", "#2da44e"}
    assert not re.search(r"\.(cost-up|up)\s*\{", css)  # no second way of marking a rise
