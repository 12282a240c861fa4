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


_LIVE: dict[tuple, object] = {}


def get_live_source(settings: Settings):
    """The live fleet's source: the configured Prometheus, else the same simulator ingestion reads (built once)."""
    if settings.prometheus_url:
        from app.metrics.live import PrometheusLive

        return PrometheusLive(settings.prometheus_url, timeout_s=min(settings.prometheus_timeout_s, 10.0))
    key = (settings.simulator_seed, settings.simulator_gpus, settings.scrape_interval_s or 30)
    if key not in _LIVE:
        from app.metrics.simulator import Simulator
        from app.metrics.simulator.live import SimulatorLive

        _LIVE[key] = SimulatorLive(Simulator(seed=key[0], gpus=key[1], scrape_interval_s=key[2]))
    return _LIVE[key]
