"""infra/prometheus and infra/grafana: the rules pass promtool's unit tests, every alert links an absolute
runbook URL built from the configured base, and every series a rule or panel reads is one freshindex exports.

promtool is the real one: from PATH, else from Debian's `prometheus` package, downloaded once with
`apt-get download` and unpacked (no install, no service started) into a cache folder; the test skips, with the
reason, where neither is possible (no apt, no archive).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.cachelock import cache_lock
from tests.conftest import ROOT

PROM = ROOT / "infra" / "prometheus"
DASHBOARD = ROOT / "infra" / "grafana" / "freshindex-dashboard.json"
RUNBOOKS = ROOT / "runbooks"
BASE = "{{ $externalLabels.runbook_base }}/"
CACHE = Path(os.environ.get("FRESHINDEX_TEST_CACHE", Path.home() / ".cache" / "freshindex-test")) / "promtool"


def _run(cmd: list[str], cwd: Path | None = None) -> bool:
    return subprocess.run(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=300).returncode == 0


def _promtool() -> str:
    """A promtool binary (see the module docstring); pytest.skip with the reason when none can be had."""
    found = shutil.which("promtool")
    if found:
        return found
    binary = CACHE / "x" / "usr" / "bin" / "promtool"
    if binary.is_file():
        return str(binary)
    if not (shutil.which("apt-get") and shutil.which("dpkg-deb")):
        pytest.skip("promtool is not on PATH and this machine has no apt-get/dpkg-deb to fetch Debian's prometheus")
    with cache_lock(CACHE):  # another test process may be fetching it now
        if binary.is_file():
            return str(binary)
        _fetch_promtool()
    return str(binary)


def _fetch_promtool() -> None:
    for deb in CACHE.glob("*.deb"):
        deb.unlink()
    if not _run(["apt-get", "download", "prometheus"], cwd=CACHE):
        _run(["apt-get", "update", "-qq"])
        if not _run(["apt-get", "download", "prometheus"], cwd=CACHE):
            pytest.skip("promtool is not on PATH and `apt-get download prometheus` failed (offline?)")
    deb = next(CACHE.glob("prometheus_*.deb"))
    tmp = CACHE / "unpacking"
    shutil.rmtree(tmp, ignore_errors=True)
    assert _run(["dpkg-deb", "-x", str(deb), str(tmp)]), f"dpkg-deb -x {deb} failed"
    shutil.rmtree(CACHE / "x", ignore_errors=True)
    tmp.rename(CACHE / "x")
    deb.unlink()


@pytest.fixture(scope="module")
def promtool() -> str:
    return _promtool()


def alerts() -> list[dict]:
    groups = yaml.safe_load((PROM / "alerts.yml").read_text())["groups"]
    return [r for g in groups for r in g["rules"] if "alert" in r]


def test_the_rules_pass_their_promtool_unit_tests(promtool: str) -> None:
    check = subprocess.run([promtool, "check", "config", str(PROM / "prometheus.yml")], capture_output=True,
                           text=True, timeout=120)
    assert check.returncode == 0, check.stdout + check.stderr
    tested = subprocess.run([promtool, "test", "rules", str(PROM / "alerts_test.yml")], capture_output=True,
                            text=True, timeout=120)
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_a_wrong_expectation_fails_promtool(promtool: str, tmp_path: Path) -> None:
    # the harness can fail: a planted wrong summary is reported
    shutil.copy(PROM / "alerts.yml", tmp_path / "alerts.yml")
    text = (PROM / "alerts_test.yml").read_text().replace('summary: "No freshindex worker is up for stage parse"',
                                                          'summary: "all fine"')
    (tmp_path / "alerts_test.yml").write_text(text)
    tested = subprocess.run([promtool, "test", "rules", str(tmp_path / "alerts_test.yml")], capture_output=True,
                            text=True, timeout=120)
    assert tested.returncode != 0 and "FreshindexWorkersDown" in tested.stdout + tested.stderr


def test_every_alert_links_an_absolute_runbook_from_the_base_and_is_unit_tested() -> None:
    rules = alerts()
    names = {r["alert"] for r in rules}
    assert {"FreshindexWorkersDown", "FreshindexWorkerHeartbeatStale", "FreshindexQueueBacklog",
            "FreshindexQueueStalled", "FreshindexTaskFailureRateHigh", "FreshindexOcrLowConfidence",
            "FreshindexRefusalRateJump"} <= names
    tests = yaml.safe_load((PROM / "alerts_test.yml").read_text())["tests"]
    firing = {case["alertname"] for group in tests for case in group.get("alert_rule_test", []) if case["exp_alerts"]}
    assert names - firing == set(), "alerts without a promtool test that makes them fire"
    index = (RUNBOOKS / "README.md").read_text()
    for rule in rules:
        url = rule["annotations"]["runbook_url"]
        assert url.startswith(BASE), (rule["alert"], url)
        page = url[len(BASE):]
        assert (RUNBOOKS / page).is_file(), (rule["alert"], page)
        assert rule["alert"] in index and f"]({page})" in index, f"runbooks/README.md does not list {rule['alert']}"
    # the base is set where Prometheus reads it, as an absolute URL without a trailing slash
    config = yaml.safe_load((PROM / "prometheus.yml").read_text())
    base = config["global"]["external_labels"]["runbook_base"]
    assert re.fullmatch(r"https?://[^/\s]+(/\S*)?", base) and not base.endswith("/"), base


def exported_names() -> set[str]:
    """Every series name freshindex can export: the Metrics registry, the scrape-time collectors, the exporter."""
    from freshindex.health.metrics import Metrics

    m = Metrics()
    m.add_health_collector(lambda: ["kb"], lambda kb: {
        "last_successful_sync": "2026-01-01T00:00:00+00:00", "documents_in_error_by_reason": {"x": 1},
        "snapshots_by_status": {"active": 1}, "held_builds_by_check": {"count": 1},
        "deletions_held_by_source": {"s": 0}}, lambda: [])
    names: set[str] = set()
    for fam in m.registry.collect():  # a labelled family without children has no sample: name it by its type
        names |= {fam.name, *(s.name for s in fam.samples)}
        names |= {"counter": {f"{fam.name}_total"}, "histogram": {f"{fam.name}_{x}" for x in ("bucket", "count", "sum")}
                  }.get(fam.type, set())
    # the names exporter.py declares: its histogram, counter and the scrape-time gauges
    source = (ROOT / "workers" / "exporter.py").read_text()
    for declared in re.findall(r'"(freshindex_[a-z_]+)"', source):
        names |= {declared, f"{declared}_bucket", f"{declared}_count", f"{declared}_sum"}
    return names | {"up"}


def series_in(expr: str) -> set[str]:
    return set(re.findall(r"\bfreshindex_[a-z_]+\b", expr)) | ({"up"} if re.search(r"\bup\{", expr) else set())


def test_every_series_a_rule_or_panel_reads_is_exported() -> None:
    known = exported_names()
    used_by_rules = {n for r in alerts() for n in series_in(r["expr"])}
    assert "freshindex_queue_head_age_seconds" in used_by_rules
    assert used_by_rules - known == set()
    panels = json.loads(DASHBOARD.read_text())["panels"]
    used_by_panels = {n for p in panels for t in p.get("targets", []) for n in series_in(t["expr"])}
    assert used_by_panels - known == set()
    # the panels cover queues, tasks and query latency by stage
    assert {"freshindex_queue_depth", "freshindex_task_runs_total", "freshindex_query_seconds_bucket",
            "freshindex_task_seconds_bucket"} <= used_by_panels
    # and no two panels overlap on the grid
    cells = set()
    for p in panels:
        g = p["gridPos"]
        area = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not area & cells, p["title"]
        cells |= area
    assert series_in("sum(rate(freshindex_nope_total[5m]))") - known == {"freshindex_nope_total"}
