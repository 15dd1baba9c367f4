"""Collection versions: build, verify, atomic alias swap, retention."""

from freshindex.core.naming import Naming
from freshindex.snapshots.builder import Builder, BuildOptions, BuildResult, point_payload
from freshindex.snapshots.lock import WriterLock

__all__ = ["BuildOptions", "BuildResult", "Builder", "Naming", "WriterLock", "point_payload"]
