"""Every chunk of a definition or variable list names the entry it describes.

Given entries in the shapes generated manuals print them (a Sphinx method
with a twelve-parameter signature and a long description, a DocBook setting
whose description goes on after a nested list of values, a table inside an
entry, a back-of-book index), when they are parsed and chunked, then every
chunk holding part of a description holds its term (whole, or the name a
reader searches for when the whole signature would crowd the chunk), no
chunk is over the model's input limit because of it, ids that name content
are not taken for furniture, and a renumbered manual section embeds nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from freshindex.core.enums import BlockKind
from freshindex.core.types import embed_text
from freshindex.services import Services
from freshindex.settings import load_settings
from freshindex.workers.chunking import Chunker, term_label
from freshindex.workers.chunking.pack import estimate_tokens
from freshindex.workers.parsing import Parsers
from freshindex.workers.parsing.html import term_name
from freshindex.workers.parsing.html_tree import Element, find_tag, parse_document
from freshindex.workers.runner import sync_inline

FIXTURES = Path(__file__).parent / "fixtures"

_SENTENCE = ("The cookie is sent back by the browser on every request to the same domain until it expires, "
             "and its value is signed so that a tampered cookie is rejected by the server. ")
_SIGNATURE = (
    '<dt class="sig sig-object py" id="django.http.HttpResponse.set_cookie">'
    '<code class="sig-prename descclassname"><span class="pre">HttpResponse.</span></code>'
    '<code class="sig-name descname"><span class="pre">set_cookie</span></code>('
    + ", ".join(f'<em class="sig-param"><span class="n">{p}</span>=<span class="default_value">None</span></em>'
                for p in ("key", "value", "max_age", "expires", "path", "domain", "secure", "httponly",
                          "samesite", "partitioned", "priority", "comment"))
    + ')<a class="headerlink" href="#django.http.HttpResponse.set_cookie">¶</a></dt>'
)
SPHINX = (
    "<html><head><title>Request and response objects</title></head><body><div class='body' role='main'>"
    "<div class='section' id='setting-test-cookies'><h1>Setting test cookies</h1>"
    "<p>Browsers may refuse cookies, so a view can test for them first.</p>"
    f"<dl class='py method'>{_SIGNATURE}<dd>"
    + "".join(f"<p>{_SENTENCE * 2}Paragraph {n}.</p>" for n in range(6))
    + "</dd></dl>"
    "<dl class='py method'><dt class='sig sig-object py' id='django.contrib.sessions.backends.base.SessionBase."
    "set_test_cookie'><code class='sig-name descname'><span class='pre'>set_test_cookie</span></code>()</dt>"
    "<dd><p>Sets a test cookie to determine whether the user's browser supports cookies.</p></dd></dl>"
    "</div><div id='cookie-banner'><p>This site uses cookies. Accept all cookies?</p></div></div></body></html>"
)
DOCBOOK = (
    "<html><head><title>20.3. Connections and Authentication</title></head><body>"
    "<div class='sect2' id='RUNTIME-CONFIG-CONNECTION-SSL'><h3 class='title'>20.3.3. SSL</h3>"
    "<div class='variablelist'><dl class='variablelist'>"
    "<dt id='GUC-SSL-CIPHERS'><span class='term'><code class='varname'>ssl_ciphers</code> "
    "(<code class='type'>string</code>)</span></dt><dd>"
    "<p>Specifies a list of SSL cipher suites that are allowed to be used by SSL connections. "
    + "The default is usually a reasonable choice unless you have specific security requirements. " * 3
    + "</p><p>Explanation of the default value:</p><div class='variablelist'><dl class='variablelist'>"
    + "".join(f"<dt><span class='term'><code class='literal'>{v}</code></span></dt><dd><p>{d} "
              + "Cipher suites of this group are listed by the OpenSSL ciphers command. " * 2 + "</p></dd>"
              for v, d in (("HIGH", "Cipher suites that use ciphers from HIGH group."),
                           ("MEDIUM", "Cipher suites that use ciphers from MEDIUM group."),
                           ("+3DES", "The OpenSSL default order for HIGH is problematic."),
                           ("!aNULL", "Disables anonymous cipher suites that do no authentication.")))
    + "</dl></div><p>Available cipher suite details will vary across OpenSSL versions; use the command "
    "openssl ciphers -v to see actual details for the currently installed OpenSSL version.</p>"
    "<div class='table' id='SSL-TABLE'><p class='title'><strong>Table 20.2. Cipher groups</strong></p>"
    "<div class='table-contents'><table class='table' summary='Cipher groups' border='1'><thead><tr><th>Group</th>"
    "<th>Example</th></tr></thead><tbody><tr><td>HIGH</td><td>AES</td></tr><tr><td>MEDIUM</td><td>SEED</td></tr>"
    "</tbody></table></div></div></dd></dl></div></div></body></html>"
)
INDEX = (
    "<html><head><title>Index</title></head><body><div class='index'><div class='indexdiv'><h3>A</h3><dl>"
    "<dt id='ientry-1'>archive_mode configuration parameter, <a class='indexterm' href='wal.html#A'>Archiving</a></dt>"
    "<dt id='ientry-2'>area, <a class='indexterm' href='geometry.html'>Geometric Functions</a></dt>"
    "<dt id='ientry-3'>array, <a class='indexterm' href='arrays.html'>Arrays</a></dt><dd><dl>"
    "<dt>accessing, <a class='indexterm' href='arrays.html#ACC'>Accessing Arrays</a></dt>"
    "<dt>constant, <a class='indexterm' href='arrays.html#IN'>Array Value Input</a></dt></dl></dd>"
    "</dl></div></div></body></html>"
)


def count(texts: list[str]) -> list[int]:
    """A WordPiece-like count (words and punctuation), two special tokens included."""
    return [estimate_tokens(t) + 1 for t in texts]


def parse(html: str, key: str = "page.html"):
    return Parsers().parse(html.encode(), key)


def chunk(html: str, **kw):
    return Chunker(**kw).chunk("doc", parse(html))


def _words(text: str) -> str:
    return " ".join("".join(ch if ch.isalnum() else " " for ch in text.lower()).split())


def _names(chunk_text: str, term: str) -> bool:
    return f" {_words(term)} " in f" {_words(chunk_text)} "


def _dt(html: str) -> Element:
    dt = find_tag(parse_document(f"<dl>{html}</dl>")[0], "dt")
    assert dt is not None
    return dt


def test_the_term_name_is_what_a_reader_searches_for() -> None:
    assert term_name([_dt(_SIGNATURE)]) == "HttpResponse.set_cookie"
    option = _dt("<dt><span class='term'><code>-D <em>directory</em></code><br/></span>"
                 "<span class='term'><code>--pgdata=<em>directory</em></code></span></dt>")
    assert term_name([option]) == "-D directory / --pgdata=directory"
    function = _dt("<dt><span class='term'><code class='function'>verify_heapam(relation regclass, "
                   "on_error_stop boolean) returns setof record</code></span></dt>")
    assert term_name([function]) == "verify_heapam"


def test_every_part_of_a_long_signature_s_description_names_it_within_the_limit() -> None:
    drafts = chunk(SPHINX, max_tokens=120, overlap_tokens=10, count_tokens=count)
    described = [c for c in drafts if "tampered cookie" in c.text]
    assert len(described) >= 3  # the description is split
    assert all(_names(c.text, "HttpResponse.set_cookie") for c in described), [c.text[:80] for c in described]
    # The whole signature stays in the part that starts the entry, its name in the others.
    assert sum("comment=None" in c.text for c in described) == 1
    chunker = Chunker(max_tokens=120, overlap_tokens=10, count_tokens=count)
    for c in drafts:
        seen = count([embed_text(c.heading_path, c.text, title=c.title)])[0]
        assert seen <= chunker.max_input_tokens, (seen, c.text[:80])


def test_a_label_never_takes_more_than_a_quarter_of_the_room() -> None:
    meta = {"term": "HttpResponse.set_cookie(" + ", ".join(["key=None"] * 40) + ")",
            "term_name": "HttpResponse.set_cookie"}
    assert term_label(meta, 400, len) == "HttpResponse.set_cookie"
    assert term_label({"term": "work_mem (integer)"}, 400, len) == "work_mem (integer)"
    long_name = {"term": "x" * 300, "term_name": "y" * 300}
    assert len(term_label(long_name, 400, len)) <= 100
    assert term_label({"text": "no entry"}, 400, len) == ""


def test_the_rest_of_a_description_after_a_nested_list_names_its_term() -> None:
    drafts = chunk(DOCBOOK, max_tokens=90, overlap_tokens=10, count_tokens=count)
    rest = [c for c in drafts if "will vary across OpenSSL versions" in c.text]
    assert rest and all(_names(c.text, "ssl_ciphers") for c in rest), [c.text for c in rest]
    for value in ("HIGH", "MEDIUM", "+3DES", "!aNULL"):
        holders = [c for c in drafts if "Cipher suites of this group" in c.text and value in c.text]
        assert holders, value


def test_a_table_inside_an_entry_names_the_entry_and_keeps_its_caption() -> None:
    drafts = chunk(DOCBOOK, max_tokens=90, overlap_tokens=10, count_tokens=count)
    tables = [c for c in drafts if c.kind == BlockKind.TABLE]
    assert tables
    for c in tables:
        assert c.text.startswith("Table 20.2. Cipher groups \u2014 ssl_ciphers (string)\n"), c.text
        assert c.meta["caption"] == "Table 20.2. Cipher groups"  # the citation shows the caption as printed
        assert c.meta["term"] == "ssl_ciphers (string)"


def test_ids_that_name_content_are_not_taken_for_a_cookie_banner() -> None:
    doc = parse(SPHINX)
    text = "\n".join(b.text for b in doc.blocks)
    assert "Setting test cookies" in [b.text for b in doc.blocks if b.kind == BlockKind.HEADING]
    assert any(b.meta.get("term") == "set_test_cookie()" for b in doc.blocks)
    assert "Sets a test cookie" in text
    assert "Accept all cookies" not in text  # a real banner still goes


def test_a_back_of_book_index_is_one_line_per_term_not_one_giant_term() -> None:
    doc = parse(INDEX)
    lines = [b.text for b in doc.blocks if b.kind == BlockKind.PARAGRAPH]
    assert "archive_mode configuration parameter, Archiving" in lines
    assert "area, Geometric Functions" in lines
    assert not any("archive_mode" in str(b.meta.get("term", "")) for b in doc.blocks)
    sub = next(b for b in doc.blocks if "Array Value Input" in b.text)
    assert sub.meta["term"] == "array, Arrays"


@pytest.fixture
def svc(tmp_path: Path) -> Iterator[Services]:
    services = Services(load_settings(data_dir=tmp_path / "data", embedding={"provider": "hashing"}))
    yield services
    services.close()


def test_a_renumbered_manual_section_embeds_no_chunk(svc: Services, tmp_path: Path) -> None:
    source = tmp_path / "src"
    source.mkdir()
    page = source / "runtime-config-resource.html"
    data = (FIXTURES / "docbook_guc.html").read_bytes()
    page.write_bytes(data)
    svc.registry.add_source("manual", kind="folder", location=str(source), owner="docs", kb="default")
    first = sync_inline(svc, "manual")
    assert first.run.status == "succeeded", first.errors
    assert first.run.summary["chunks_embedded"] > 3

    # A new section 20.4 is inserted before it in the next release: 20.4 -> 20.5 everywhere.
    page.write_bytes(data.replace(b"20.4.", b"20.5."))
    second = sync_inline(svc, "manual")
    assert second.run.status == "succeeded", second.errors
    assert second.run.summary["chunks_embedded"] == 0
    rows = svc.registry.chunk_rows(sorted(svc.registry.live_chunk_ids_for_kb("default")))
    memory = next(r for r in rows if "work_mem" in r.text)
    assert memory.heading_path == ("Resource Consumption", "Memory")
    assert memory.meta["numbered_heading_path"] == ["20.5. Resource Consumption", "20.5.1. Memory"]
