"""Secrets never shown (issue 25 item 6): credentials refused in cluster URLs, and a Prometheus (here a real
HTTP server on loopback) that echoes the credentials it was sent has them masked in every excerpt the
portal shows or logs: the doctor's report (page, `--json`), ingestion's gap reason, the CLI."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import SecretStr

from app.core.clusters import ClusterConfig, ClusterConfigError
from app.core.errors import AppError
from app.core.masking import MASK
from app.core.settings import Settings
from app.core.timeutil import from_epoch
from app.metrics import doctor
from app.metrics.prometheus_api import PromReader
from app.metrics.prometheus_source import PrometheusSource
from tests.support import scenario
from tests.support.echoing import EchoingProxy
from tests.support.policies import mixed_policy

TOKEN = "tok-3c9e1d7a55b24f0e"
PASSWORD = "pw-Zq81!x@y"
CHARGEBACK = str(Path(sys.executable).parent / "chargeback")


@pytest.fixture
def proxy():
    with EchoingProxy() as p:
        yield p


SHAPES = ["500", "400", "status", "warning", "not-json"]


def _configs(url: str, tmp_path) -> dict[str, ClusterConfig]:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    return {"bearer": ClusterConfig(name="east", url=url, bearer_token=SecretStr(TOKEN)),
            "bearer file": ClusterConfig(name="east", url=url, bearer_token_file=str(token_file)),
            "basic": ClusterConfig(name="east", url=url, username="ops", password=SecretStr(PASSWORD))}


def _leaks(text: str) -> list[str]:
    forms = [TOKEN, PASSWORD, base64.b64encode(f"ops:{PASSWORD}".encode()).decode()]
    return [f for f in forms if f in text]


@pytest.mark.parametrize("shape", SHAPES)
def test_an_echoed_credential_is_masked_in_the_doctor_and_in_ingestion(proxy, tmp_path, shape):
    proxy.shape = shape
    for kind, config in _configs(proxy.url, tmp_path).items():
        # The doctor (page, CLI and --json show this report).
        report = doctor.run(PromReader(proxy.url, timeout_s=5, access=config), at=scenario.H + 1800, policy=None)
        shown = json.dumps(report.as_dict())
        assert report.failing and not _leaks(shown), (kind, shape, shown)
        assert MASK in shown, (kind, shape, shown)  # the echo was there, masked
        # Ingestion: the reason a gap is recorded with (and the worker logs).
        source = PrometheusSource(proxy.url, scrape_interval_s=30, timeout_s=5, retries=0, access=config)
        try:
            source.fetch(start=from_epoch(scenario.H), end=from_epoch(scenario.H + 3600), policy=mixed_policy())
        except AppError as exc:
            assert not _leaks(str(exc)) and MASK in str(exc), (kind, shape, str(exc))
        else:
            assert shape == "warning" and False, "an answer with a warning is partial: never ingested"
    assert proxy.requests >= 6


@pytest.mark.parametrize("field, url", [
    ("prometheus_url", "http://svc:SECRETVALUE@prometheus:9090"), ("prometheus_url", "https://SECRETVALUE@thanos/"),
    ("clusters", json.dumps([{"name": "east", "url": "http://svc:SECRETVALUE@prometheus:9090"}])),
])
def test_credentials_in_a_cluster_url_are_refused_pointing_at_the_auth_fields(field, url):
    with pytest.raises(ClusterConfigError) as caught:
        Settings(**{field: url})
    message = str(caught.value)
    assert "SECRETVALUE" not in message and "must not hold credentials" in message
    assert "password_file" in message and "bearer_token_file" in message


def test_the_doctor_cli_refuses_credentials_in_url_and_masks_an_echo(proxy, tmp_path, fresh_db_url):
    env = {k: v for k, v in os.environ.items() if k not in ("CHARGEBACK_PROMETHEUS_URL", "CHARGEBACK_CLUSTERS")}
    env |= {"CHARGEBACK_DATABASE_URL": fresh_db_url, "CHARGEBACK_PROMETHEUS_TIMEOUT_S": "5", "COLUMNS": "200"}
    bad = subprocess.run([CHARGEBACK, "doctor", "--url", f"http://svc:{PASSWORD}@127.0.0.1:1"], env=env,
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "must not hold credentials" in bad.stderr + bad.stdout
    assert not _leaks(bad.stdout + bad.stderr)
    proxy.shape = "500"
    clusters = [{"name": "east", "url": proxy.url, "bearer_token": TOKEN}]
    for args in (["doctor", "--json"], ["doctor"]):
        run = subprocess.run([CHARGEBACK, *args], env=env | {"CHARGEBACK_CLUSTERS": json.dumps(clusters)},
                             capture_output=True, text=True, timeout=120)
        assert run.returncode == 1 and proxy.requests and MASK in run.stdout, run.stdout + run.stderr
        assert not _leaks(run.stdout + run.stderr)


def test_the_doctor_page_shows_the_echo_masked(api, proxy, tmp_path):
    from app.auth.deps import Principal
    from app.web.doctor import doctor_target

    proxy.shape = "400"
    api.as_(Principal(name="ada", roles=frozenset({"admin"}), user_id=9))
    api.app.dependency_overrides[doctor_target] = lambda: _configs(proxy.url, tmp_path)["basic"]
    page = api.get("/admin/doctor", headers={"accept": "text/html"})
    assert page.status_code == 200 and "could not read" in page.text and proxy.requests
    assert MASK in page.text and not _leaks(page.text)
