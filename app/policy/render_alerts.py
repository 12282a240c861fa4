"""Prometheus alerting rules: one per SLA red line, plus the portal's own ingestion health.

The ingestion alerts read two gauges the portal exports on its metrics endpoint; their names are
defined here so the exporter and the rules cannot drift apart.
"""

from __future__ import annotations

import json
from decimal import Decimal

from app.policy.document import PolicyDocument, Sla
from app.policy.render_k8s import dec

# Hours of the current open billing period marked as gaps (data could not be read).
INGEST_GAP_METRIC = "chargeback_ingestion_gap_hours"
# Seconds between now and the end of the last hour ingested successfully.
INGEST_LAG_METRIC = "chargeback_ingestion_lag_seconds"
INGEST_LAG_LIMIT_SECONDS = 7200

SLA_ALERT = "ChargebackSlaP99AboveRedLine"
GAP_ALERT = "ChargebackIngestGap"
LAG_ALERT = "ChargebackIngestLagging"


def p99_expr(sla: Sla) -> str:
    """PromQL that is true while the service's trailing-5m P99 is above its red line (in seconds)."""
    seconds = dec(Decimal(sla.p99_ms) / Decimal(1000))
    return f"histogram_quantile(0.99, sum by (le) (rate({sla.latency_histogram}[5m]))) > {seconds}"


def literal(text: str) -> str:
    """`text` safe inside a Prometheus label/annotation template (both are Go templates)."""
    if "{{" not in text:
        return text
    # A Go string literal inside an action prints verbatim; JSON escaping is valid Go syntax.
    return "{{ " + json.dumps(text, ensure_ascii=False) + " }}"


def sla_rule(sla: Sla, currency: str) -> dict:
    """The alerting rule for one SLA red line."""
    # The query's result has no labels (sum by le), so $labels cannot carry the names: they are
    # written into the rule, escaped so that a name like "a{{b" cannot break template expansion.
    service, tenant, pool = literal(sla.service), literal(sla.tenant), literal(sla.pool)
    return {
        "alert": SLA_ALERT,
        "expr": p99_expr(sla),
        # Same definition as a billed breach minute: P99 over the trailing 5 minutes, held 5 minutes.
        "for": "5m",
        "labels": {"severity": "critical", "service": service, "tenant": tenant, "pool": pool},
        "annotations": {
            "summary": f"{service}: P99 latency above {dec(sla.p99_ms)} ms for 5 minutes",
            "description": (
                f"P99 of {service} (tenant {tenant}, pool {pool}) is {{{{ $value | humanizeDuration }}}}, "
                f"above its {dec(sla.p99_ms)} ms red line. Each breach minute costs co-located "
                f"training/preprocessing {dec(sla.penalty_per_breach_minute)} {literal(currency)}."
            ),
        },
    }


def ingestion_rules() -> list[dict]:
    """Alerts on the portal's own ingestion: gap hours (never billed as zero) and lag."""
    return [
        {
            "alert": GAP_ALERT,
            "expr": f"{INGEST_GAP_METRIC} > 0",
            "for": "15m",
            "labels": {"severity": "warning"},
            "annotations": {
                "summary": "Chargeback ingestion has gap hours",
                "description": "{{ $value }} hour(s) of the open period could not be read and are not billed; re-ingest them.",
            },
        },
        {
            "alert": LAG_ALERT,
            "expr": f"{INGEST_LAG_METRIC} > {INGEST_LAG_LIMIT_SECONDS}",
            "for": "5m",
            "labels": {"severity": "warning"},
            "annotations": {
                "summary": "Chargeback ingestion is more than 2 hours behind",
                "description": "The last ingested hour ended {{ $value | humanizeDuration }} ago.",
            },
        },
    ]


def alert_rules(doc: PolicyDocument) -> dict:
    """The rules file (`groups:`) for a policy version."""
    slas = sorted(doc.sla, key=lambda s: s.service)
    groups = []
    if slas:
        # A stable group name: renaming it per version would reset pending alerts on every release.
        groups.append({"name": "chargeback-sla", "rules": [sla_rule(s, doc.pricing.currency) for s in slas]})
    groups.append({"name": "chargeback-ingestion", "rules": ingestion_rules()})
    return {"groups": groups}
