"""The distributed freshness contract: what every connector kind must keep on long-lived workers (#39, invariant 9).

A connector kind gets the contract by subclassing :class:`FreshnessContract`
in a test module (``class TestMyKindFreshness(FreshnessContract)``) and
saying how its source is made and changed: :meth:`~FreshnessContract.create`,
:meth:`~FreshnessContract.edit`, :meth:`~FreshnessContract.add`,
:meth:`~FreshnessContract.move`, :meth:`~FreshnessContract.delete`,
:meth:`~FreshnessContract.publish` (a commit, a new sitemap) and the
arguments of ``freshindex sources add`` (:meth:`~FreshnessContract.source_args`).
The contract then registers the source with the CLI and syncs it four
times through one deployment of long-lived workers: an edit and an addition
before sync 2; a move, a deletion and a second edit before sync 3; before
sync 4 an edit of the moved document and a third of the first, with the
roles of two workers swapped (:meth:`Deployment.lister_reads_documents`), so
that the process that listed syncs 1-3 reads sync 4's documents.  After each
sync it asks one question per fact (current and retired) and checks that the
answers carry the new text and never the old (nor a key that moved or was
deleted), that the answers come from the run's snapshot, and that the run
counted what changed (added, modified, unchanged, moved, deleted, none failed).
It reports every broken promise of every sync at once, then fails.

The deployment (:func:`deployment`, shared by the contract classes of a test
module through the ``freshness_deployment`` fixture in ``tests/conftest.py``)
is what ``docs/operations.md`` describes for scale: Redis broker, PostgreSQL
registry, ``broker.stage_queues`` on, and its worker layout (``sync,build``,
``parse``, ``ocr``, ``embed``), one process each.  Each worker runs the solo
pool, so the process that read a source's documents in its first sync is the
very process that reads them in syncs 2 and 3 (the contract checks the
workers' logs for it): state a process keeps between tasks
(``Services.connector_for`` caches one connector per source per process) is
exactly what the contract exercises, both where a process only reads
documents and where it listed an earlier run.  The embedder is the hashing
stand-in and refusal calibration is off: retrieval is not under test,
freshness is.

What it does not check: the embedded (in-process) runner (tests/workers/
cover it), retrieval quality, ACLs, provenance fields (the commit a chunk
cites), concurrency between syncs of one source, or crashed workers
(tests/e2e/test_faults.py).  It needs Redis and PostgreSQL on 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import socket
import subprocess
from collections.abc import Iterator, Mapping
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import pytest
from click.testing import CliRunner

from tests.conftest import coordinator, distributed_env, worker_process

#: The worker layout of docs/operations.md ("Running distributed"), one process each: ``sync`` with ``build``,
#: then ``parse``, ``ocr`` and ``embed`` on their own (broker.stage_queues on).
QUEUES = ("sync,build", "parse", "ocr", "embed")
#: A deadline for one sync to end, not an expected duration (a loaded 2-core machine is slow to start workers).
SYNC_DEADLINE_S = 180.0


# -- the deployment ---------------------------------------------------------------------------------------------------


@dataclass
class Deployment:
    """Long-lived workers and the environment a coordinator (the test) shares with them."""

    env: dict[str, str]
    logs: dict[str, Path]
    procs: dict[str, subprocess.Popen]

    def dead(self) -> list[str]:
        """Queues whose worker process has exited (none should, while the deployment lasts)."""
        return [q for q, proc in self.procs.items() if proc.poll() is not None]

    def tails(self, chars: int = 2500) -> str:
        return "\n".join(f"--- worker {q}\n{log.read_text()[-chars:]}" for q, log in self.logs.items() if log.exists())

    def node(self, queues: str) -> str:
        """The Celery node name of the worker started for ``queues`` (``--hostname``, ``%h`` expanded)."""
        args = list(self.procs[queues].args)
        return str(args[args.index("--hostname") + 1]).replace("%h", socket.gethostname())

    @contextlib.contextmanager
    def lister_reads_documents(self, app: Any) -> Iterator[None]:
        """Until the block ends, the process that listed the earlier runs consumes ``parse`` and the parse
        process consumes ``sync``: the next run is listed by one process and its documents are read by the
        process that listed the runs before it, as happens whenever several processes consume both queues
        (``freshindex worker`` with its default queues and concurrency).  Swapped back however the block ends.
        """
        prefix = self.env["FRESHINDEX_BROKER__QUEUE_PREFIX"]
        lister, parser = self.node("sync,build"), self.node("parse")
        swap = [("add", "parse", lister), ("cancel", "parse", parser), ("add", "sync", parser),
                ("cancel", "sync", lister)]
        back = [("add", "sync", lister), ("cancel", "sync", parser), ("add", "parse", parser),
                ("cancel", "parse", lister)]
        try:
            for action, queue, node in swap:
                _consume(app, action, f"{prefix}.{queue}", node)
            yield
        finally:
            for action, queue, node in back:
                _consume(app, action, f"{prefix}.{queue}", node)


def _consume(app: Any, action: str, queue: str, node: str) -> None:
    """Celery remote control: ``node`` starts (``add``) or stops (``cancel``) consuming ``queue``, and says so."""
    call = app.control.add_consumer if action == "add" else app.control.cancel_consumer
    replies = call(queue, destination=[node], reply=True, timeout=15)
    if not any("ok" in reply.get(node, {}) for reply in replies or []):
        raise AssertionError(f"worker {node} did not confirm {action}_consumer {queue}: {replies}")


@contextlib.contextmanager
def deployment(root: Path, pg_url: str, broker_url: str) -> Iterator[Deployment]:
    """One ``freshindex worker --pool solo`` per queue on ``broker_url`` and the registry at ``pg_url``.

    The workers are started once and stopped when the block ends; nothing
    here restarts one, so a dead worker fails every contract that follows.
    """
    env = distributed_env(
        root, pg_url, broker_url, "fi-contract", FRESHINDEX_BROKER__STAGE_QUEUES="true",
        FRESHINDEX_EMBEDDING__PROVIDER="hashing", FRESHINDEX_CONTEXT__REFUSAL_CALIBRATION="false",
        # Credentials the local S3 server accepts (the S3 contract's endpoint is a source option).
        FRESHINDEX_SOURCES__S3__ACCESS_KEY_ID="contract", FRESHINDEX_SOURCES__S3__SECRET_ACCESS_KEY="contract",
    )
    logs = {q: root / f"worker-{q.replace(',', '-')}.log" for q in QUEUES}
    with ExitStack() as stack:
        procs = {q: stack.enter_context(worker_process(env, logs[q], f"contract-{q.replace(',', '-')}",
                                                       "--queues", q, "--pool", "solo"))
                 for q in QUEUES}
        yield Deployment(env, logs, procs)


# -- the facts the documents state ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Fact:
    """One document's one statement: ``marker`` is the part that must be served (and, once replaced, never)."""

    name: str  # the document's path without the kind's suffix
    title: str
    sentence: str
    marker: str
    question: str


def _alpha(days: str) -> Fact:
    return Fact("handbook/alpha", "Alpha ledger retention",
                f"The alpha ledger keeps every record for {days} before archiving it.", days,
                "How long does the alpha ledger keep a record before archiving it?")


#: Every version a different size, so no coarse modification time hides an edit.
ALPHA = (_alpha("41 days"), _alpha("365 days"), _alpha("1200 days"), _alpha("43800 days"))
BETA = Fact("handbook/beta", "Beta gateway keys", "The beta gateway rotates its signing keys every Tuesday at noon.",
            "every Tuesday at noon", "When does the beta gateway rotate its signing keys?")
BETA_MOVED = "archive/beta-gateway"
BETA_EDITED = Fact(BETA.name, BETA.title,
                   "The beta gateway rotates its signing keys on the first Thursday of each month.",
                   "first Thursday of each month", BETA.question)
GAMMA = Fact("handbook/gamma", "Gamma cluster paging",
             "The gamma cluster pages the storage team when disk use passes 85 percent.", "85 percent",
             "When does the gamma cluster page the storage team?")
DELTA = Fact("handbook/delta", "Delta support hours", "The delta service answers support tickets within four hours.",
             "within four hours", "How fast does the delta service answer support tickets?")
EPSILON = Fact("handbook/epsilon", "Epsilon backup schedule",
               "The epsilon scheduler starts the nightly backup at 02:30 UTC.", "02:30 UTC",
               "When does the epsilon scheduler start the nightly backup?")


@dataclass
class Expected:
    """What the contract holds after a sync: facts by current name, and what must never be served again."""

    live: dict[str, Fact] = field(default_factory=dict)
    retired_markers: dict[str, Fact] = field(default_factory=dict)
    retired_names: set[str] = field(default_factory=set)


@dataclass(frozen=True)
class Where:
    """What :meth:`FreshnessContract.create` gets: a folder of its own, fixtures, and cleanup for the test."""

    root: Path
    request: pytest.FixtureRequest
    stack: ExitStack


# -- the contract -----------------------------------------------------------------------------------------------------


class FreshnessContract:
    """Three syncs of one source through long-lived workers; subclass it per connector kind (module docstring).

    A subclass sets :attr:`kind` and implements the source hooks; paths are
    relative to the source ("handbook/alpha.md"), data is the document's
    bytes as :meth:`render` made them.  Nothing is shared between contract
    classes but the workers: each gets its own source and knowledge base.
    """

    kind: ClassVar[str]
    #: The suffix of every document's path (it chooses the parser).
    suffix: ClassVar[str] = ".md"

    # -- what a connector kind provides ---------------------------------------------------------------------------

    def create(self, where: Where, files: Mapping[str, bytes]) -> None:
        """Make the source holding ``files`` (path -> bytes), published (committed, served) as it is."""
        raise NotImplementedError

    def source_args(self) -> list[str]:
        """``freshindex sources add`` arguments after the source id: ``--kind``, ``--location``, ``--option``s."""
        raise NotImplementedError

    def edit(self, path: str, data: bytes) -> None:
        raise NotImplementedError

    def add(self, path: str, data: bytes) -> None:
        raise NotImplementedError

    def move(self, old: str, new: str) -> None:
        """Move ``old`` to ``new``, bytes unchanged (as ``git mv`` or a rename would)."""
        raise NotImplementedError

    def delete(self, path: str) -> None:
        raise NotImplementedError

    def publish(self, message: str) -> None:
        """Make the changes since the last publish visible to a listing (a commit, a sitemap); default: nothing."""

    def key(self, path: str) -> str:
        """The document key a listing gives ``path`` (a web page's is its URL)."""
        return path

    def render(self, fact: Fact) -> bytes:
        return f"# {fact.title}\n\n{fact.sentence}\n".encode()

    # -- the contract ---------------------------------------------------------------------------------------------

    @pytest.mark.timeout(900)
    def test_every_sync_serves_the_new_text_never_the_old_and_counts_what_changed(
            self, freshness_deployment: Deployment, request: pytest.FixtureRequest, tmp_path: Path,
            monkeypatch: pytest.MonkeyPatch) -> None:
        dep = freshness_deployment
        assert not dep.dead(), f"a worker died before this contract began\n{dep.tails()}"
        self.source_id = self.kb = f"contract-{self.kind}"
        problems: list[str] = []
        with ExitStack() as stack, coordinator(dep.env, monkeypatch) as (svc, app):
            root = tmp_path / "source"
            root.mkdir()
            initial = (ALPHA[0], BETA, GAMMA, DELTA)
            self.create(Where(root, request, stack), {self._path(f.name): self.render(f) for f in initial})
            self._register()
            expected = Expected(live={f.name: f for f in initial})
            runs = [self._sync(svc, app, "1: first sync", expected, problems,
                               counts={"added": 4})]

            # An edit and an addition.
            self.edit(self._path(ALPHA[1].name), self.render(ALPHA[1]))
            self.add(self._path(EPSILON.name), self.render(EPSILON))
            self.publish("edit alpha, add epsilon")
            expected.live |= {ALPHA[1].name: ALPHA[1], EPSILON.name: EPSILON}
            expected.retired_markers[ALPHA[0].marker] = ALPHA[0]
            runs.append(self._sync(svc, app, "2: an edit and an addition", expected, problems,
                                   counts={"modified": 1, "added": 1, "unchanged": 3},
                                   outcomes={ALPHA[1].name: "modified", EPSILON.name: "added"}))

            runs.append(self._move_delete_and_edit(svc, app, expected, problems))
            # An edit of the moved document and a third of the first, read by the process that listed before.
            self.edit(self._path(ALPHA[3].name), self.render(ALPHA[3]))
            self.edit(self._path(BETA_MOVED), self.render(BETA_EDITED))
            self.publish("edit alpha and the moved beta")
            expected.live |= {ALPHA[3].name: ALPHA[3], BETA_MOVED: BETA_EDITED}
            expected.retired_markers |= {ALPHA[2].marker: ALPHA[2], BETA.marker: BETA}
            with dep.lister_reads_documents(app):
                runs.append(self._sync(svc, app, "4: two edits, read by the process that listed syncs 1-3",
                                       expected, problems, counts={"modified": 2, "unchanged": 2},
                                       outcomes={ALPHA[3].name: "modified", BETA_MOVED: "modified"}))
        problems += self._same_processes(dep, runs)
        assert not problems, f"the {self.kind} source broke the freshness contract:\n" + "\n".join(problems)

    # -- steps ----------------------------------------------------------------------------------------------------

    def _move_delete_and_edit(self, svc: Any, app: Any, expected: Expected, problems: list[str]) -> int:
        """Sync 3: beta moved (bytes unchanged), gamma deleted, alpha edited a second time."""
        self.move(self._path(BETA.name), self._path(BETA_MOVED))
        self.delete(self._path(GAMMA.name))
        self.edit(self._path(ALPHA[2].name), self.render(ALPHA[2]))
        self.publish("move beta, delete gamma, edit alpha again")
        del expected.live[BETA.name], expected.live[GAMMA.name]
        expected.live |= {BETA_MOVED: BETA, ALPHA[2].name: ALPHA[2]}
        expected.retired_markers |= {ALPHA[1].marker: ALPHA[1], GAMMA.marker: GAMMA}
        expected.retired_names |= {BETA.name, GAMMA.name}
        return self._sync(svc, app, "3: a move, a deletion and an edit", expected, problems,
                          counts={"moved": 1, "added": 1, "deleted": 1, "modified": 1, "unchanged": 2},
                          outcomes={ALPHA[2].name: "modified", BETA_MOVED: "added", BETA.name: "moved",
                                    GAMMA.name: "deleted"},
                          moves=[{"from": self._key(BETA.name), "to": self._key(BETA_MOVED)}])

    def _path(self, name: str) -> str:
        return name + self.suffix

    def _key(self, name: str) -> str:
        return self.key(self._path(name))

    def _register(self) -> None:
        """``freshindex sources add`` as an operator runs it, with the coordinator's environment."""
        from freshindex.cli import cli

        args = ["sources", "add", self.source_id, *self.source_args(), "--kb", self.kb, "--owner", "contract",
                "--json"]
        result = CliRunner().invoke(cli, args, catch_exceptions=False)
        assert result.exit_code == 0, f"freshindex {' '.join(args)}\n{result.output}"

    def _sync(self, svc: Any, app: Any, step: str, expected: Expected, problems: list[str], *,
              counts: Mapping[str, int], outcomes: Mapping[str, str] | None = None,
              moves: list[dict[str, str]] | None = None) -> int:
        """Sync through the workers, then check the run's counts and every question; problems go on the list."""
        from freshindex.workers.runner import sync_distributed

        report = sync_distributed(svc, app, self.source_id, timeout=SYNC_DEADLINE_S)
        got = report.as_dict()
        want = {k: counts.get(k, 0) for k in ("added", "modified", "unchanged", "moved", "deleted", "failed")}
        have = {k: int(got["documents"].get(k, 0)) for k in want}
        by_key = self._outcomes(svc, report.run.id)
        wrong = {self._key(n): (o, by_key.get(self._key(n), "no row")) for n, o in (outcomes or {}).items()
                 if by_key.get(self._key(n)) != o}
        if (got["status"], got["build"]["status"]) != ("succeeded", "built") or have != want or wrong \
                or (moves is not None and got["moves"] != moves):
            errors = [f"{e['key']}: {e['reason']}: {e['detail']}" for e in got["errors"]]
            problems.append(f"sync {step}: run {got['status']}, build {got['build']['status']} "
                            f"({got['build']['reason']}); counts {have}, expected {want}; "
                            f"documents (expected, recorded): {wrong}; moves {got['moves']}; errors {errors}")
        problems += self._served(svc, step, expected, got["build"]["snapshot_id"])
        return report.run.id

    def _outcomes(self, svc: Any, run_id: int) -> dict[str, str]:
        """Document key -> what run ``run_id`` recorded for it (documents it did not process have no row)."""
        from sqlalchemy import select

        from freshindex.registry.schema import DocumentResult

        with svc.registry.session() as s:
            rows = s.execute(select(DocumentResult.key, DocumentResult.outcome)
                             .where(DocumentResult.sync_run_id == run_id)).all()
        return {key: outcome for key, outcome in rows}

    def _served(self, svc: Any, step: str, expected: Expected, snapshot_id: str | None) -> list[str]:
        """Every live fact's question answered with its current text; no retired text or key in any answer."""
        problems: list[str] = []
        retired_keys = {self._key(n) for n in expected.retired_names}
        questions = {f.question: (name, f) for name, f in expected.live.items()}
        questions |= {f.question: (None, f) for f in expected.retired_markers.values() if f.question not in questions}
        for question, (name, fact) in questions.items():
            packet = svc.client.retrieve(question, kb=self.kb, limit=5)
            seen = [(e.key, " ".join(e.text.split())[:120]) for e in packet.evidence]
            if packet.snapshot_id != snapshot_id:
                problems.append(f"sync {step}: {question!r} answered from {packet.snapshot_id}, not {snapshot_id}")
            if name is not None and not any(e.key == self._key(name) and fact.marker in e.text
                                             for e in packet.evidence):
                problems.append(f"sync {step}: {question!r} did not return {self._key(name)} saying "
                                f"{fact.marker!r}; got {seen}")
            old = [(k, t) for (k, t), e in zip(seen, packet.evidence, strict=True)
                   if k in retired_keys or any(m in e.text for m in expected.retired_markers)]
            if old:
                problems.append(f"sync {step}: {question!r} served old text or a key that is gone: {old}")
        return problems

    def _same_processes(self, dep: Deployment, runs: list[int]) -> list[str]:
        """Syncs 1-3's document tasks ran in the one parse process, sync 4's in the one that listed 1-3,
        and no worker exited: per-process state lived across every sync it could spoil."""
        if dead := dep.dead():
            return [f"worker(s) {dead} exited during the contract\n{dep.tails()}"]
        problems = []
        for queues, wanted in (("parse", runs[:3]), ("sync,build", runs[3:])):
            served = self._document_runs(dep.logs[queues].read_text())
            if missing := [r for r in wanted if r not in served]:
                problems.append(f"the {queues} worker logged no document task of run(s) {missing} "
                                f"(it served {sorted(served)})")
        return problems

    def _document_runs(self, log: str) -> set[int]:
        """The runs of this source whose document tasks a worker's log shows done (Celery's trace lines; the
        args' repr is quoted with \" or with ', and then its inner quotes are escaped)."""
        return {int(r) for r in re.findall(
            rf"freshindex\.process_document\[[^\]]+\] succeeded in [^\n]*?'args': .\((\d+), \d+, \\?'{self.source_id}",
            log)}


# -- helpers for kinds whose source is a tree of files ------------------------------------------------------------------


class FileTree:
    """File operations on ``self.root`` for contract subclasses whose source is (or is built from) a folder."""

    root: Path

    def write_tree(self, root: Path, files: Mapping[str, bytes]) -> None:
        self.root = root
        for path, data in files.items():
            self.add(path, data)

    def edit(self, path: str, data: bytes) -> None:
        (self.root / path).write_bytes(data)

    def add(self, path: str, data: bytes) -> None:
        (self.root / path).parent.mkdir(parents=True, exist_ok=True)
        (self.root / path).write_bytes(data)

    def move(self, old: str, new: str) -> None:
        (self.root / new).parent.mkdir(parents=True, exist_ok=True)
        shutil.move(self.root / old, self.root / new)

    def delete(self, path: str) -> None:
        (self.root / path).unlink()


__all__ = ["ALPHA", "BETA", "DELTA", "EPSILON", "GAMMA", "QUEUES", "Deployment", "Fact", "FileTree",
           "FreshnessContract", "Where", "deployment"]
