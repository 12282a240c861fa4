"""Which metrics source each cluster is read from: its Prometheus-compatible URL, or the built-in simulator.

One cluster, `default`, unless CHARGEBACK_CLUSTERS lists several (app/core/clusters.py); without any
configuration the default cluster is the simulator.
"""

from __future__ import annotations

from app.core.clusters import DEFAULT_CLUSTER, ClusterConfig, SimulatorCluster
from app.core.settings import Settings
from app.metrics.types import MetricsSource


def source_for(config: ClusterConfig, settings: Settings) -> MetricsSource:
    """One cluster's source (the same HTTP API serves Prometheus, Thanos, Mimir and VictoriaMetrics)."""
    if config.url:
        from app.metrics.labels import ExporterIdentity
        from app.metrics.prometheus_source import PrometheusSource

        return PrometheusSource(config.url, scrape_interval_s=settings.scrape_interval_s,
                                timeout_s=settings.prometheus_timeout_s, deadline_s=settings.prometheus_deadline_s,
                                exporter=ExporterIdentity.from_settings(settings), access=config)
    from app.metrics.simulator import Simulator

    sim = config.simulator or SimulatorCluster(seed=settings.simulator_seed, gpus=settings.simulator_gpus)
    return Simulator(seed=sim.seed, gpus=sim.gpus, scrape_interval_s=settings.scrape_interval_s or 30).source()


def get_sources(settings: Settings) -> dict[str, MetricsSource]:
    """Every configured cluster's source, by cluster name, in configuration order."""
    return {c.name: source_for(c, settings) for c in settings.cluster_configs()}


def get_source(settings: Settings, cluster: str | None = None) -> MetricsSource:
    """One cluster's source: `cluster`, else the default cluster, else the first configured."""
    return source_for(cluster_config(settings, cluster), settings)


def prometheus_clusters(settings: Settings) -> list[ClusterConfig]:
    """The configured clusters read from a Prometheus-compatible URL (not the simulator)."""
    return [c for c in settings.cluster_configs() if c.url]


def cluster_config(settings: Settings, cluster: str | None) -> ClusterConfig:
    """The named cluster's configuration (404 when unknown), else the default cluster's, else the first."""
    configs = settings.cluster_configs()
    if cluster is not None:
        found = settings.cluster(cluster)
        if found is None:
            from app.core.errors import NotFound

            raise NotFound(f"unknown cluster '{cluster}' (configured: {', '.join(settings.cluster_names())})")
        return found
    return settings.cluster(DEFAULT_CLUSTER) or configs[0]


_LIVE: dict[tuple, object] = {}


def get_live_source(settings: Settings, cluster: str | None = None):
    """The live fleet's source of one cluster: its Prometheus, else the same simulator ingestion reads (built once)."""
    config = cluster_config(settings, cluster)
    if config.url:
        from app.metrics.live import PrometheusLive

        return PrometheusLive(config.url, timeout_s=min(settings.prometheus_timeout_s, 10.0), access=config)
    sim = config.simulator or SimulatorCluster(seed=settings.simulator_seed, gpus=settings.simulator_gpus)
    key = (sim.seed, sim.gpus, settings.scrape_interval_s or 30)
    if key not in _LIVE:
        from app.metrics.simulator import Simulator
        from app.metrics.simulator.live import SimulatorLive

        _LIVE[key] = SimulatorLive(Simulator(seed=key[0], gpus=key[1], scrape_interval_s=key[2]))
    return _LIVE[key]
