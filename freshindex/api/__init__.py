"""The HTTP service: health, readiness, metrics and the query endpoint."""
