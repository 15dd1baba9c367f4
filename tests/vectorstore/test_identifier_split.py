"""Identifiers split for lexical matching, and a code chunk's searchable fields (issue 43, build item 2).

A name is one whole token plus its words, so a question that spells the name
and one that says its words both match; the parts never outweigh the whole.  A code
chunk's lexical text carries its path, module-qualified symbol, signature and
docstring; what the model embeds does not change.
"""

from __future__ import annotations

import math
from collections import Counter

from freshindex.vectorstore.lexical import code_names, document_vector, lexical_text, token_index, tokenize
from freshindex.workers.chunking import Chunker
from freshindex.workers.parsing import Parsers


def test_snake_camel_dotted_file_and_module_names_are_whole_tokens_and_words() -> None:
    assert tokenize("unbind_request_id") == ["unbind_request_id", "unbind", "request", "id"]
    assert tokenize("BoundLoggerBase") == ["boundloggerbase", "bound", "logger", "base"]
    assert tokenize("JSONRenderer") == ["jsonrenderer", "json", "renderer"]
    assert tokenize("markdown.extensions.toc") == ["markdown.extensions.toc", "markdown", "extension", "toc"]
    assert tokenize("CMAKE_CXX_STANDARD") == ["cmake_cxx_standard", "cmake", "cxx", "standard"]
    assert tokenize("test_toc.py") == ["test_toc.py", "test", "toc", "py"]
    # a name led by underscores keeps its dotted tail whole (it was cut at the dot: ``_base`` + ``py``)
    assert tokenize("_base.py") == ["_base.py", "base", "py"]
    assert tokenize("see __init__.py") == ["see", "__init__.py", "init", "py"]
    assert tokenize("src/structlog/_config.py")[0] == "src/structlog/_config.py"
    # a question and a document go through the same function: the same tokens on both sides
    assert set(tokenize("What does _base.py do?")) >= {"_base.py", "base"}


def test_each_part_counts_once_per_name_and_the_whole_is_the_rarer_token() -> None:
    counts = Counter(tokenize("get_object_or_404 get_object_or_404"))
    assert counts["get_object_or_404"] == counts["get"] == counts["object"] == 2
    # a part repeated inside one name is not counted twice for it
    assert Counter(tokenize("item_item_list"))["item"] == 1


def _bm25(query: str, docs: list[str]) -> list[float]:
    """BM25 with the engine's IDF over ``docs``, as the engine ranks them."""
    vectors = [dict(zip(d.indices, d.values, strict=True)) for d in map(document_vector, docs)]
    n = len(docs)
    scores = []
    for vec in vectors:
        score = 0.0
        for t in set(tokenize(query)):
            i = token_index(t)
            df = sum(1 for v in vectors if i in v)
            if i in vec:
                score += math.log(1 + (n - df + 0.5) / (df + 0.5)) * vec[i]
        scores.append(score)
    return scores


def test_the_chunk_naming_the_identifier_outranks_chunks_that_only_share_its_words() -> None:
    docs = ["def get_object_or_404(klass): raise Http404",
            "get the object from the cache; get it again; the object is shared",
            "Return 404 when the page is missing, get another page",
            "unrelated text about templates"]
    scores = _bm25("get_object_or_404", docs)
    assert scores[0] == max(scores) and scores[0] > 1.5 * sorted(scores)[-2]
    # the words alone still find a chunk that names the identifier
    assert _bm25("object or 404", docs)[0] > 0


SOURCE = '''"""Bound loggers."""


class BoundLoggerBase:
    """Immutable context carrier."""

    def unbind(self, *keys: str) -> "BoundLoggerBase":
        """Return a new logger with *keys* removed from its context.

        Raises KeyError if a key is not part of the context.
        """
        bl = self.bind()
        for key in keys:
            del bl._context[key]
        return bl

    def bind(self, **new_values):
        """Return a new logger with *new_values* added."""
        return self
'''


def _chunks(key: str) -> list:
    return Chunker(max_tokens=100).chunk("doc", Parsers().parse(SOURCE.encode(), key))


def test_a_code_chunks_lexical_text_holds_its_path_qualified_symbol_signature_and_docstring() -> None:
    chunks = _chunks("src/structlog/_base.py")
    unbind = next(c for c in chunks if c.meta.get("symbol") == "BoundLoggerBase.unbind")
    text = lexical_text(text=unbind.text, title=unbind.title, heading_path=unbind.heading_path,
                        key="src/structlog/_base.py", meta=unbind.meta)
    tokens = set(tokenize(text))
    # path: the whole path, the file name and the folders' words
    assert {"src/structlog/_base.py", "_base.py", "structlog", "base"} <= tokens
    # module-qualified symbol, whole and in words
    assert {"structlog._base.boundloggerbase.unbind", "boundloggerbase.unbind", "unbind", "bound", "logger"} <= tokens
    # signature and docstring
    assert "def unbind(self, *keys: str)" in text and "keyerror" in tokens and "removed" in tokens
    # a question naming the module or the dotted name matches tokens of this chunk
    assert {"structlog._base.boundloggerbase.unbind", "_base.py"} <= set(tokenize(
        "What does structlog._base.BoundLoggerBase.unbind in _base.py raise?"))


def test_the_path_is_lexical_only_and_a_moved_file_keeps_its_embedded_text() -> None:
    here, moved = _chunks("src/structlog/_base.py"), _chunks("lib/other/place.py")
    assert [c.embed_text for c in here] == [c.embed_text for c in moved]
    assert [c.content_hash for c in here] == [c.content_hash for c in moved]
    assert all("structlog" not in c.embed_text for c in here)


def test_module_names_follow_the_common_layouts() -> None:
    code = {"language": "python"}
    assert code_names("src/structlog/dev.py", {**code, "symbol": "ConsoleRenderer"}) == [
        "src/structlog/dev.py", "dev.py", "structlog.dev.ConsoleRenderer"]
    assert code_names("markdown/extensions/__init__.py", {**code, "symbol": "<module>"}) == [
        "markdown/extensions/__init__.py", "__init__.py", "markdown.extensions"]
    assert code_names("setup.py", {**code, "symbol": "main"}) == ["setup.py", "setup.main"]


def test_prose_keeps_only_its_file_name() -> None:
    text = lexical_text(text="body", key="docs/extensions/toc.md", meta={"language": "python"})
    assert text.endswith("toc.md") and "docs/extensions" not in text
    code = lexical_text(text="body", key="app/models.py", meta={"language": "python", "symbol": "f"})
    assert "app/models.py" in code and "app.models.f" in code
    # a source file titled with its path does not carry the path twice
    titled = lexical_text(text="body", title="app/models.py", key="app/models.py",
                          meta={"language": "python", "symbol": "f"})
    assert titled.count("app/models.py") == 1 and "app.models.f" in titled
