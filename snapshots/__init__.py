"""Collection versions: build, verify, atomic alias swap, retention."""

from snapshots.builder import Builder, BuildResult, point_payload
from snapshots.lock import WriterLock
from snapshots.naming import Naming

__all__ = ["BuildResult", "Builder", "Naming", "WriterLock", "point_payload"]
