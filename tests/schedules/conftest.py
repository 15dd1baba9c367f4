"""Shared fixtures of the schedule tests: the embedded default (``svc``)."""

from tests.embedded_fixture import svc

__all__ = ["svc"]
