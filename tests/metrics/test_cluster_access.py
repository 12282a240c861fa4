"""Each cluster's own access, against real servers: mTLS (client certificate, private CA) with basic auth on
Prometheus's own HTTPS, a bearer token (from a file, rotated without a restart) through a gateway, TLS verification."""

from __future__ import annotations

import pytest
from pydantic import SecretStr

from app.core.clusters import ClusterConfig
from app.core.errors import AppError
from app.core.timeutil import from_epoch
from app.metrics.attribution import attribute_hour
from app.metrics.prometheus_api import PromReader
from app.metrics.prometheus_source import PrometheusSource
from tests.support import scenario
from tests.support.policies import mixed_policy
from tests.support.secured import BearerProxy, Pki, SecuredPrometheus

H = scenario.H
PASSWORD = "correct horse battery staple"


def hour_usage(source: PrometheusSource) -> dict:
    batch = source.fetch(start=from_epoch(H), end=from_epoch(H + 3600), policy=mixed_policy())
    rollup = attribute_hour(batch, hour=H, policy=mixed_policy(), scrape_interval_s=30)
    return {(u.pool, u.tenant, u.klass, u.dark): u.gpu_seconds for u in rollup.usage}


def source(config: ClusterConfig) -> PrometheusSource:
    return PrometheusSource(config.url or "", scrape_interval_s=30, timeout_s=10, retries=0, access=config)


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    root = tmp_path_factory.mktemp("secured")
    pki = Pki(root / "pki")
    server = SecuredPrometheus(root / "prom", pki=pki, users={"ops": PASSWORD})
    server.backfill(scenario.text(1))
    with server:
        yield server


def test_mtls_and_basic_auth_from_files(secured, scenario_prometheus, tmp_path):
    pki = secured.pki
    password = tmp_path / "password"
    password.write_text(PASSWORD + "\n")
    config = ClusterConfig(name="east", url=secured.url, username="ops", password_file=str(password),
                           ca_file=str(pki.ca), cert_file=str(pki.client_cert), key_file=str(pki.client_key))
    expected = hour_usage(PrometheusSource(scenario_prometheus.url, scrape_interval_s=30))
    assert expected and hour_usage(source(config)) == expected
    # The same reader the doctor and previews use, with the same access.
    assert PromReader(secured.url, timeout_s=10, access=config).query("up", H + 1800) is not None

    refusals = {
        "no client certificate": config.model_copy(update={"cert_file": None, "key_file": None}),
        "wrong password": config.model_copy(update={"password_file": None, "password": SecretStr("nope")}),
        "server certificate of an unknown CA": config.model_copy(update={"ca_file": None}),
    }
    for what, bad in refusals.items():
        with pytest.raises(AppError) as refused:  # Unavailable or Invalid: ingestion records the hours as gaps
            source(bad).fetch(start=from_epoch(H), end=from_epoch(H + 3600), policy=mixed_policy())
        assert ("HTTP 401" in refused.value.detail) == (what == "wrong password"), (what, refused.value.detail)
    # tls_verify false: the server's certificate is not checked (a test install), the client certificate still sent.
    unverified = config.model_copy(update={"ca_file": None, "tls_verify": False})
    assert hour_usage(source(unverified)) == expected


def test_a_bearer_token_file_is_read_at_each_request(scenario_prometheus, tmp_path):
    token = tmp_path / "token"
    token.write_text("first-token\n")
    expected = hour_usage(PrometheusSource(scenario_prometheus.url, scrape_interval_s=30))
    with BearerProxy(scenario_prometheus.url, token) as proxy:
        config = ClusterConfig(name="west", url=proxy.url, bearer_token_file=str(token))
        west = source(config)
        assert hour_usage(west) == expected and proxy.refused == 0
        token.write_text("rotated-token\n")  # the gateway and the file change together: no restart needed
        assert hour_usage(west) == expected and proxy.refused == 0
        inline = source(ClusterConfig(name="west", url=proxy.url, bearer_token="first-token"))
        with pytest.raises(AppError, match="HTTP 401"):
            inline.fetch(start=from_epoch(H), end=from_epoch(H + 3600), policy=mixed_policy())
        assert proxy.refused >= 1
