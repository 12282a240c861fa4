"""CHARGEBACK_CLUSTERS / _FILE: several sources, each with its own access; the single Prometheus URL stays one cluster."""

from __future__ import annotations

import json

import pytest

from app.core.clusters import DEFAULT_CLUSTER, ClusterConfigError
from app.core.settings import Settings

SECRET = "tok-9f8e7d6c5b4a"


def test_nothing_configured_is_the_simulator_as_the_default_cluster():
    [only] = Settings().cluster_configs()
    assert (only.name, only.url, only.is_simulator) == (DEFAULT_CLUSTER, None, True)
    assert (only.simulator.seed, only.simulator.gpus) == (42, 32)
    assert Settings(simulator_seed=7, simulator_gpus=40).cluster_configs()[0].simulator.gpus == 40


def test_the_single_prometheus_url_is_the_default_cluster():
    [only] = Settings(prometheus_url="http://prom:9090").cluster_configs()
    assert (only.name, only.url, only.is_simulator) == (DEFAULT_CLUSTER, "http://prom:9090", False)
    # A copy with another URL (what tests and the CLI's --url do) reads that URL, not the first one's.
    copy = Settings().model_copy(update={"prometheus_url": "http://other:9090"})
    assert copy.cluster_names() == [DEFAULT_CLUSTER] and copy.cluster(DEFAULT_CLUSTER).url == "http://other:9090"


def test_several_clusters_inline_each_with_its_own_access(tmp_path):
    token, ca = tmp_path / "token", tmp_path / "ca.pem"
    token.write_text(SECRET + "\n")
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    clusters = [
        {"name": "east", "url": "https://east.example:9090", "bearer_token_file": str(token), "ca_file": str(ca)},
        {"name": "west", "url": "http://west.example:9090", "username": "ops", "password": SECRET},
        {"name": "lab", "simulator": {"seed": 7, "gpus": 25}},
    ]
    settings = Settings(clusters=json.dumps(clusters))
    assert settings.cluster_names() == ["east", "west", "lab"]
    east, west, lab = settings.cluster_configs()
    assert east.token() == SECRET and west.basic_password() == SECRET and lab.is_simulator
    # Rotated at the source: the next request reads the new token, no restart.
    token.write_text("rotated\n")
    assert east.token() == "rotated"
    described = " | ".join(c.describe() for c in settings.cluster_configs())
    assert described == ("https://east.example:9090, bearer token file, private CA | "
                         "http://west.example:9090, basic auth as ops | the built-in simulator (seed 7, 25 GPUs)")
    assert SECRET not in repr(settings.cluster_configs()) and SECRET not in described


def test_a_clusters_file_in_yaml(tmp_path):
    path = tmp_path / "clusters.yaml"
    path.write_text("- name: east\n  url: http://east:9090\n- name: west\n  url: http://west:9090\n  tls_verify: false\n")
    settings = Settings(clusters_file=str(path))
    assert settings.cluster_names() == ["east", "west"] and settings.cluster("west").tls_verify is False
    assert settings.cluster("north") is None


@pytest.mark.parametrize(("clusters", "message"), [
    ([{"name": "east", "url": "ftp://east", "password": SECRET}], "CHARGEBACK_CLUSTERS[east]: url must be an http://"),
    ([{"name": "east", "url": "http://east", "username": "u", "password": SECRET, "bearer_token": SECRET}],
     "CHARGEBACK_CLUSTERS[east]: give basic auth (username) or a bearer token, not both"),
    ([{"name": "east", "url": "http://east", "password": SECRET}], "CHARGEBACK_CLUSTERS[east]: password needs a username"),
    ([{"name": "east", "url": "http://east", "bearer_token": [SECRET]}], "CHARGEBACK_CLUSTERS[east].bearer_token: "),
    ([{"name": "east", "url": "http://east", "bearer_token_file": "/nonexistent/" + SECRET}],
     "CHARGEBACK_CLUSTERS[east]: bearer_token_file /nonexistent/"),
    ([{"name": "East!", "url": "http://east"}], "CHARGEBACK_CLUSTERS[0].name: String should match pattern"),
    ([{"name": "east", "url": "http://a"}, {"name": "east", "url": "http://b"}],
     "CHARGEBACK_CLUSTERS[east].name: cluster 'east' is defined twice"),
    ([{"name": "east", "url": "http://a", "token": SECRET}], "CHARGEBACK_CLUSTERS[east].token: Extra inputs"),
    ([{"name": "east", "key_file": "/k"}], "CHARGEBACK_CLUSTERS[east]: "),
    ([], "CHARGEBACK_CLUSTERS must be a non-empty list"),
])
def test_a_bad_definition_names_the_field_and_never_the_secret(clusters, message):
    with pytest.raises(ClusterConfigError) as caught:
        Settings(clusters=json.dumps(clusters))
    assert str(caught.value).startswith(message), str(caught.value)
    # The path of a missing token file is not a secret; the token itself never appears.
    assert SECRET not in str(caught.value).replace("/nonexistent/" + SECRET, "")


def test_not_json_and_not_both_ways_at_once(tmp_path):
    with pytest.raises(ClusterConfigError, match="^CHARGEBACK_CLUSTERS is not JSON"):
        Settings(clusters="east=http://east:9090")
    with pytest.raises(ClusterConfigError, match="not both"):
        Settings(clusters='[{"name": "a"}]', clusters_file=str(tmp_path / "x"))
    with pytest.raises(ClusterConfigError, match="CHARGEBACK_PROMETHEUS_URL is the single-cluster setting"):
        Settings(clusters='[{"name": "a", "url": "http://a"}]', prometheus_url="http://prom:9090")
    with pytest.raises(ClusterConfigError, match="cannot read"):
        Settings(clusters_file=str(tmp_path / "missing.yaml"))


def test_the_environment_variable_is_read(monkeypatch):
    monkeypatch.setenv("CHARGEBACK_CLUSTERS", '[{"name": "east", "url": "http://east:9090"}, {"name": "west"}]')
    settings = Settings()
    assert settings.cluster_names() == ["east", "west"] and settings.cluster("west").is_simulator
