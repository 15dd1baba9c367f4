"""The query path's own metrics, through the composition root: stage times, empty recalls, refusals."""

from __future__ import annotations

from pathlib import Path

from freshindex.acl import Principal
from freshindex.services import Services
from freshindex.settings import load_settings
from freshindex.workers.runner import sync_inline


def _sample(metrics: bytes, name: str, **labels: str) -> float:
    want = ",".join(f'{k}="{v}"' for k, v in labels.items())
    prefix = f"{name}{{{want}}} " if want else f"{name} "
    for line in metrics.decode().splitlines():
        if line.startswith(prefix):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_a_query_reports_each_stage_and_a_recall_nobody_may_read_is_counted(tmp_path: Path, onnx_embedder,
                                                                            sample_kb: Path) -> None:
    svc = Services(load_settings(data_dir=tmp_path / "data"), embedder=onnx_embedder)
    try:
        svc.registry.add_source("docs", kind="folder", location=str(sample_kb), owner="t", kb="default")
        sync_inline(svc, "docs")
        packet = svc.client.retrieve("How do I roll back a database migration?", kb="default")
        assert not packet.insufficient
        out = svc.metrics.render()
        for stage in ("embed", "search", "recheck", "compose", "total"):
            assert _sample(out, "freshindex_query_seconds_count", stage=stage) == 1.0, stage
        total = _sample(out, "freshindex_query_seconds_sum", stage="total")
        parts = sum(_sample(out, "freshindex_query_seconds_sum", stage=s) for s in ("embed", "search", "recheck"))
        assert total >= parts > 0
        assert _sample(out, "freshindex_empty_recalls_total") == 0.0

        # A principal of another tenant reads nothing: an empty recall, refused, counted by reason.
        stranger = Principal(id="mallory", groups=frozenset({"nobody"}), tenant="elsewhere")
        denied = svc.client.retrieve("How do I roll back a database migration?", kb="default", principal=stranger)
        assert denied.insufficient and denied.evidence == ()
        out = svc.metrics.render()
        assert _sample(out, "freshindex_empty_recalls_total") == 1.0
        assert _sample(out, "freshindex_query_seconds_count", stage="total") == 2.0
        assert sum(float(line.rsplit(" ", 1)[1]) for line in out.decode().splitlines()
                   if line.startswith("freshindex_refusals_total{")) >= 1.0
    finally:
        svc.close()
