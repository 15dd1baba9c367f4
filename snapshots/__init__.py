"""Collection versions: build, verify, atomic alias swap, retention."""

from freshindex.snapshots.builder import Builder, BuildResult, point_payload
from freshindex.snapshots.lock import WriterLock
from freshindex.snapshots.naming import Naming

__all__ = ["BuildResult", "Builder", "Naming", "WriterLock", "point_payload"]
