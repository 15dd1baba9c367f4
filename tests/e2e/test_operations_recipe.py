"""docs/operations.md "Running distributed", walked literally, then every worker alert evaluated on what it serves.

The recipe's shell block is parsed from the doc (its ``export`` lines and
its commands, comments stripped), so the doc cannot drift from this test.
Each command runs through ``bash -c`` as written, after the substitutions
in :data:`SUBSTITUTIONS` (host names, paths and ports of the doc's example
deployment -> this machine's services, a scratch PostgreSQL database and
free ports) and with the test-only settings of :data:`TEST_ONLY` (each says
why).  ``freshindex worker``, ``beat`` and ``serve`` run as real
processes; the other commands run to completion, in the doc's order.  Then:
the sync has built a snapshot, the recipe's key queries ``serve``, the
recipe's webhook secret signs a delivery ``serve`` accepts.

The alerts: each worker's ``/metrics`` is scraped as Prometheus would
(``job="freshindex-workers"``, ``instance``, ``stage`` from its first
queue, and ``up`` 1 or 0 for the scrape), and the expressions of the
``freshindex-workers`` group of ``infra/prometheus/alerts.yml`` are
evaluated by promtool's PromQL engine (``promtool test rules``, fetched as
tests/infra/test_prometheus.py fetches it), not by a re-implementation:

* presence: every series selector of every worker alert selects a live
  series, except exactly those in :data:`FIRST_EVENT` (a counter of an
  event a healthy run does not have: it appears with its first event);
* healthy: with the live values held for 90 minutes, no worker alert's
  expression returns anything;
* faults: two are real (the embed worker stopped, so its scrape fails and
  ``up`` is 0; the parse worker's heartbeat file set ten minutes back, so
  its exporter reports the age; 150 messages pushed on the embed queue
  nobody consumes, so every exporter reports the depth and a head that does
  not move) and the scrape after them is what promtool reads;
  ``FreshindexWorkersDown``, ``FreshindexWorkerHeartbeatStale`` and
  ``FreshindexQueueBacklog`` must then return exactly the stopped stage,
  the parse worker and the embed queue.  ``FreshindexQueueStalled``,
  ``FreshindexTaskFailureRateHigh`` and ``FreshindexOcrLowConfidence``
  need a quarter of an hour or more of history (a head stuck 900 s, failure
  and low-confidence counters growing): their series keep the live label
  sets and the test writes the growth (declared in :func:`synthetic`), so
  for those three what is live is the labels, not the values.

What it does not check: the ``for:`` durations and annotations (promtool's
unit tests in infra/prometheus/alerts_test.yml do), a Qdrant server (the
doc's multi-host line; none runs here), the api alerts.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
import tomllib
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from freshindex.api.routes_webhooks import sign_generic
from freshindex.workers.names import Queue
from freshindex.workers.probe import WORKER_FILE
from tests.conftest import REDIS_DB_URL, ROOT, free_port

pytestmark = [pytest.mark.services, pytest.mark.slow]

DOC = ROOT / "docs" / "operations.md"
ALERTS = ROOT / "infra" / "prometheus" / "alerts.yml"
LONG_RUNNING = ("worker", "beat", "serve")
#: Series a worker alert reads that only appear with their first event (none happened in this run).
FIRST_EVENT = {'freshindex_task_runs_total{state="FAILURE"}': "no task raised in a healthy run"}
#: Settings the test adds to the recipe's, and why.
TEST_ONLY = {
    "FRESHINDEX_BROKER__QUEUE_PREFIX": "queues of its own on the shared Redis (other tests run beside it)",
    "FRESHINDEX_EMBEDDING__PROVIDER": "hashing: the ONNX model loading in four processes on two cores would "
                                      "take the test past a minute; what is tested is the deployment, not the model",
    "FRESHINDEX_LOG_LEVEL": "INFO, so a failure shows the worker logs",
}


@dataclass
class Recipe:
    exports: dict[str, str]
    commands: list[str]


def recipe() -> Recipe:
    """The shell block of the "Running distributed" section: its exports and its commands, comments stripped."""
    section = DOC.read_text().split("\n## Running distributed\n", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```sh\n(.*?)\n```", section, re.S)
    assert block, "docs/operations.md 'Running distributed' has no ```sh block"
    exports: dict[str, str] = {}
    commands: list[str] = []
    for raw in block.group(1).splitlines():
        line = re.split(r"\s+# ", raw, maxsplit=1)[0].strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("export "):
            exports.update(word.split("=", 1) for word in shlex.split(line)[1:])
        else:
            commands.append(line)
    return Recipe(exports, commands)


def split_command(line: str) -> tuple[dict[str, str], list[str]]:
    """The leading ``VAR=value`` assignments of a command line, and its words."""
    words = shlex.split(line)
    env: dict[str, str] = {}
    while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", words[0]):
        key, value = words.pop(0).split("=", 1)
        env[key] = value
    return env, words


@dataclass
class Target:
    """One worker as Prometheus scrapes it."""

    stage: str
    port: int
    data_dir: Path
    proc: subprocess.Popen

    @property
    def instance(self) -> str:
        return f"127.0.0.1:{self.port}"


@dataclass
class Deployment:
    root: Path
    env: dict[str, str]
    outputs: dict[str, str] = field(default_factory=dict)
    workers: list[Target] = field(default_factory=list)
    serve_url: str = ""
    procs: list[subprocess.Popen] = field(default_factory=list)
    starting: list[tuple[str, subprocess.Popen, Path]] = field(default_factory=list)


def substitutions(tmp: Path, pg_url: str, kb: Path) -> dict[str, str]:
    """Recipe value -> this machine's, longest first (so a path is replaced before its prefix)."""
    pairs = {
        "redis://redis:6379/0": REDIS_DB_URL,
        "postgresql+psycopg://freshindex:pw@db/freshindex": pg_url,  # a scratch database (conftest's pg_url)
        "/var/lib/freshindex": str(tmp / "var"),
        "/etc/freshindex": str(tmp / "etc"),
        "/srv/kb": str(kb),
        **{f"PORT={p}": f"PORT={free_port()}" for p in range(9101, 9105)},  # worker metrics: free ports here
        "--port 8080": f"--port {free_port()}",
    }
    return dict(sorted(pairs.items(), key=lambda kv: -len(kv[0])))


def localise(text: str, subs: dict[str, str]) -> str:
    for old, new in subs.items():
        text = text.replace(old, new)
    return text


def wait_for(url: str, proc: subprocess.Popen, log: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.TransportError):
            if httpx.get(url, timeout=1).status_code == 200:
                return
        assert proc.poll() is None, f"{log.name} exited:\n{log.read_text()[-4000:]}"
        time.sleep(0.2)
    raise AssertionError(f"{url} did not answer within {timeout} s:\n{log.read_text()[-4000:]}")


def start(dep: Deployment, line: str, n: int) -> None:
    """Start a long-running command of the recipe in its own process group; note what Prometheus would scrape."""
    env, words = split_command(line)
    log = dep.root / f"{n:02d}-{words[1]}.log"
    proc = subprocess.Popen(["bash", "-c", line], env=dep.env, cwd=dep.root, stdout=log.open("w"),
                            stderr=subprocess.STDOUT, start_new_session=True)
    dep.procs.append(proc)
    if words[1] == "worker":
        queues = words[words.index("--queues") + 1].split(",")
        target = Target(queues[0], int(env["FRESHINDEX_BROKER__WORKER_METRICS_PORT"]),
                        Path(env["FRESHINDEX_DATA_DIR"]), proc)
        dep.workers.append(target)
        dep.starting.append((f"http://{target.instance}/metrics", proc, log))  # served once the worker is ready
    elif words[1] == "serve":
        dep.serve_url = f"http://127.0.0.1:{words[words.index('--port') + 1]}"
        dep.starting.append((dep.serve_url + "/readyz", proc, log))


def settle(dep: Deployment) -> None:
    """Wait until every process started since the last call answers (they start side by side)."""
    for url, proc, log in dep.starting:
        wait_for(url, proc, log)
    dep.starting.clear()


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@contextlib.contextmanager
def walked(tmp: Path, pg_url: str, kb: Path) -> Iterator[Deployment]:
    """The recipe run on this machine, every long-running process stopped after, however the test ends."""
    r, subs = recipe(), substitutions(tmp, pg_url, kb)
    base = {k: v for k, v in os.environ.items() if not k.startswith("FRESHINDEX_")}
    base["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{base.get('PATH', '')}"  # `freshindex` of this venv
    prefix = f"fi-recipe-{uuid.uuid4().hex[:8]}"
    env = {**base, **{k: localise(v, subs) for k, v in r.exports.items()},
           "FRESHINDEX_BROKER__QUEUE_PREFIX": prefix, "FRESHINDEX_EMBEDDING__PROVIDER": "hashing",
           "FRESHINDEX_LOG_LEVEL": "INFO"}
    assert set(env) >= set(TEST_ONLY)
    dep = Deployment(tmp, env)
    try:
        for n, raw in enumerate(r.commands):
            line = localise(raw, subs)
            _, words = split_command(line)
            if words[:1] == ["freshindex"] and words[1] in LONG_RUNNING:
                start(dep, line, n)
                continue
            if words[:2] == ["freshindex", "sync"]:
                settle(dep)  # the processes start side by side with the commands that do not need them
            done = subprocess.run(["bash", "-c", line], env=env, cwd=tmp, capture_output=True, text=True,
                                  timeout=180)
            assert done.returncode == 0, f"{raw}\n{done.stdout}\n{done.stderr}"
            dep.outputs[raw] = done.stdout
        settle(dep)
        yield dep
    finally:
        for proc in reversed(dep.procs):
            stop(proc)
        with contextlib.suppress(Exception):
            import redis

            client = redis.Redis.from_url(REDIS_DB_URL)
            for key in client.scan_iter(f"{prefix}*"):
                client.delete(key)


# -- scraping and the alerts ---------------------------------------------------------------------------------------


Series = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(dep: Deployment) -> Series:
    """Every worker's samples, labelled as Prometheus would (job, instance, stage), plus ``up`` per target."""
    out: Series = {}
    for t in dep.workers:
        target = (("instance", t.instance), ("job", "freshindex-workers"), ("stage", t.stage))
        try:
            text = httpx.get(f"http://{t.instance}/metrics", timeout=5).text
        except httpx.TransportError:
            out[("up", target)] = 0.0
            continue
        out[("up", target)] = 1.0
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                if not s.name.endswith("_created"):
                    out[(s.name, tuple(sorted({**s.labels, **dict(target)}.items())))] = float(s.value)
    return out


def worker_alerts() -> dict[str, str]:
    groups = yaml.safe_load(ALERTS.read_text())["groups"]
    return {r["alert"]: r["expr"] for g in groups if g["name"] == "freshindex-workers" for r in g["rules"]}


SELECTOR = re.compile(r"\b(freshindex_[a-z_]+|up(?=\{))(\{[^}]*\})?")


def selectors(expr: str) -> set[str]:
    return {m.group(0) for m in SELECTOR.finditer(expr)}


def selects(selector: str, series: Series) -> bool:
    """Whether ``selector`` (a name and ``=`` matchers, the only kind the worker alerts use) selects a series."""
    m = SELECTOR.fullmatch(selector)
    assert m, selector
    matchers = re.findall(r'(\w+)\s*(=~|!=|!~|=)\s*"([^"]*)"', m.group(2) or "")
    assert all(op == "=" for _, op, _ in matchers), f"extend selects() for {selector}"
    return any(name == m.group(1) and all(dict(labels).get(k) == v for k, _, v in matchers)
               for name, labels in series)


def series_text(name: str, labels: tuple[tuple[str, str], ...]) -> str:
    return name + "{" + ",".join(f"{k}={json.dumps(v)}" for k, v in labels) + "}"


def num(v: float) -> str:
    """A value as promtool's series notation reads it (no exponent: ``1e+06x3`` would not parse)."""
    return "NaN" if v != v else (f"{v:.6f}".rstrip("0").rstrip(".") or "0")


def held(before: float | None, after: float | None) -> str:
    """promtool values over 0-90 min: ``before`` for the first 30 samples, ``after`` for the rest (``_`` missing)."""
    def part(v: float | None, n: int) -> str:
        return f"_x{n - 1}" if v is None else f"{num(v)}x{n - 1}"
    return f"{part(before, 30)} {part(after, 61)}"


def promtool_run(promtool: str, tmp: Path, input_series: list[dict], checks: dict[str, list[dict]]) -> None:
    """Evaluate each check's expression at 90 min on ``input_series``; promtool compares the samples."""
    spec = {"rule_files": [str(ALERTS)], "evaluation_interval": "1m", "tests": [{
        "interval": "1m", "input_series": input_series,
        "promql_expr_test": [{"expr": expr, "eval_time": "90m", "exp_samples": samples}
                             for expr, samples in checks.items()]}]}
    path = tmp / f"recipe_alerts_{uuid.uuid4().hex[:6]}.yml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    out = subprocess.run([promtool, "test", "rules", str(path)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr


def synthetic(live: Series, embed_queue: str) -> list[dict]:
    """Growth the test writes onto live label sets, for the three alerts that need a quarter hour of history."""
    rows = []
    for (name, labels), value in live.items():
        d = dict(labels)
        if name == "freshindex_queue_head_age_seconds" and d["queue"] == embed_queue:
            rows.append({"series": series_text(name, labels), "values": f"{num(value)}+60x90"})  # the head never moves
        if name == "freshindex_task_runs_total" and d.get("state") == "SUCCESS":
            failed = tuple(sorted({**d, "state": "FAILURE"}.items()))
            rows.append({"series": series_text(name, labels), "values": f"{num(value)}x90"})
            rows.append({"series": series_text(name, failed), "values": "_x29 0+1x60"})  # one failure a minute
        if name == "freshindex_ocr_pages_total":
            low = ("freshindex_ocr_low_confidence_pages_total", labels)
            rows.append({"series": series_text(name, labels), "values": f"{num(value)}+1x90"})
            rows.append({"series": series_text(*low), "values": "0+1x90"})  # every page under the floor
    return rows


def test_the_distributed_recipe_runs_as_written_and_every_worker_alert_reads_live_metrics(
    tmp_path: Path, pg_url: str, redis_url: str, sample_kb: Path
) -> None:
    from tests.infra.test_prometheus import _promtool

    promtool = _promtool()
    r = recipe()
    # The recipe consumes every queue, with stage queues on and metrics on every worker
    workers = [split_command(c)[1] for c in r.commands if "freshindex worker" in c]
    consumed = {q for words in workers for q in words[words.index("--queues") + 1].split(",")}
    assert consumed == {q.value for q in Queue}
    assert r.exports["FRESHINDEX_BROKER__STAGE_QUEUES"] == "true"
    assert all("FRESHINDEX_BROKER__WORKER_METRICS_PORT=" in c for c in r.commands if "freshindex worker" in c)
    with walked(tmp_path, pg_url, sample_kb) as dep:
        # Then the sync built a snapshot, which serve answers with the recipe's key
        sync_out = next(out for cmd, out in dep.outputs.items() if cmd.startswith("freshindex sync"))
        assert "succeeded" in sync_out, sync_out
        key = next(out for cmd, out in dep.outputs.items() if "keys create" in cmd).split()[0]
        answer = httpx.post(dep.serve_url + "/v1/query", json={"question": "How do I roll back a migration?"},
                            headers={"Authorization": f"Bearer {key}"}, timeout=30)
        assert answer.status_code == 200 and answer.json()["evidence"], answer.text
        healthy = scrape(dep)
        alerts = worker_alerts()
        assert set(alerts) >= {"FreshindexWorkersDown", "FreshindexWorkerHeartbeatStale", "FreshindexQueueBacklog",
                               "FreshindexQueueStalled", "FreshindexTaskFailureRateHigh", "FreshindexOcrLowConfidence"}
        # Presence: every selector of every worker alert selects live series (or counts an event not had)
        blind = {s for e in alerts.values() for s in selectors(e) if not selects(s, healthy)}
        assert blind == set(FIRST_EVENT)
        # Healthy: the live values held for 90 minutes; no worker alert's expression returns anything
        steady = [{"series": series_text(n, labels), "values": f"{num(v)}x90"} for (n, labels), v in healthy.items()]
        promtool_run(promtool, tmp_path, steady, {f"count({e})": [] for e in alerts.values()})
        faulted, parse, embed, embed_queue = inject_faults(dep)
        # Faults: the real ones and the declared growth return exactly the failing stage, worker and queue
        names = set(healthy) | set(faulted)
        series = [{"series": series_text(n, labels), "values": held(healthy.get((n, labels)), faulted.get((n, labels)))}
                  for n, labels in sorted(names)]
        grown = synthetic(faulted, embed_queue)
        grown_names = {row["series"] for row in grown}
        series = [row for row in series if row["series"] not in grown_names] + grown
        promtool_run(promtool, tmp_path, series, {
            f"count by (stage) ({alerts['FreshindexWorkersDown']})": [{"labels": f'{{stage="{embed.stage}"}}',
                                                                       "value": 1}],
            f"count by (instance, stage) ({alerts['FreshindexWorkerHeartbeatStale']})": [
                {"labels": f'{{instance="{parse.instance}",stage="parse"}}', "value": 1}],
            f"count by (queue) ({alerts['FreshindexQueueBacklog']})": [{"labels": f'{{queue="{embed_queue}"}}',
                                                                        "value": 1}],
            f"count by (queue) ({alerts['FreshindexQueueStalled']})": [{"labels": f'{{queue="{embed_queue}"}}',
                                                                        "value": 1}],
            f"count by (task) ({alerts['FreshindexTaskFailureRateHigh']})": [
                {"labels": f'{{task="{t}"}}', "value": 1}
                for t in sorted({dict(lb)["task"] for (n, lb) in faulted
                                 if n == "freshindex_task_runs_total" and dict(lb).get("state") == "SUCCESS"})],
            f"count by (source) ({alerts['FreshindexOcrLowConfidence']})": [{"labels": '{source="docs"}',
                                                                             "value": 1}],
        })
        # And the recipe's webhook secret signs a delivery serve takes
        secret = tomllib.loads(Path(dep.env["FRESHINDEX_WEBHOOKS__SECRETS_FILE"]).read_text())["docs"]
        body, stamp = b'{"paths": ["runbook.md"]}', str(int(time.time()))
        hook = httpx.post(dep.serve_url + "/v1/webhooks/generic/docs", content=body, timeout=10, headers={
            "X-Freshindex-Timestamp": stamp, "X-Freshindex-Delivery": uuid.uuid4().hex,
            "X-Freshindex-Signature": sign_generic(secret, stamp, body)})
        assert hook.status_code == 202, hook.text


def inject_faults(dep: Deployment) -> tuple[Series, Target, Target, str]:
    """The real faults: the embed worker stopped, 150 messages on its queue, the parse worker's heartbeat ten
    minutes old; returns the scrape that sees them (its heartbeat age over 120 s)."""
    import redis

    embed = next(t for t in dep.workers if t.stage == "embed")
    parse = next(t for t in dep.workers if t.stage == "parse")
    stop(embed.proc)
    embed_queue = f"{dep.env['FRESHINDEX_BROKER__QUEUE_PREFIX']}.embed"
    client = redis.Redis.from_url(REDIS_DB_URL)
    client.lpush(embed_queue, *[json.dumps({"stranded": i}) for i in range(150)])
    scrape(dep)  # every exporter sees the queue's head once: its age counts from here
    for _ in range(5):  # the consumer touches the file every 10 s: scrape right after setting it back
        back = time.time() - 600
        os.utime(parse.data_dir / WORKER_FILE, (back, back))
        faulted = scrape(dep)
        age = next(v for (n, lb), v in faulted.items()
                   if n == "freshindex_worker_heartbeat_age_seconds" and ("stage", "parse") in lb)
        if age > 120:
            return faulted, parse, embed, embed_queue
    raise AssertionError("the parse worker's heartbeat age never showed the file set back")
