"""The lexical tokeniser and BM25 weights (pure functions)."""

from __future__ import annotations

from freshindex.vectorstore.lexical import (
    document_vector,
    identifiers,
    lexical_text,
    query_vector,
    token_index,
    tokenize,
)


def test_identifiers_are_kept_whole_and_split_into_parts() -> None:
    assert tokenize("get_object_or_404(Model)") == ["get_object_or_404", "get", "object", "404", "model"]
    assert tokenize("Set databases") == ["set", "database"]  # plain words: lower-cased, plural folded
    # an upper-case plural is a name: whole beside the fold (STORAGES is not just any "storage")
    assert tokenize("Set DATABASES") == ["set", "databases", "database"]
    assert tokenize("STORAGES") == ["storages", "storage"] and tokenize("CACHE") == ["cache"]
    assert tokenize("max_connections = 100")[:3] == ["max_connections", "max", "connection"]
    assert "--no-input" in tokenize("migrate --no-input") and "input" in tokenize("migrate --no-input")
    assert {"httpresponse", "http", "response"} <= set(tokenize("HttpResponse"))
    assert {"django.db.models", "django", "db", "model"} <= set(tokenize("django.db.models"))


def test_questions_lose_their_stopwords_and_cjk_becomes_bigrams() -> None:
    assert tokenize("How do I rotate the signing keys?") == ["rotate", "signing", "key"]
    assert tokenize("配置数据库") == ["配置", "置数", "数据", "据库"]
    assert tokenize("") == [] and not query_vector("how do I do it")


def test_a_text_without_cjk_tokenizes_as_one_with_cjk_does_word_by_word() -> None:
    # The fast path (no CJK anywhere in the text) and the word-by-word path give the same tokens
    latin = ("Set DATABASES and get_object_or_404(Model); run migrate --no-input on django.db.models, "
             "__init__.py and _base.py, HttpResponse 404 v2 e.g. STORAGES " + "x" * 70 + " a_" + "y" * 80)
    assert [*tokenize(latin), "配置", "置数"] == tokenize(latin + " 配置数")
    assert tokenize("配置数 " + latin) == ["配置", "置数", *tokenize(latin)]
    long_word = "w" * 70  # longer than the memoised words and than a whole token: dropped, as before
    assert tokenize(long_word) == tokenize("配 " + long_word)[1:] == []


def test_document_weights_saturate_and_a_query_weighs_each_token_once() -> None:
    once, many = document_vector("timeout"), document_vector("timeout " * 50)
    assert once.indices == many.indices == (token_index("timeout"),)
    assert once.values[0] < many.values[0] < 2.2 + 1e-6  # BM25 saturates below k1 + 1
    q = query_vector("timeout timeout retry")
    assert sorted(q.indices) == sorted({token_index("timeout"), token_index("retry")}) and set(q.values) == {1.0}
    assert list(q.indices) == sorted(q.indices)


def test_lexical_text_adds_identifiers_and_the_file_name_but_not_the_folder() -> None:
    meta = {"symbol": "Pool.acquire", "members": ["Pool.release"], "columns": ["Region", "Price"],
            "signature": "def acquire(self, timeout)"}
    text = lexical_text(text="body", title="Pools", heading_path=("API", "Pool"), key="src/db/pool_manager.py",
                        meta=meta)
    assert text.split("\n")[:4] == ["Pools", "API", "Pool", "body"]
    assert "Pool.release" in text and "Region" in text and text.endswith("pool_manager.py")
    assert "src/db" not in text
    assert identifiers({"symbol": "<module>"}) == [] and identifiers(None) == []
