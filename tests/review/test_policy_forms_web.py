"""The structured policy editor (issue 13): one form per section, plain POSTs, errors beside the fields, input kept.

Each section: a valid edit changes exactly the expected fields of the draft's document (numbers as numbers);
an invalid one answers 422 with the form, the error next to its input and the typed text still there.
"""

from __future__ import annotations

import html
import re
from collections.abc import AsyncIterator
from decimal import Decimal

import httpx
import pytest
from markupsafe import escape
from sqlmodel import Session

from app.core.db import unit_of_work
from app.policy.diff import diff
from app.policy.parsing import parse_document
from app.policy.service import load_document
from app.review.models import ChangeRequest
from tests.support.review import edited, set_quota
from tests.support.rollups import pool_hour, recent_hours, usage
from tests.support.routes import asgi_client, make_user, sign_in

pytestmark = pytest.mark.anyio
A100 = "NVIDIA A100-SXM4-80GB"


@pytest.fixture
async def olga(app, fresh_engine, v1) -> AsyncIterator[tuple[httpx.AsyncClient, str, int]]:
    """An operator signed in, with a fresh draft against v1: (client, csrf token, change id)."""
    client = asgi_client(app)
    with Session(fresh_engine, expire_on_commit=False) as session:
        token = sign_in(client, session, make_user(session, "olga", "operator"))
    created = await client.post("/policy/changes", data={"csrf_token": token, "title": "forms", "justification": "issue 13"})
    assert created.status_code == 303
    yield client, token, int(created.headers["location"].rsplit("/", 1)[1])
    await client.aclose()


def draft(engine, change_id: int):
    with unit_of_work(engine) as session:
        return parse_document(session.get(ChangeRequest, change_id).document)


def changed(engine, change_id: int, v1) -> dict[str, tuple]:
    """path -> (old, new) of the draft against v1."""
    return {c.path: (c.old, c.new) for c in diff(load_document(v1).to_values(), draft(engine, change_id).to_values())}


async def save(client, token, change_id, section, **fields) -> httpx.Response:
    return await client.post(f"/policy/changes/{change_id}/sections/{section}", data={"csrf_token": token, **fields})


def input_value(page: str, name: str) -> str:
    """The value of the input named `name` on the page (as the browser would show it)."""
    match = re.search(r'<input[^>]*name="' + re.escape(str(escape(name))) + r'"[^>]*value="([^"]*)"', page)
    assert match, f"no input {name}"
    return html.unescape(match.group(1))


def error_beside(page: str, name: str) -> str:
    """The error paragraph right after the input named `name`."""
    at = page.index(f'name="{escape(name)}"')
    match = re.search(r'<p class="field-error" id="[^"]+">([^<]*)</p>', page[at:at + 1500])
    assert match, f"no error beside {name}"
    return html.unescape(match.group(1))


QUOTA = "quotas[vision/mixed-a100]"


async def test_quota_form_edits_one_field_and_shows_actual_use(olga, v1, fresh_engine):
    client, token, change_id = olga
    with unit_of_work(fresh_engine) as session:
        for i, hour in enumerate(recent_hours(4)):
            usage(session, v1, hour=hour, tenant="vision", klass="training", gpu_seconds=str(3600 * (2 + i)), pool="mixed-a100")
        for hour in recent_hours(4):
            pool_hour(session, v1, hour=hour, pool="mixed-a100", gpus=16)
    page = await client.get(f"/policy/changes/{change_id}/sections/quotas")
    assert page.status_code == 200
    assert input_value(page.text, f"{QUOTA}.guaranteed_gpus") == "4"
    assert "<td>5.0</td>" in page.text and "<td>3.5</td>" in page.text  # peak 5 GPUs, mean (2+3+4+5)/4

    saved = await save(client, token, change_id, "quotas", **{f"{QUOTA}.guaranteed_gpus": "6", f"{QUOTA}.tenant": "vision",
                                                               f"{QUOTA}.pool": "mixed-a100"})
    assert saved.status_code == 303 and saved.headers["location"].endswith("/sections/quotas?saved=1")
    assert changed(fresh_engine, change_id, v1) == {f"{QUOTA}.guaranteed_gpus": (4, 6)}
    with unit_of_work(fresh_engine) as session:  # the very document the YAML editor would have saved
        assert session.get(ChangeRequest, change_id).document == edited(v1, set_quota(6))


async def test_quota_above_capacity_comes_back_with_the_error_beside_the_field(olga, v1, fresh_engine):
    client, token, change_id = olga
    refused = await save(client, token, change_id, "quotas", **{f"{QUOTA}.guaranteed_gpus": "17"})
    assert refused.status_code == 422
    assert input_value(refused.text, f"{QUOTA}.guaranteed_gpus") == "17"  # the input is kept
    assert "sum to 17, above its 16 GPUs" in error_beside(refused.text, f"{QUOTA}.guaranteed_gpus")
    assert changed(fresh_engine, change_id, v1) == {}  # nothing saved
    not_a_number = await save(client, token, change_id, "quotas", **{f"{QUOTA}.borrowing_limit": "lots"})
    assert not_a_number.status_code == 422 and input_value(not_a_number.text, f"{QUOTA}.borrowing_limit") == "lots"
    assert "valid integer" in error_beside(not_a_number.text, f"{QUOTA}.borrowing_limit")


async def test_quota_rows_are_added_and_removed_with_plain_posts(olga, v1, fresh_engine):
    client, token, change_id = olga
    more = await save(client, token, change_id, "quotas", _add="quotas", **{f"{QUOTA}.guaranteed_gpus": "3"})
    assert more.status_code == 200 and 'name="quotas[+1].tenant"' in more.text
    assert input_value(more.text, f"{QUOTA}.guaranteed_gpus") == "3"  # typed text survives "add a row"
    saved = await save(client, token, change_id, "quotas", **{"quotas[+1].tenant": "etl", "quotas[+1].pool": "mixed-a100",
                                                               "quotas[+1].guaranteed_gpus": "2", "quotas[+2].tenant": ""})
    assert saved.status_code == 303
    assert changed(fresh_engine, change_id, v1) == {
        "quotas[etl/mixed-a100]": (None, {"tenant": "etl", "pool": "mixed-a100", "guaranteed_gpus": 2,
                                          "borrowing_limit": 0, "lending_limit": 0})}
    incomplete = await save(client, token, change_id, "quotas", **{"quotas[+1].tenant": "search"})
    assert incomplete.status_code == 422 and error_beside(incomplete.text, "quotas[+1].pool") == "required"
    removed = await save(client, token, change_id, "quotas", _remove=["quotas[etl/mixed-a100]"])
    assert removed.status_code == 303 and changed(fresh_engine, change_id, v1) == {}


async def test_priorities_form(olga, v1, fresh_engine):
    client, token, change_id = olga
    tier = "priorities[training]"
    assert (await save(client, token, change_id, "priorities", **{f"{tier}.value": "20000"})).status_code == 303
    assert changed(fresh_engine, change_id, v1) == {f"{tier}.value": (10000, 20000)}
    refused = await save(client, token, change_id, "priorities", **{f"{tier}.value": "950000"})
    assert refused.status_code == 422 and input_value(refused.text, f"{tier}.value") == "950000"
    assert "must be below inference tier" in error_beside(refused.text, f"{tier}.value")


async def test_tenants_form_with_reservations(olga, v1, fresh_engine):
    client, token, change_id = olga
    weight = 'pools[mixed-a100].reservations.search'
    ok = await save(client, token, change_id, "tenants", **{weight: "2.5", "tenants[etl].namespaces": "data-prep, data-load"})
    assert ok.status_code == 303
    assert changed(fresh_engine, change_id, v1) == {weight: (1, Decimal("2.5")), "tenants[etl].namespaces": (None, "data-load")}
    refused = await save(client, token, change_id, "tenants", **{"pools[mixed-a100].reservations.vision": "1"})
    assert refused.status_code == 422 and input_value(refused.text, "pools[mixed-a100].reservations.vision") == "1"
    assert "only inference tenants hold reservations" in error_beside(refused.text, "pools[mixed-a100].reservations.vision")


async def test_pools_form(olga, v1, fresh_engine):
    client, token, change_id = olga
    pool = "pools[mixed-a100]"
    assert (await save(client, token, change_id, "pools", **{f"{pool}.reserved_fraction": "0.25"})).status_code == 303
    assert changed(fresh_engine, change_id, v1) == {f"{pool}.reserved_fraction": (Decimal("0.30"), Decimal("0.25"))}
    refused = await save(client, token, change_id, "pools", **{f"{pool}.reserved_fraction": "1.5"})
    assert refused.status_code == 422 and input_value(refused.text, f"{pool}.reserved_fraction") == "1.5"
    assert "less than or equal to 1" in error_beside(refused.text, f"{pool}.reserved_fraction")


async def test_sla_form(olga, v1, fresh_engine):
    client, token, change_id = olga
    sla = "sla[search-chat]"
    assert (await save(client, token, change_id, "sla", **{f"{sla}.p99_ms": "250", f"{sla}.penalty_per_breach_minute": "0.75"})).status_code == 303
    assert changed(fresh_engine, change_id, v1) == {f"{sla}.p99_ms": (300, 250),
                                                     f"{sla}.penalty_per_breach_minute": (Decimal("0.50"), Decimal("0.75"))}
    refused = await save(client, token, change_id, "sla", **{f"{sla}.tenant": "vision"})
    assert refused.status_code == 422
    assert "SLAs apply to inference tenants" in error_beside(refused.text, f"{sla}.tenant")


async def test_pricing_form_numbers_stay_numbers(olga, v1, fresh_engine):
    client, token, change_id = olga
    ok = await save(client, token, change_id, "pricing", **{"pricing.dark_time_multiplier": "0.6",
                                                             f'pricing.gpu_models["{A100}"].hosting_per_hour': "0.25"})
    assert ok.status_code == 303
    assert changed(fresh_engine, change_id, v1) == {
        f'pricing.gpu_models["{A100}"].hosting_per_hour': (Decimal("0.20"), Decimal("0.25"))}  # 0.6 was already 0.6
    with unit_of_work(fresh_engine) as session:
        document = session.get(ChangeRequest, change_id).document
    assert "dark_time_multiplier: 0.6\n" in document and "hosting_per_hour: 0.25\n" in document  # YAML numbers, unquoted
    page = await client.get(f"/policy/changes/{change_id}")
    assert "<code>0.20</code>" in page.text and "<code>0.25</code>" in page.text and '"0.25"' not in page.text
    refused = await save(client, token, change_id, "pricing", **{"pricing.dark_time_multiplier": "1.2"})
    assert refused.status_code == 422 and input_value(refused.text, "pricing.dark_time_multiplier") == "1.2"
    assert "less than or equal to 1" in error_beside(refused.text, "pricing.dark_time_multiplier")
    new_model = await save(client, token, change_id, "pricing", **{"pricing.gpu_models[\"+1\"]._key": "NVIDIA L4",
                                                                    "pricing.gpu_models[\"+1\"].purchase_price": "2500"})
    assert new_model.status_code == 422  # the other prices are required; the row keeps its typed name
    assert input_value(new_model.text, 'pricing.gpu_models["+1"]._key') == "NVIDIA L4"
    assert error_beside(new_model.text, 'pricing.gpu_models["+1"].hosting_per_hour') == "required"


async def test_isolation_form(olga, v1, fresh_engine):
    client, token, change_id = olga
    mig = 'isolation.mig["gpu-a100-02"].gpus["0-3"]'
    page = await client.get(f"/policy/changes/{change_id}/sections/isolation")
    assert page.status_code == 200 and "1g.10gb, 1g.20gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb" in page.text
    ok = await save(client, token, change_id, "isolation", **{
        "isolation.training.network_cap_fraction": "0.5", "isolation.inference.numa_affinity": "false",
        f'{mig}["3g.40gb"]': "1", f'{mig}["1g.10gb"]': "4",
        'isolation.node_taints["mixed-a100"][+1].key': "gpu", 'isolation.node_taints["mixed-a100"][+1].effect': "NoExecute"})
    assert ok.status_code == 303
    assert changed(fresh_engine, change_id, v1) == {
        "isolation.training.network_cap_fraction": (Decimal("0.7"), Decimal("0.5")),
        "isolation.inference.numa_affinity": (True, False),
        f'{mig}["3g.40gb"]': (2, 1), f'{mig}["1g.10gb"]': (None, 4),
        'isolation.node_taints["mixed-a100"][gpu:NoExecute]': (None, {"key": "gpu", "value": "", "effect": "NoExecute"})}
    refused = await save(client, token, change_id, "isolation", **{f'{mig}["7g.80gb"]': "1"})
    assert refused.status_code == 422 and input_value(refused.text, f'{mig}["7g.80gb"]') == "1"
    assert "compute slices per GPU, above the 7" in refused.text  # at the range's row


async def test_set_field_with_a_bad_path_keeps_the_input(olga, v1, fresh_engine):
    client, token, change_id = olga
    bad = await client.post(f"/policy/changes/{change_id}/fields",
                            data={"csrf_token": token, "path": "quotas[nobody/mixed-a100].guaranteed_gpus", "value": "6"})
    assert bad.status_code == 422 and "does not exist" in bad.text
    assert input_value(bad.text, "path") == "quotas[nobody/mixed-a100].guaranteed_gpus" and input_value(bad.text, "value") == "6"
    assert 'aria-invalid="true" aria-describedby="set-path-err"' in bad.text
    fragment = await client.post(f"/policy/changes/{change_id}/fields", headers={"HX-Request": "true"},
                                 data={"csrf_token": token, "path": f"{QUOTA}.guaranteed_gpus", "value": "[1"})
    assert fragment.status_code == 422 and "<html" not in fragment.text and 'id="set-field"' in fragment.text
    assert input_value(fragment.text, "value") == "[1" and 'id="set-value-err"' in fragment.text
    ok = await client.post(f"/policy/changes/{change_id}/fields", data={"csrf_token": token, "path": f"{QUOTA}.guaranteed_gpus",
                                                                          "value": "5"})
    assert ok.status_code == 303 and changed(fresh_engine, change_id, v1) == {f"{QUOTA}.guaranteed_gpus": (4, 5)}


async def test_only_the_author_edits_a_draft_through_the_forms(olga, app, v1, fresh_engine):
    _, _, change_id = olga
    other = asgi_client(app)
    with Session(fresh_engine, expire_on_commit=False) as session:
        token = sign_in(other, session, make_user(session, "otto", "operator"))
    assert (await other.get(f"/policy/changes/{change_id}/sections/quotas")).status_code == 303
    refused = await save(other, token, change_id, "quotas", **{f"{QUOTA}.guaranteed_gpus": "5"})
    assert refused.status_code == 403 and changed(fresh_engine, change_id, v1) == {}
    assert (await other.get(f"/policy/changes/{change_id}/sections/nonsense")).status_code == 404
    await other.aclose()
