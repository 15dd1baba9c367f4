"""Pipeline health: Prometheus metrics and the freshness signals readers use."""

from health.metrics import Metrics

__all__ = ["Metrics"]
