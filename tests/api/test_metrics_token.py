"""``/metrics`` carries every knowledge base's figures: with ``api.metrics_token`` set it answers only the scraper.

Given a serve app with a metrics token, when /metrics is asked without it, with a wrong one and with it,
then only the last gets the exposition (401 otherwise, no figure in the body); without a token set the
route stays open, as a kubelet-style probe.
"""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient

from freshindex.api.app import create_app
from freshindex.services import Services
from freshindex.settings import load_settings


def test_a_metrics_token_keeps_the_figures_from_anyone_without_it(tmp_path: Path) -> None:
    svc = Services(load_settings(data_dir=tmp_path / "data", embedding={"provider": "hashing"},
                                 api={"metrics_token": "scrape-s3cret"}))
    try:
        with TestClient(create_app(svc)) as http:
            for headers in ({}, {"Authorization": "Bearer nope"}, {"Authorization": "scrape-s3cret"}):
                refused = http.get("/metrics", headers=headers)
                assert refused.status_code == 401 and "freshindex_" not in refused.text
            ok = http.get("/metrics", headers={"Authorization": "Bearer scrape-s3cret"})
            assert ok.status_code == 200 and "freshindex_disk_free_bytes" in ok.text
            assert http.get("/healthz").status_code == 200  # the probes stay open
    finally:
        svc.close()


def test_without_a_token_metrics_stay_open(tmp_path: Path) -> None:
    svc = Services(load_settings(data_dir=tmp_path / "data", embedding={"provider": "hashing"}))
    try:
        with TestClient(create_app(svc)) as http:
            assert http.get("/metrics").status_code == 200
    finally:
        svc.close()
