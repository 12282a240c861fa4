"""Bad answers from a Prometheus-compatible store become gaps with a reason, never ok hours or crashes.

A real HTTP server serves each body; the real `PrometheusSource` reads it; real ingestion records it.
"""

from __future__ import annotations

import json

import pytest

from app.core.errors import AppError, Unavailable
from app.core.timeutil import from_epoch
from app.metrics.ingest import ingest_hours, retry_delay
from app.metrics.prometheus_source import PrometheusSource
from tests.support import scenario
from tests.support.fake_http import FakeUpstream, elapsed
from tests.support.ingest import HOUR, status
from tests.support.policies import mixed_policy

H = scenario.H


def matrix(value: str = "2", **extra) -> bytes:
    series = {"metric": {"Hostname": "gpu-a100-01", "UUID": "GPU-A0"}, "values": [[H + 60, value]]}
    return json.dumps({"status": "success", "data": {"resultType": "matrix", "result": [series]}, **extra}).encode()


JSON = "application/json"
BAD = {
    "nan": ((200, JSON, matrix("NaN")), "impossible value 'NaN'"),
    "inf": ((200, JSON, matrix("+Inf")), "impossible value '+Inf'"),
    "huge": ((200, JSON, matrix("1e30")), "impossible value '1e30'"),
    "negative": ((200, JSON, matrix("-3")), "impossible value '-3'"),
    "not a number": ((200, JSON, matrix("two")), "is not a number"),
    "missing keys": ((200, JSON, b'{"status": "success", "data": {"resultType": "matrix", "result": [{"metric": {}}]}}'),
                     "lacks metric/values"),
    "wrong types": ((200, JSON, b'{"status": "success", "data": {"resultType": "matrix", "result": [{"metric": {}, '
                                b'"values": "1 2"}]}}'), "lacks metric/values"),
    "no data": ((200, JSON, b'{"status": "success"}'), "not a matrix"),
    "html": ((200, "text/html", b"<html><body>502 Bad Gateway (nginx)</body></html>"), "not JSON"),
    "status error": ((200, JSON, b'{"status": "error", "errorType": "execution", "error": "query timed out"}'),
                     "status 'error': execution query timed out"),
    "warnings": ((200, JSON, matrix(warnings=["store gateway 3 unreachable: partial data"])),
                 "partial response: store gateway 3 unreachable"),
    "vm partial": ((200, JSON, matrix(isPartial=True)), "partial response"),
    "http 503": ((503, "text/plain", b"overloaded"), "HTTP 503 overloaded"),
}


@pytest.fixture(scope="module")
def upstream():
    with FakeUpstream() as up:
        yield up


def source(url: str, **kwargs) -> PrometheusSource:
    return PrometheusSource(url, scrape_interval_s=30, timeout_s=2, deadline_s=1.0, retries=0, **kwargs)


@pytest.mark.parametrize("case", sorted(BAD))
def test_each_malformed_answer_is_unavailable_with_its_reason(upstream, case):
    upstream.drip, (upstream.answer, reason) = False, BAD[case]
    with pytest.raises(Unavailable) as raised:
        source(upstream.url).fetch(start=from_epoch(H), end=from_epoch(H) + HOUR, policy=mixed_policy())
    assert reason in raised.value.detail


def test_a_server_that_drips_bytes_is_cut_off_at_the_total_deadline(upstream):
    upstream.drip = True
    try:
        def fetch():
            with pytest.raises(Unavailable, match="within the 1 s deadline"):
                source(upstream.url).fetch(start=from_epoch(H), end=from_epoch(H) + HOUR, policy=mixed_policy())
        # Every read returns within 0.05 s, so only the wall-clock deadline can stop it.
        assert elapsed(fetch) < 5
    finally:
        upstream.drip = False


@pytest.mark.parametrize("case", ["nan", "html", "warnings", "missing keys"])
def test_malformed_answers_become_gaps_with_backoff_never_ok_hours(session, policy_id, upstream, case):
    upstream.drip, (upstream.answer, reason) = False, BAD[case]
    now = from_epoch(H + 5 * 3600)
    report = ingest_hours(session=session, source=source(upstream.url), start=from_epoch(H), end=from_epoch(H) + 2 * HOUR,
                          scrape_interval_s=30, hours_per_fetch=1, now=now)
    assert report.ok == [] and report.gaps == [from_epoch(H), from_epoch(H + 3600)]
    gap = status(session, H)
    assert gap.status == "gap" and reason in gap.last_error and gap.next_retry_at == now + retry_delay(1)


def test_a_dripping_server_during_ingest_is_a_gap(session, policy_id, upstream):
    upstream.drip = True
    try:
        report = ingest_hours(session=session, source=source(upstream.url), start=from_epoch(H),
                              end=from_epoch(H) + HOUR, scrape_interval_s=30)
    finally:
        upstream.drip = False
    assert report.gaps == [from_epoch(H)] and "deadline" in status(session, H).last_error


@pytest.mark.parametrize("body", [matrix("2"), matrix("2", warnings=["PromQL info: metric might not be a counter"]),
                                  matrix("2", isPartial=False)])
def test_a_well_formed_answer_still_reads(upstream, body):
    upstream.drip, upstream.answer = False, (200, JSON, body)
    try:
        batch = source(upstream.url).fetch(start=from_epoch(H), end=from_epoch(H) + HOUR, policy=mixed_policy())
    except AppError as exc:  # pragma: no cover - a failure message worth reading
        pytest.fail(exc.detail)
    assert batch.occupancy
