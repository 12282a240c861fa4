"""The deterministic cluster simulator: the embedded default metrics source and the test fixture."""

from app.metrics.simulator.core import Simulator
from app.metrics.simulator.server import serve_exporter
from app.metrics.simulator.truth import GroundTruth

__all__ = ["GroundTruth", "Simulator", "serve_exporter"]
