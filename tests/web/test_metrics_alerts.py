"""The rendered ingestion alerts fire on what the portal's own /metrics serves (promtool evaluates them).

The series fed to `promtool test rules` are the gauges scraped from the real app, under the names it
serves: renaming a metric on either side (exporter or rule renderer) fails these tests.
"""

from __future__ import annotations

import math
import subprocess

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from app.policy.render import RULES_FILE, render_bundle
from app.policy.render_alerts import GAP_ALERT, INGEST_GAP_METRIC, INGEST_LAG_METRIC, LAG_ALERT
from tests.support import rollups as builders
from tests.support.policy_docs import PROMTOOL, doc_of, spec_data

pytestmark = pytest.mark.anyio

MINUTES = 30  # each scraped value held for half an hour: past every rule's `for`


async def scraped_gauges(client) -> list[dict]:
    """Every finite gauge sample of the portal's /metrics as a promtool input series, held constant."""
    response = await client.get("/metrics")
    assert response.status_code == 200
    series = []
    for family in text_string_to_metric_families(response.text):
        if family.type != "gauge":
            continue
        for sample in family.samples:
            if math.isfinite(sample.value):
                labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
                series.append({"series": f"{sample.name}{{{labels}}}", "values": f"{sample.value!r}x{MINUTES}"})
    assert series
    return series


def promtool_alerts(series: list[dict], expected: dict[str, list[dict]], tmp_path) -> subprocess.CompletedProcess:
    """`promtool test rules` of the rendered rules file on `series`: alert name -> expected alerts at 30m."""
    (tmp_path / "rules.yaml").write_text(render_bundle(doc_of(spec_data()), 1)[RULES_FILE])
    tests = {
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": series,
            "alert_rule_test": [{"eval_time": f"{MINUTES}m", "alertname": name, "exp_alerts": alerts}
                                for name, alerts in expected.items()],
        }],
    }
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump(tests, sort_keys=False))
    return subprocess.run([PROMTOOL, "test", "rules", "tests.yaml"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=60)


def hours_minutes_seconds(seconds: float) -> str:
    """Prometheus' `humanizeDuration` for 1 h to 1 day: whole hours, minutes and seconds."""
    whole = int(seconds)
    return f"{whole // 3600}h {whole // 60 % 60}m {whole % 60}s"


def value_of(series: list[dict], name: str) -> float:
    [values] = [s["values"] for s in series if s["series"] == f"{name}{{}}"]
    return float(values.partition("x")[0])


async def test_gap_and_lag_alerts_fire_on_the_served_metrics(client, session, tmp_path):
    hours = builders.recent_hours(6)
    builders.ingest_hour(session, hours[0])
    builders.ingest_hour(session, hours[1])  # newest ok hour ended 4-5 hours ago: lag above the 2 h limit
    builders.ingest_hour(session, hours[2], status="gap")
    builders.ingest_hour(session, hours[3], status="gap")
    session.commit()
    series = await scraped_gauges(client)
    lag = value_of(series, INGEST_LAG_METRIC)
    assert 4 * 3600 <= lag < 5 * 3600 + 60 and value_of(series, INGEST_GAP_METRIC) == 2
    done = promtool_alerts(series, {
        GAP_ALERT: [{"exp_labels": {"severity": "warning"}, "exp_annotations": {
            "summary": "Chargeback ingestion has gap hours",
            "description": "2 hour(s) of the open period could not be read and are not billed; re-ingest them."}}],
        LAG_ALERT: [{"exp_labels": {"severity": "warning"}, "exp_annotations": {
            "summary": "Chargeback ingestion is more than 2 hours behind",
            "description": f"The last ingested hour ended {hours_minutes_seconds(lag)} ago."}}],
    }, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr


async def test_no_alert_when_ingestion_is_current_and_complete(client, session, tmp_path):
    for hour in builders.recent_hours(3):
        builders.ingest_hour(session, hour)  # newest ended less than an hour ago, no gap
    session.commit()
    series = await scraped_gauges(client)
    done = promtool_alerts(series, {GAP_ALERT: [], LAG_ALERT: []}, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert value_of(series, INGEST_LAG_METRIC) < 3600 and value_of(series, INGEST_GAP_METRIC) == 0
    # The same check fails when the alert is expected: the test can tell firing from silence.
    assert promtool_alerts(series, {GAP_ALERT: [{"exp_labels": {"severity": "warning"}}]}, tmp_path).returncode != 0
