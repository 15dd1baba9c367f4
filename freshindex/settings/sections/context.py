"""Context assembly for the injection client: the token budget table, quotas, planning."""

from __future__ import annotations

from pydantic import BaseModel, Field, field_validator


class QueryBudgetSettings(BaseModel):
    """One row of the context budget table (``context.budgets``)."""

    share: float | None = Field(default=None, gt=0, le=1, description="share of the model window; "
                                "null = context.default_share")
    max_tokens: int | None = Field(default=None, ge=1, description="absolute cap on the context block")
    max_chunks: int = Field(default=6, ge=1, description="sources in the context block at most")
    per_document: int = Field(default=2, ge=1, description="sources from one document at most")


def _default_budgets() -> dict[str, QueryBudgetSettings]:
    return {
        "fact": QueryBudgetSettings(max_tokens=2000, max_chunks=5, per_document=2),
        "procedure": QueryBudgetSettings(max_tokens=4000, max_chunks=8, per_document=6),
        "compare": QueryBudgetSettings(max_tokens=4000, max_chunks=8, per_document=3),
        "diverse": QueryBudgetSettings(max_tokens=6000, max_chunks=10, per_document=1),
    }


class ContextSettings(BaseModel):
    """Context assembly and budget for the injection client (``injection.budget.ContextPolicy``)."""

    window_tokens: int = Field(default=128_000, ge=256, description="the chat model's context window, tokens")
    default_share: float = Field(default=0.15, gt=0, le=1, description="share of the window a query type "
                                 "without its own share gets")
    token_margin: float = Field(default=0.15, ge=0, le=1, description="kept free because the counting "
                                "tokenizer (MiniLM WordPiece) is not the chat model's")
    candidate_pool: int = Field(default=50, ge=1, le=1000, description="hits fetched before dedup and the "
                                "per-document quota")
    near_duplicate: float = Field(default=0.9, gt=0, le=1, description="word-shingle Jaccard from which "
                                  "two chunks count as one")
    mmr_lambda: float = Field(default=0.7, ge=0, le=1, description="MMR relevance weight (diverse questions "
                              "only; 1 = relevance alone)")
    join_adjacent: bool = Field(default=True, description="join neighbouring chunks of one section when both "
                                "are selected")
    min_score: float = Field(default=0.25, ge=-1, le=1, description="the dense cosine at least one admitted hit "
                             "must reach; below it the answer is insufficient evidence (no_evidence) whatever the "
                             "lexical side found. The refusal (refusal_*) then decides on the evidence admitted")
    test_file_weight: float = Field(default=0.8, gt=0, le=1, description="the fused score of a chunk of a test "
                                    "file (a tests/ or test/ folder; source files named test_*, *_test.*, *.test.*, *.spec.*) is "
                                    "multiplied by this: a repository's tests restate what its code and docs "
                                    "define, so they rank after them at equal match (1 = no difference)")
    changelog_weight: float = Field(default=0.5, gt=0, le=1, description="the fused score of a chunk of a "
                                    "changelog or release note (CHANGELOG.md, NEWS, releases/3.2.html, "
                                    "whatsnew/...) is multiplied by this unless the question asks what changed (a "
                                    "version number, new, removed, since, latest ...): a changelog names everything "
                                    "a release touched, so at equal match the page that documents it comes first "
                                    "(1 = no difference; 0.5 picked leave-one-corpus-out on six corpora)")
    lexical_rerank: bool = Field(default=True, description="reorder each document's chunks in the admitted pool by "
                                 "the IDF-weighted share of the question's terms each holds (the fused order of "
                                 "documents stands; injection.coverage.coverage_reranker); an application's own "
                                 "rerankers run after it")
    disabled_stages: frozenset[str] = Field(default_factory=frozenset, description="stages of the query line "
                                            "switched off (injection.stages.STAGES), for ablations: filter (the "
                                            "dense score floor and the staleness policy), refuse, rerank (the pool "
                                            "stays in fused order), group (near-copies and versions) or conflicts; "
                                            "recall, recheck (ACL, tenant, validity), pool, select, fit and render "
                                            "cannot be; an unknown or required name fails the client at start")
    query_planning: bool = Field(default=False, description="also search the exact identifiers a question names "
                                 "(dotted names, snake_case, CamelCase, --flags, ENV_VARS, `code`) on the lexical "
                                 "side alone, fused after the question's own search by reciprocal rank fusion "
                                 "(injection.planning); off by default: on the transfer corpora it raised MRR@10 "
                                 "but cost python311 one passage@5 (docs/architecture.md)")
    # Calibrated refusal (injection.refusal): refuse when bias + weights . signals < 0.
    refusal: bool = Field(default=True, description="refuse with an insufficient-evidence packet when the "
                          "calibrated signals say the evidence does not support an answer")
    refusal_depth: int = Field(default=5, ge=1, le=100, description="admitted candidates (fused order) whose text "
                               "counts as evidence for the refusal signals")
    # Fitted by bench.transfer (bench.heldout) on six whole corpora; its README figures are leave-one-corpus-out.
    refusal_bias: float = Field(default=-10.5168, description="refusal score intercept where no calibration applies "
                                "(a knowledge base too small to calibrate, calibration off)")
    refusal_coverage_weight: float = Field(default=10.4683, description="weight of the IDF-weighted coverage of the "
                                           "question's terms in the evidence")
    refusal_lexical_weight: float = Field(default=2.9146, description="weight of the best BM25 score per question "
                                          "term")
    refusal_dense_weight: float = Field(default=0.0, description="weight of the best dense cosine (0: it depends "
                                        "on the embedding model, the lexical signals do not)")
    refusal_key_term_share: float = Field(default=0.15, ge=0, le=1, description="missing terms make the refusal "
                                          "reason key_terms_missing (and are named) from this share of the weight")
    refusal_key_term_rarity: float = Field(default=0.6, ge=0, le=1, description="a plain word the collection "
                                           "holds is a key term (its absence from the evidence costs coverage) when "
                                           "its IDF is at least this share of an absent term's; compound "
                                           "identifiers and absent terms always are")
    refusal_unknown_names: bool = Field(default=True, description="refuse, whatever the calibrated score, a "
                                        "question naming an identifier (dotted, snake_case, CamelCase, an "
                                        "upper-case name) or a capitalised name inside a sentence that is not "
                                        "a word of general English (Flatpak, SARIF) that no document the caller "
                                        "may read mentions in any of its forms (a file's name, config.h.in, is "
                                        "the reader's own file: it only counts as missing); off leaves such "
                                        "questions to the score")
    refusal_ordinary_words: bool = Field(default=True, description="a plain word of general English (a whole "
                                         "word of the bundled WordPiece vocabulary) is never a key term: its absence "
                                         "from the evidence is a reader's wording, not a name the corpus lacks; it "
                                         "still counts through BM25")
    refusal_calibration: bool = Field(default=True, description="refit the refusal bias per knowledge base when a "
                                      "snapshot is built, on pseudo-questions made from its own chunks "
                                      "(injection.calibration); false: the shipped bias everywhere")
    refusal_calibration_sample: int = Field(default=200, ge=10, le=5000, description="chunks sampled to make the "
                                            "calibration's pseudo-questions (one answerable and one naming an "
                                            "absent identifier per chunk; refusal_calibration_perturbed says how "
                                            "many of the latter are asked)")
    refusal_calibration_perturbed: int = Field(default=50, ge=0, le=5000, description="of the sample's "
                                               "pseudo-questions naming an absent identifier, how many are asked "
                                               "(spread evenly over the sample): they only report the share the "
                                               "fitted bias refuses, never move it, and each costs a query at build "
                                               "time")
    refusal_calibration_min_chunks: int = Field(default=30, ge=1, description="a knowledge base with fewer points "
                                                "keeps the shipped refusal bias (too small to calibrate)")
    refusal_target_false_rate: float = Field(default=0.02, ge=0, lt=1, description="the calibrated bias refuses at "
                                             "most this share of the answerable pseudo-questions (fitted with the "
                                             "weights: pseudo-questions are easier than real ones)")
    refusal_calibration_refit_share: float = Field(default=0.1, ge=0, le=1, description="a build inherits its "
                                                   "parent's calibration until the points changed since it was "
                                                   "fitted exceed this share of the collection; a full build "
                                                   "always refits")
    max_stale_s: float | None = Field(default=None, gt=0, description="reject (not serve labelled) evidence of a "
                                      "stale source unverified for longer than this; None: serve it labelled STALE")
    budgets: dict[str, QueryBudgetSettings] = Field(
        default_factory=_default_budgets,
        description="query type (fact, procedure, compare, diverse) -> share, max_tokens, max_chunks, "
        "per_document; rows left out keep their defaults",
    )

    @field_validator("budgets")
    @classmethod
    def _known_types(cls, value: dict[str, QueryBudgetSettings]) -> dict[str, QueryBudgetSettings]:
        unknown = sorted(set(value) - {"fact", "procedure", "compare", "diverse"})
        if unknown:
            raise ValueError(f"unknown query types {unknown}: fact, procedure, compare, diverse")
        return {**_default_budgets(), **value}
