"""Models generated from docs/openapi.json (datamodel-code-generator) read a real serve's answers, and describe
every field of them: a field an answer carries but the document does not fails here."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import httpx
import pytest
from pydantic import BaseModel

from tests.conftest import ROOT
from tests.integrations.conftest import ANSWERABLE, UNANSWERABLE, KbServer


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ModuleType]:
    if importlib.util.find_spec("datamodel_code_generator") is None:
        pytest.skip("datamodel-code-generator is not installed (it is in the test extra)")
    out = tmp_path_factory.mktemp("generated") / "freshindex_api_models.py"
    run = subprocess.run([sys.executable, "-m", "datamodel_code_generator", "--input", str(ROOT / "docs/openapi.json"),
                          "--input-file-type", "openapi", "--output-model-type", "pydantic_v2.BaseModel",
                          "--output", str(out)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    spec = importlib.util.spec_from_file_location("freshindex_api_models", out)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its annotations are strings, resolved through the module by name
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(spec.name, None)


def _undocumented(model: BaseModel, data: Any, where: str = "") -> list[str]:
    """Keys of ``data`` that the generated ``model`` (recursively) has no field for."""
    missing: list[str] = []
    if isinstance(model, BaseModel) and isinstance(data, dict):
        fields = {f.alias or name: name for name, f in type(model).model_fields.items()}
        for key, value in data.items():
            if key not in fields:
                missing.append(f"{where}{key}")
            else:
                missing += _undocumented(getattr(model, fields[key]), value, f"{where}{key}.")
    elif isinstance(model, list) and isinstance(data, list):
        for i, (m, d) in enumerate(zip(model, data, strict=False)):
            missing += _undocumented(m, d, f"{where}{i}.")
    elif isinstance(model, dict) and isinstance(data, dict):
        for k, v in data.items():
            missing += _undocumented(model.get(k), v, f"{where}{k}.")
    return missing


def test_generated_models_read_every_answer_of_a_real_serve(generated: ModuleType, kb_server: KbServer) -> None:
    m = generated
    auth = {"Authorization": f"Bearer {kb_server.key}"}
    with httpx.Client(base_url=kb_server.url, headers=auth, timeout=30) as http:
        answer = http.post("/v1/query", json=m.QueryRequest(question=ANSWERABLE, limit=3).model_dump(exclude_none=True))
        refusal = http.post("/v1/query", json={"question": UNANSWERABLE})
        check = http.post("/v1/citations/check", json={"answer": "It is in [9].", "packet": answer.json()})
        calls = [
            (http.get("/healthz"), m.Alive), (http.get("/readyz"), m.Ready),
            (answer, m.ContextPacketBody), (refusal, m.ContextPacketBody), (check, m.CitationReportBody),
            (http.get("/v1/kbs/default/health"), m.KbHealthBody),
            (http.get("/v1/sources"), m.SourcesBody), (http.get("/v1/sources/docs"), m.SourceFreshnessBody),
            (http.get("/v1/sources/docs/runs"), m.RunsBody),
            (http.post("/v1/query", json={"question": "x", "kb": "nothing-here"}), m.ErrorBody),
            (http.post("/v1/query", json={"question": "x"}, headers={"Authorization": "Bearer fik_a_b"}), m.ErrorBody),
            (http.post("/v1/query", json={"question": ""}), m.ValidationErrorBody),
        ]
        snapshots = http.get("/v1/snapshots")
    statuses = [r.status_code for r, _ in calls]
    assert statuses == [200] * 9 + [404, 401, 422], statuses
    for response, model in calls:
        parsed = model.model_validate(response.json())
        assert _undocumented(parsed, response.json()) == [], (response.request.url.path, model.__name__)
    packet = m.ContextPacketBody.model_validate(answer.json())
    # The hashing embedder ties the page's deployment and migration sections (first dense vs first lexical).
    assert any("guides/release.md#database-migration" in e.citation for e in packet.evidence[:2])
    assert m.ContextPacketBody.model_validate(refusal.json()).insufficient_evidence is True
    assert m.CitationReportBody.model_validate(check.json()).missing == [9]
    listed = [m.SnapshotBody.model_validate(s) for s in snapshots.json()]
    assert [s.id for s in listed] == ["default-v1"]
    assert all(_undocumented(s, raw) == [] for s, raw in zip(listed, snapshots.json(), strict=True))
