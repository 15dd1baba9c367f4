"""Each verdict of the evaluation, made to happen for a real reason on a generated knowledge base.

Given the knowledge base of ``conftest.kb`` (a removed document, a parser that drops a block, a passage across a
chunk boundary, a source only group ``hr`` may read, a document past its validity, two versions of a guide), when
one question is evaluated, then its verdict names the stage that lost it, with what the diagnosis found.
"""

from __future__ import annotations

from typing import Any

from freshindex.evaluation import evaluate, parse_golden
from freshindex.evaluation.report import QuestionResult
from freshindex.registry.records import SourceSetup
from tests.evaluation.conftest import LONG, Kb


def _one(kb: Kb, limit: int = 5, **line: Any) -> QuestionResult:
    import json

    golden = parse_golden([json.dumps({"id": "q", **line})], "t")
    report = evaluate(kb.services, golden, "docs", limit=limit)
    return report.results[0]


def _chunk_texts(kb: Kb, key: str) -> list[str]:
    reg = kb.services.registry
    doc = reg.documents_for_source("wiki")[key]
    return [r.text for r in sorted(reg.chunk_rows(list(reg.live_chunk_ids(doc.id))), key=lambda r: r.ordinal)]


def test_ok_when_the_passage_is_served_on_the_expected_document(kb: Kb) -> None:
    r = _one(kb, question="How do I install freshindex with pip?", expected="install.md",
             required_passage="pip install freshindex")
    assert (r.verdict, r.passed, r.hit, r.passage, r.rank) == ("ok", True, True, True, 1)


def test_a_document_deleted_from_its_source_is_not_synced(kb: Kb) -> None:
    r = _one(kb, question="How long are audit records of the billing ledger kept?", expected="removed.md",
             required_passage="kept for seven years")
    assert (r.verdict, r.stage) == ("not_synced", "registry")
    assert r.detail["why"] == "deleted from its source" and r.detail["state"] == "deleted"


def test_an_unknown_document_is_not_synced(kb: Kb) -> None:
    r = _one(kb, question="How do I install freshindex?", expected="nowhere/missing.md")
    assert (r.verdict, r.detail["why"]) == ("not_synced", "no such document in the knowledge base")


def test_a_block_the_parser_dropped_is_parse_lost(kb: Kb) -> None:
    r = _one(kb, question="When does the quarterly zebra audit happen?", expected="dropped.md",
             required_passage="The quarterly zebra audit happens every March")
    assert (r.verdict, r.stage) == ("parse_lost", "parse")
    assert "approximated" in r.detail["note"]


def test_a_passage_across_a_chunk_boundary_is_chunk_split(kb: Kb) -> None:
    # Given the passage that runs from the end of the rollout page's first chunk into its second
    first, second = _chunk_texts(kb, "rollout.md")[:2]
    passage = " ".join(first.split()[-6:] + second.split()[:6])
    assert passage in LONG and passage not in first and passage not in second
    # When the one item served is another part of the page (served together, the two chunks are joined)
    r = _one(kb, limit=1, question="What does step 38 of the rollout check, canary gauge number 38?",
             expected="rollout.md", required_passage=passage)
    # Then the page is hit, the passage is not, and the chunker is named
    assert (r.hit, r.passage) == (True, False)
    assert (r.verdict, r.stage) == ("chunk_split", "chunk")


def test_an_acl_that_denies_the_principal_is_filtered(kb: Kb) -> None:
    line = {"question": "When are the salary bands for engineering reviewed?", "expected": "salaries.md",
            "required_passage": "reviewed every October"}
    r = _one(kb, principal={"id": "ann", "groups": ["eng"]}, **line)
    assert (r.verdict, r.stage, r.detail["rule"]) == ("filtered", "recall", "acl")
    assert r.detail["acl"] == ["hr"]
    # the same question asked by a member of hr is answered
    assert _one(kb, principal={"id": "bo", "groups": ["hr"]}, **line).verdict == "ok"


def test_a_document_past_its_validity_is_filtered_as_expired(kb: Kb) -> None:
    r = _one(kb, question="Where are visitor parking permits issued?", expected="expired.md",
             required_passage="issued at the north gate")
    assert (r.verdict, r.stage, r.detail["rule"]) == ("filtered", "recheck", "expired")


def test_an_older_version_is_grouped_into_the_newer(kb: Kb) -> None:
    r = _one(kb, question="When does the backup window open?", expected="v1/guide.md",
             required_passage="backup window opens at 02:00 UTC")
    assert (r.verdict, r.stage) == ("grouped", "group")
    assert r.detail["into_key"] == "v2/guide.md"


def test_a_refused_question_says_why_with_the_signals(kb: Kb) -> None:
    r = _one(kb, question="What is the zorblax quantum flux setting of the install?", expected="install.md")
    assert (r.verdict, r.stage, r.refused, r.passed) == ("refused", "refuse", True, False)
    assert r.detail["reason"] and r.detail["signals"]
    # a question that may be refused passes when it is
    assert _one(kb, question="What is the zorblax quantum flux setting of the install?", expected="install.md",
                answer="may_refuse").passed


def test_a_question_that_must_be_refused(kb: Kb) -> None:
    r = _one(kb, question="What colour is the zorblax office cat?", answer="must_refuse")
    assert (r.verdict, r.passed) == ("ok", True)


def _with_context(kb: Kb, **context: Any) -> Any:
    """The knowledge base's services with other ``context`` settings (the same registry, store and embedder)."""
    from freshindex.services import Services
    from freshindex.settings.sections.context import ContextSettings

    svc = kb.services
    settings = ContextSettings.model_validate({**svc.settings.context.model_dump(), **context})
    return Services(svc.settings.model_copy(update={"context": settings}), registry=svc.registry, store=svc.store,
                    embedder=svc.embedder)


def test_a_chunk_below_the_recall_depth_is_not_recalled_with_its_deeper_ranks(kb: Kb) -> None:
    # Given the same knowledge base queried with a recall of one candidate
    shallow = _with_context(kb, candidate_pool=1)
    golden = parse_golden(['{"id": "q", "question": "What does step 38 of the rollout check, canary gauge 38?", '
                           '"expected": "rollout.md", "required_passage": "Step 2 of the rollout checks"}'])
    # When a question about step 38 expects the passage of step 2
    r = evaluate(shallow, golden, "docs", limit=1).results[0]
    # Then the chunk holding it is not among the candidates; a deeper search finds it, below the first
    assert (r.verdict, r.stage) == ("not_recalled", "recall")
    assert r.detail["candidates"] == 1
    assert r.detail["dense_rank"] is not None and r.detail["dense_rank"] > 1


def test_a_recalled_chunk_below_the_limit_is_reranked_out_with_both_ranks(kb: Kb) -> None:
    r = _one(kb, limit=1, question="What does step 38 of the rollout check, canary gauge number 38?",
             expected="rollout.md", required_passage="Step 2 of the rollout checks")
    assert (r.verdict, r.stage) == ("reranked_out", "select")
    assert r.detail["rule"] in ("max_chunks", "per_document")
    assert r.detail["rank_before_rerank"] >= 1 and r.detail["rank_after_rerank"] >= 1


def test_as_of_evaluates_the_snapshot_that_served_then(kb: Kb) -> None:
    # Given docs-v1 (the wiki only) and docs-v2 (the hr source synced too)
    snaps = {s.id: s for s in kb.services.registry.list_snapshots("docs")}
    line = {"question": "When are the salary bands for engineering reviewed?", "expected": "salaries.md",
            "required_passage": "reviewed every October", "principal": {"id": "bo", "groups": ["hr"]}}
    # When the question is asked as of docs-v1, then the document has no chunk in that snapshot
    before = _one(kb, as_of="docs-v1", **line)
    assert (before.verdict, before.snapshot_id) == ("not_synced", "docs-v1")
    assert before.detail["why"] == "the document has no chunk in the evaluated snapshot"
    # and as of the time docs-v2 was activated, it is answered from docs-v2
    at = snaps["docs-v2"].activated_at.isoformat()
    after = _one(kb, as_of=at, **line)
    assert (after.verdict, after.snapshot_id) == ("ok", "docs-v2")


def test_a_chunk_over_the_token_budget_is_budget_cut(kb: Kb) -> None:
    # Given a context budget of about one rollout chunk for every query type
    small = {"max_tokens": 70, "max_chunks": 5, "per_document": 5}
    tight = _with_context(kb, budgets={t: small for t in ("fact", "procedure", "compare", "diverse")})
    golden = parse_golden(['{"id": "q", "question": "What does step 38 of the rollout check, canary gauge 38?", '
                           '"expected": "rollout.md", "required_passage": "Step 2 of the rollout checks"}'])
    # When the passage's chunk is selected but does not fit
    r = evaluate(tight, golden, "docs", limit=5).results[0]
    assert (r.verdict, r.stage) == ("budget_cut", "fit")


def test_evidence_from_another_commit_is_the_wrong_version(tmp_path) -> None:
    import json
    import subprocess

    from freshindex.services import Services
    from freshindex.settings import load_settings
    from freshindex.workers.runner import sync_inline

    # Given a git repository with two commits, indexed at the second
    repo = tmp_path / "repo"
    repo.mkdir()

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                              env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                                   "GIT_COMMITTER_EMAIL": "t@t", "PATH": "/usr/bin:/bin"}).stdout.strip()

    git("init", "-q", "-b", "main")
    (repo / "CHANGES.md").write_text("# Changes\n\nRelease 1.0 adds the retry budget for webhooks.\n")
    git("add", "."), git("commit", "-q", "-m", "1.0")
    old = git("rev-parse", "HEAD")
    (repo / "CHANGES.md").write_text("# Changes\n\nRelease 2.0 adds the retry budget for webhooks and queues.\n")
    git("commit", "-qam", "2.0")
    new = git("rev-parse", "HEAD")
    svc = Services(load_settings(data_dir=tmp_path / "data", embedding={"provider": "hashing"}))
    try:
        svc.registry.add_source("repo", kind="git", location=str(repo), owner="t", kb="rel",
                                setup=SourceSetup(options={"ref": "main"}))
        sync_inline(svc, "repo")

        def verdict(commit: str) -> QuestionResult:
            line = {"id": "q", "question": "Which release adds the retry budget for webhooks?",
                    "expected": {"key": "CHANGES.md", "commit": commit}, "required_passage": "retry budget"}
            return evaluate(svc, parse_golden([json.dumps(line)]), "rel").results[0]

        # When the golden set expects the first commit, then the served evidence is the wrong version
        wrong = verdict(old[:10])
        assert (wrong.verdict, wrong.detail["expected_commit"]) == ("wrong_version", old[:10])
        assert new.startswith(wrong.detail["served"])  # the citation's commit, abbreviated
        assert verdict(new[:10]).verdict == "ok"
    finally:
        svc.close()


def test_the_transfer_benchmark_counts_where_each_passage_was_lost(kb: Kb) -> None:
    # Given three golden rows as bench.transfer keeps them: one answered, one on a document the knowledge base does
    # not hold, and an unanswerable one
    from types import SimpleNamespace

    from bench.transfer import lost_where

    corpus = SimpleNamespace(name="docs", pdf=False)
    rows = [{"id": "a", "kind": "prose", "question": "How do I install freshindex with pip?", "page": "install.md",
             "passage": "pip install freshindex"},
            {"id": "b", "kind": "code", "question": "How do I install freshindex?", "page": "nowhere/missing.md",
             "passage": "pip install freshindex"},
            {"id": "c", "kind": "unanswerable", "question": "Who won the 1950 World Cup?", "page": None,
             "passage": None}]
    # When the benchmark asks where each passage was lost (refusal off)
    lost = lost_where(corpus, kb.services, rows)  # type: ignore[arg-type]
    # Then each answerable question is counted under freshindex eval's verdict, the unanswerable one nowhere
    assert lost["counts"] == {"not_synced": 1, "ok": 1}
    assert lost["ids"] == {"not_synced": ["b"], "ok": ["a"]}


def test_the_transfer_benchmark_reads_a_pdf_golden_page_as_a_key_and_a_page() -> None:
    from types import SimpleNamespace

    from bench.transfer import _expected

    assert _expected(SimpleNamespace(pdf=True), "R-FAQ.pdf#page=14") == ("R-FAQ.pdf", 14)  # type: ignore[arg-type]
    assert _expected(SimpleNamespace(pdf=False), "ref/a.html") == ("ref/a.html", None)  # type: ignore[arg-type]


def test_the_transfer_benchmark_orders_verdicts_as_the_line_and_checks_its_ok_against_the_answers() -> None:
    from bench.transfer import _lost_ok_matches, in_line_order

    # the line's order, not the alphabet's: recall comes before the rerank, an unknown verdict last
    assert in_line_order({"reranked_out", "not_recalled", "ok", "zzz"}) == ["not_recalled", "reranked_out", "ok", "zzz"]
    rows = [{"kind": "prose", "off": {"passage5": True}}, {"kind": "code", "off": {"passage5": False}},
            {"kind": "unanswerable", "off": {}}]
    assert _lost_ok_matches({"rows": rows, "lost": {"counts": {"ok": 1, "reranked_out": 1}}}) is True
    assert _lost_ok_matches({"rows": rows, "lost": {"counts": {"ok": 2}}}) is False
    assert _lost_ok_matches({"rows": rows, "lost": {"error": "boom"}}) is None  # a failed diagnosis checks nothing
    assert _lost_ok_matches({"rows": rows, "lost": None}) is None  # answers kept from before the diagnosis
