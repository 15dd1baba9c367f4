"""Where two snapshots meet in the parent tree, and which changesets lie between them.

The builder replays a recycled side along this path (:mod:`snapshots.bluegreen`)
and rollback decides from it whether a retained version can be reached
(:mod:`snapshots.lifecycle`).
"""

from __future__ import annotations

from freshindex.registry import SnapshotInfo


def tree_path(by_id: dict[str, SnapshotInfo], a: SnapshotInfo,
              b: SnapshotInfo) -> tuple[list[SnapshotInfo], list[SnapshotInfo]] | None:
    """The snapshots from ``a`` and from ``b`` up to their common ancestor in the
    parent tree (each list nearest first, the ancestor left out), or None when
    they share none.  Their changesets are every chunk that can differ between
    the two versions: ``a``'s side undone, then ``b``'s side applied."""

    def chain(s: SnapshotInfo | None) -> list[SnapshotInfo]:
        out: list[SnapshotInfo] = []
        while s is not None and s.id not in {o.id for o in out}:
            out.append(s)
            s = by_id.get(s.parent_id) if s.parent_id else None
        return out

    up_a, up_b = chain(a), chain(b)
    ids_b = [s.id for s in up_b]
    common = next((s for s in up_a if s.id in ids_b), None)
    if common is None:
        return None
    return up_a[: up_a.index(common)], up_b[: ids_b.index(common.id)]


def lineage_path(by_id: dict[str, SnapshotInfo], a: SnapshotInfo, b: SnapshotInfo) -> list[SnapshotInfo] | None:
    """The snapshots between ``a`` and ``b`` in the parent tree (:func:`tree_path`,
    both sides): their changesets are every difference between the two
    collections.  None when there is no common ancestor or a full build (new
    model or pipeline: every vector differs) lies on the path."""
    sides = tree_path(by_id, a, b)
    if sides is None:
        return None
    path = sides[0] + sides[1]
    if any(s.strategy == "full" for s in path):
        return None
    return path


__all__ = ["lineage_path", "tree_path"]
