"""Commands that neither parse nor embed start without the heavy libraries.

Given a fresh data folder, when ``freshindex --help``, ``sources list`` and
``snapshots list`` run in a new interpreter, then none of PyMuPDF,
onnxruntime, the tokenizer, tree-sitter or botocore was imported (each costs
from tenths of a second to seconds of start-up).  Behaviour, not wall clock:
the start-up times are measured with ``python -X importtime`` or hyperfine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

HEAVY = ("fitz", "pymupdf", "onnxruntime", "tokenizers", "botocore", "boto3", "tree_sitter", "celery")

PROBE = """
import json, sys
args, names = json.loads(sys.argv[1]), json.loads(sys.argv[2])
from freshindex.cli import main
sys.argv = ["freshindex", *args]
try:
    main()
except SystemExit as exc:
    code = exc.code
else:
    code = 0
heavy = sorted(m for m in sys.modules if m.split(".")[0] in names)
print("\\nPROBE " + json.dumps({"code": code, "heavy": heavy}))
"""


@pytest.mark.parametrize("args", [["--help"], ["sources", "list"], ["snapshots", "list"]])
def test_light_commands_import_no_parser_model_or_cloud_sdk(args: list[str], tmp_path: Path) -> None:
    env = {**os.environ, "FRESHINDEX_DATA_DIR": str(tmp_path / "data")}
    # Reading commands need a registry that exists (they never create one): make it first.
    subprocess.run([sys.executable, "-m", "freshindex", "db", "upgrade"], env=env, cwd=ROOT, check=True,
                   capture_output=True, timeout=120)
    out = subprocess.run([sys.executable, "-c", PROBE, json.dumps(args), json.dumps(HEAVY)], capture_output=True,
                         text=True, env=env, cwd=tmp_path, timeout=120)
    line = next(x for x in out.stdout.splitlines() if x.startswith("PROBE "))
    probe = json.loads(line[len("PROBE ") :])
    assert probe["code"] in (0, None), out.stderr
    assert probe["heavy"] == [], f"{' '.join(args)} imported {probe['heavy']}"


def test_reading_a_current_registry_does_not_import_alembic(tmp_path: Path) -> None:
    from freshindex.registry import db

    env = {**os.environ, "FRESHINDEX_DATA_DIR": str(tmp_path / "data")}

    def probe(args: list[str]) -> dict:
        out = subprocess.run([sys.executable, "-c", PROBE, json.dumps(args), json.dumps(["alembic"])],
                             capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
        return json.loads(next(x for x in out.stdout.splitlines() if x.startswith("PROBE "))[len("PROBE "):])

    # Creating the registry needs Alembic (a reading command on no registry is an error, not a creation)
    assert probe(["sources", "list"])["code"] == 2
    assert probe(["db", "upgrade"])["heavy"]
    # every later one reads the revision row and the migration files' revision lines only
    assert probe(["sources", "list"]) == {"code": 0, "heavy": []}
    # and that reading agrees with Alembic's
    assert db.head_revision() == db.script_head_revision()


PIPELINE_PROBE = """
import json, sys
names = json.loads(sys.argv[1])
import freshindex.workers.pipeline, freshindex.workers.tasks, freshindex.api.app, freshindex.snapshots.builder
heavy = sorted(m for m in sys.modules if m.split(".")[0] in names)
from freshindex.workers.parsing import Parsers
parsed = Parsers().parse(open(sys.argv[2], "rb").read(), "architecture.pdf")
after = sorted({m.split(".")[0] for m in sys.modules if m.split(".")[0] in names})
print("\\nPROBE " + json.dumps({"heavy": heavy, "after": after, "blocks": len(parsed.blocks)}))
"""


def test_pipeline_worker_and_server_import_pymupdf_only_when_a_pdf_is_parsed(tmp_path: Path) -> None:
    """PyMuPDF 2.x loads its layout models on import (~0.3-1 s): every snapshot command, worker and server
    start that imports the pipeline would pay it, though most never parse a PDF."""
    pdf = ROOT / "examples" / "kb" / "pdf" / "architecture.pdf"
    env = {**os.environ, "FRESHINDEX_DATA_DIR": str(tmp_path / "data")}
    out = subprocess.run([sys.executable, "-c", PIPELINE_PROBE, json.dumps(["fitz", "pymupdf", "pymupdf4llm"]),
                          str(pdf)], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    line = next((x for x in out.stdout.splitlines() if x.startswith("PROBE ")), None)
    assert line is not None, out.stderr
    probe = json.loads(line[len("PROBE ") :])
    assert probe["heavy"] == [], f"importing the pipeline, worker tasks, API app or builder imported {probe['heavy']}"
    # The probe can see it: parsing a PDF does import PyMuPDF, and reads the file.
    assert "pymupdf" in probe["after"]
    assert probe["blocks"] > 0
