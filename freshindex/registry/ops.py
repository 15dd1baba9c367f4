"""The old name of :mod:`registry.reports`, kept only for ``bench/transfer.py``'s import; delete it with that import."""

from freshindex.registry.reports import documents

__all__ = ["documents"]
