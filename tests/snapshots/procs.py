"""Processes the snapshot tests run next to themselves (``python -m tests.snapshots.procs``).

* ``build DATA_DIR PHASE MARKER``: build the default knowledge base; on
  reaching PHASE, create MARKER and hang (the test kills it with SIGKILL).
* ``read DATA_DIR QUESTION OUT STOP``: query in a loop until STOP exists,
  writing one JSON line per query to OUT.

Settings come from the environment (FRESHINDEX_*), as in production.
"""

from __future__ import annotations

import json
import sys
import time
import traceback
from pathlib import Path

from freshindex.services import Services
from freshindex.settings import load_settings


def build(data_dir: str, phase: str, marker: str) -> None:
    svc = Services(load_settings(data_dir=data_dir))

    def hook(name: str) -> None:
        if name == phase:
            Path(marker).write_text(name)
            time.sleep(3600)

    svc.builder.on_phase = hook
    svc.builder.build("kb1", actor="crash-test", reason="crash test")


def read(data_dir: str, question: str, out: str, stop: str) -> None:
    svc = Services(load_settings(data_dir=data_dir))
    with open(out, "a") as fh:
        while not Path(stop).exists():
            record: dict = {"t": time.time()}
            try:
                packet = svc.client.retrieve(question, kb="kb1", limit=5)
                record.update(snapshot=packet.snapshot_id, texts=[e.text for e in packet.evidence],
                              chunk_ids=[e.chunk_id for e in packet.evidence], dropped=packet.withheld)
            except Exception as exc:  # every failure is a finding: record it
                record.update(error=f"{type(exc).__name__}: {exc}", tb=traceback.format_exc()[-800:])
            fh.write(json.dumps(record) + "\n")
            fh.flush()


if __name__ == "__main__":
    {"build": build, "read": read}[sys.argv[1]](*sys.argv[2:])
