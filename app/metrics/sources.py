"""Which metrics source the portal reads: Prometheus when CHARGEBACK_PROMETHEUS_URL is set, else the simulator."""

from __future__ import annotations

from app.core.settings import Settings
from app.metrics.types import MetricsSource


def get_source(settings: Settings) -> MetricsSource:
    """The configured source (the same HTTP API serves Prometheus, Thanos, Mimir and VictoriaMetrics)."""
    if settings.prometheus_url:
        from app.metrics.labels import ExporterIdentity
        from app.metrics.prometheus_source import PrometheusSource

        return PrometheusSource(settings.prometheus_url, scrape_interval_s=settings.scrape_interval_s,
                                timeout_s=settings.prometheus_timeout_s, deadline_s=settings.prometheus_deadline_s,
                                exporter=ExporterIdentity.from_settings(settings))
    from app.metrics.simulator import Simulator

    return Simulator(seed=settings.simulator_seed, gpus=settings.simulator_gpus,
                     scrape_interval_s=settings.scrape_interval_s or 30).source()
