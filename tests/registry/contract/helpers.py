"""Small builders the contract suites share (a source, a staged document): :mod:`freshindex.testing.registry`'s."""

from __future__ import annotations

from freshindex.testing.registry import add_source, draft, stage

__all__ = ["add_source", "draft", "stage"]
