"""The parse pool's forkserver lives only while a pool is open (workers/steps/pool.py).

Given two open pools, when one closes, then the forkserver still runs and
the other still drafts; when the last closes, then the forkserver process
has exited (it would otherwise hold its preloaded modules through the
sync's build); and a pool opened after that starts a new one and drafts.
"""

from __future__ import annotations

import os
from multiprocessing import forkserver
from pathlib import Path

from freshindex.services import Services
from freshindex.settings import load_settings
from freshindex.workers.steps import DocumentLine, Raw
from freshindex.workers.steps.pool import LinePool


def _server_pid() -> int | None:
    return getattr(forkserver._forkserver, "_forkserver_pid", None)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_the_forkserver_stops_with_the_last_pool_and_starts_again(tmp_path: Path) -> None:
    svc = Services(load_settings(data_dir=tmp_path))
    line = DocumentLine(svc.parsers, svc.chunker)
    raw = Raw(b"# Title\n\nsome text here\n", "a.md")
    first, second = LinePool(1), LinePool(1)
    try:
        assert first.draft(line, "d", raw).chunks
        pid = _server_pid()
        assert pid is not None and _alive(pid)
        first.close()
        assert _server_pid() == pid and _alive(pid)
        assert second.draft(line, "d", raw).chunks
    finally:
        first.close()
        second.close()
    assert _server_pid() is None and not _alive(pid)
    again = LinePool(1)
    try:
        assert again.works()
        assert again.draft(line, "d", raw).chunks
        assert _server_pid() not in (None, pid)
    finally:
        again.close()
    svc.close()
