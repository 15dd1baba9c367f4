"""``freshindex serve`` builds only what a query needs: no parsers, no PyMuPDF, no Celery.

The HTTP process is the one replicas scale; PyMuPDF is AGPL and heavy, and
the parsers, connectors and Celery are the workers' business.  The check runs
the real ``serve`` command in a fresh interpreter with ``uvicorn.run``
replaced by a function that queries the app it was handed (through
``TestClient``) and prints ``sorted(sys.modules)``: the debug view of what the
process loaded.  What it does not prove: that a later request of another
kind loads nothing more (only one query and the probes are sent).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from freshindex.services import Services
from freshindex.settings import load_settings
from freshindex.workers.runner import sync_inline
from tests.conftest import ROOT

FORBIDDEN = ("fitz", "pymupdf", "bs4", "tree_sitter", "celery", "freshindex.workers.parsing",
             "freshindex.workers.connectors", "freshindex.workers.pipeline", "freshindex.schedules")

SERVE = r"""
import json, sys
from unittest import mock

def run(app, **_):
    from fastapi.testclient import TestClient

    with TestClient(app) as http:
        ready = http.get("/readyz").json()
        answer = http.post("/v1/query", json={"question": "alpha particles", "kb": "kb1"}).json()
    print(json.dumps({"ready": ready, "answer": answer, "modules": sorted(sys.modules)}))

with mock.patch("uvicorn.run", run):
    from freshindex.cli import cli
    cli.main(["serve"], prog_name="freshindex", standalone_mode=False)
"""


@pytest.fixture
def indexed(tmp_path: Path) -> dict[str, str]:
    """A data dir with one built snapshot (synced here, in the test process), and the env that names it."""
    env = {"FRESHINDEX_DATA_DIR": str(tmp_path / "data"), "FRESHINDEX_EMBEDDING__PROVIDER": "hashing"}
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.md").write_text("# Alpha\n\nalpha particles are helium nuclei\n")
    svc = Services(load_settings(data_dir=tmp_path / "data", embedding={"provider": "hashing"}))
    try:
        svc.registry.add_source("s", kind="folder", location=str(src), owner="t", kb="kb1")
        assert sync_inline(svc, "s").build_status == "built"
    finally:
        svc.close()  # the embedded store has one opener: let the serve process open it
    return env


def test_serve_answers_a_query_without_loading_parsers_pymupdf_or_celery(indexed: dict[str, str]) -> None:
    # Given a built snapshot, When `freshindex serve` starts in a fresh process and answers one query
    env = {k: v for k, v in os.environ.items() if not k.startswith("FRESHINDEX_")} | indexed
    out = subprocess.run([sys.executable, "-c", SERVE], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    info = json.loads(out.stdout.strip().splitlines()[-1])
    # Then the query was really answered from the snapshot ...
    assert info["ready"]["ready"] is True
    assert info["answer"]["snapshot_id"] == "kb1-v1"
    assert [e["key"] for e in info["answer"]["evidence"]][:1] == ["a.md"]
    # ... and nothing of the parsing side was imported to do it
    modules = info["modules"]
    loaded = sorted(m for m in modules if any(m == f or m.startswith(f + ".") for f in FORBIDDEN))
    assert loaded == []
    assert "freshindex.services" in modules and "freshindex.api.app" in modules  # the probe saw the real path
