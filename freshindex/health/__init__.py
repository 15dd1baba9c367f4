"""Pipeline health: Prometheus metrics and the freshness signals readers use."""

from freshindex.health.metrics import Metrics

__all__ = ["Metrics"]
