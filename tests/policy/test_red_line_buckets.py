"""Policy validation warns when an SLA red line is not a bucket boundary of the service's histogram,
with the `le` values read from a real Prometheus, and names the nearest boundaries."""

from __future__ import annotations

from decimal import Decimal

from app.metrics.histograms import VLLM_E2E_LATENCY_S, boundaries
from app.metrics.serving import bucket_lookup
from app.policy.service import dump_yaml
from app.policy.validation import validate
from app.review.impact import configured_latency_buckets as latency_buckets
from tests.support import scenario
from tests.support.policies import mixed_policy
from tests.support.review import VALIDATE_URL as URL
from tests.support.review import client_for

VLLM = boundaries(VLLM_E2E_LATENCY_S)
SEARCH = 'vllm:e2e_request_latency_seconds_bucket{namespace="search-prod"}'


def with_red_line(p99_ms: str):
    policy = mixed_policy()
    return policy.model_copy(update={"sla": [policy.sla[0].model_copy(update={"p99_ms": Decimal(p99_ms)})]})


def test_validation_reads_the_buckets_from_prometheus(scenario_prometheus):
    lookup = bucket_lookup(scenario_prometheus.url, at=scenario.H + 3600)
    assert lookup(SEARCH) == VLLM  # vLLM's real boundaries, as the scenario's exporter has them
    assert lookup('nothing_bucket{job="x"}') is None
    warnings = [(e.path, e.message) for e in validate(with_red_line("250"), latency_buckets=lookup) if e.severity == "warning"]
    assert [p for p, m in warnings if "bucket boundary" in m] == ["sla[search-chat].p99_ms"]
    assert not [e for e in validate(with_red_line("300"), latency_buckets=lookup) if "bucket boundary" in e.message]
    # Unreachable Prometheus: no buckets known, no warning, no error.
    assert bucket_lookup("http://127.0.0.1:9", timeout_s=1)(SEARCH) is None


def test_the_validate_endpoint_returns_the_warning(fresh_engine):
    client, headers = client_for(fresh_engine)
    client.app.dependency_overrides[latency_buckets] = lambda: (lambda selector: VLLM if selector == SEARCH else None)
    answer = client.post(URL, headers=headers, json={"document": dump_yaml(with_red_line("250"))})
    assert answer.status_code == 200, answer.text
    found = [w for w in answer.json()["warnings"] if w["path"] == "sla[search-chat].p99_ms"]
    assert len(found) == 1 and "nearest boundaries are 300 ms" in found[0]["message"]
    answer = client.post(URL, headers=headers, json={"document": dump_yaml(with_red_line("300"))})
    assert not [w for w in answer.json()["warnings"] if w["path"] == "sla[search-chat].p99_ms"]
