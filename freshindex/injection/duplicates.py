"""Near-duplicates across documents: one canonical evidence item, the other copies cited as its mirrors.

The registry folds *exact* copies into one document at indexing time
(``registry.twins``: a mirror has no points of its own).  Near copies
are separate documents: the same passage with small edits on two pages, an
older release's copy of a page, a hub page whose list entries restate the
lead lines of the pages it lists.  Shown as separate answers they take each
other's places, and the copy that wins the ranking is often the less
specific one.  :func:`canonical_groups` groups candidates of different
documents that say the same thing and picks which one to show:

Two candidates are *the same passage* when their normalised texts are equal,
or the word-shingle Jaccard of their
texts reaches ``jaccard`` or the smaller one's shingles are contained in the
other's at ``containment`` (both texts at least :data:`MIN_SHINGLES`
shingles, so a short common phrase never groups two chunks).  A hub chunk
(:func:`hub_like`: most of its lines are short list entries) *restates* a
candidate whose text holds its lead sentence.

The canonical member of a group is, in this order: the newer valid version
(a stale member loses to a fresh one; then the later ``date``; then, for
keys that differ only in a version directory, ``v1/x`` vs ``v2/x``, the
higher version); the more specific one (not a hub; then the one whose title
and heading path hold more of the question's terms, a dotted version in the
question matching a longer one that extends it); then the better rank.

Versions of one document (keys that differ only in a version directory)
are also ordered when their texts are not near-copies: a release moves text
across pages and rewrites it, so the older copy of a passage is often not a
near-copy of the newer one, and ranked above it answers from a superseded
release.  :func:`passed_over` marks the items of every version but the one
to answer from (the version the question names, ``R 4.0`` naming ``4.0.4``;
else the newest in the pool); assembly ranks them after every other item.

What it does not guarantee: detection is lexical (a paraphrase is a
separate answer), and candidates carry no registry canonical id (an exact
mirror never reaches assembly: it has no points).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from freshindex.core.payload import parse_time
from freshindex.vectorstore import lexical

__all__ = ["MIN_SHINGLES", "Member", "canonical_groups", "containment", "hub_like", "jaccard", "normalised",
           "passed_over", "shingles", "specificity"]

#: Fewer shingles than this on either side never make a near-duplicate (a shared phrase is not a copy).
MIN_SHINGLES = 8

_ENTRY = re.compile(r"^\s*(?:[-*\u2022]|\d+[.)])\s+")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s")
_VERSION_SEGMENT = re.compile(r"^v?\d+(?:[._-]\d+)*$", re.IGNORECASE)


_PUNCT_WS = re.compile(r"[\W_]+", re.UNICODE)


def normalised(text: str) -> str:
    """What near-duplicate detection compares: NFKC, case-folded, punctuation and spacing collapsed."""
    return _PUNCT_WS.sub(" ", unicodedata.normalize("NFKC", text).casefold()).strip()


def shingles(norm: str, k: int = 3) -> frozenset[str]:
    """The word ``k``-shingles of a normalised text (the text itself when shorter)."""
    words = norm.split()
    if len(words) < k:
        return frozenset([" ".join(words)]) if words else frozenset()
    return frozenset(" ".join(words[i : i + k]) for i in range(len(words) - k + 1))


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    """Jaccard similarity of two shingle sets (0 when either is empty)."""
    if not a or not b:
        return 0.0
    shared = len(a & b)  # |a | b| without building the union: the biggest cost of a compose
    return shared / (len(a) + len(b) - shared)


@dataclass(frozen=True)
class Member:
    """What grouping needs of one candidate (assembly builds these from its candidates, in rank order)."""

    document_id: str
    key: str
    title: str
    heading_path: tuple[str, ...]
    text: str
    norm: str  # normalised(text)
    shingles: frozenset[str]
    date: str | None = None
    stale: bool = False


def containment(a: frozenset[str], b: frozenset[str]) -> float:
    """The share of the smaller set found in the larger (0 when either is empty)."""
    if not a or not b:
        return 0.0
    return len(a & b) / min(len(a), len(b))


def hub_like(text: str) -> bool:
    """Whether a chunk reads as a hub: a list of at least three short entries making up most of its lines.

    An index page, an advisory archive or a changelog digest lists one line
    per item and points elsewhere for the substance; such a chunk restates
    lines of the pages it lists and is less specific than any of them.
    """
    lines = [ln for ln in text.splitlines() if ln.strip()]
    entries = [ln for ln in lines if _ENTRY.match(ln) and len(ln.split()) <= 8]
    return len(entries) >= 3 and 2 * len(entries) >= len(lines)


def _lead(norm_text: str, text: str) -> str:
    """The normalised first sentence (or first line) of ``text``; empty when under four words."""
    first = text.strip().splitlines()[0] if text.strip() else ""
    first = _SENTENCE_END.split(first, maxsplit=1)[0]
    lead = normalised(first)
    return lead if len(lead.split()) >= 4 else ""


def specificity(question_terms: frozenset[str], m: Member) -> int:
    """How many of the question's terms the member's title and heading path hold.

    A dotted term (``3.1``, ``os.path``) also matches a longer dotted name
    that extends it (``3.1.12``, ``os.path.join``): a page about a release
    or a member is about its series or its module too.
    """
    own = set(lexical.tokenize(" ".join((m.title, *m.heading_path))))
    dotted = [t for t in own if "." in t]
    hits = 0
    for t in question_terms:
        if t in own or ("." in t and any(d.startswith(t + ".") for d in dotted)):
            hits += 1
    return hits


def _version_key(key: str) -> tuple[str, tuple[int, ...]] | None:
    """(the key with its one version directory blanked, that version) when it has exactly one."""
    parts = key.split("/")
    found = [i for i, p in enumerate(parts[:-1]) if _VERSION_SEGMENT.match(p)]
    if len(found) != 1:
        return None
    i = found[0]
    numbers = tuple(int(n) for n in re.findall(r"\d+", parts[i]))
    return "/".join([*parts[:i], "\x00", *parts[i + 1:]]), numbers


#: A version the question names: dotted (``4.2``, ``3.11.2``) or ``v``-led (``v2``); a bare number is not one.
_NAMED_VERSION = re.compile(r"(?<![\w.])v?(\d+(?:\.\d+)+)(?![\w]|\.\d)|(?<![\w.])v(\d+)(?![\w.])", re.IGNORECASE)


def named_versions(question: str) -> set[tuple[int, ...]]:
    """The versions ``question`` names, as number tuples (``R 4.2`` -> ``(4, 2)``)."""
    return {tuple(int(n) for n in (m.group(1) or m.group(2)).split(".")) for m in _NAMED_VERSION.finditer(question)}


def passed_over(question: str, keys: Sequence[str]) -> list[bool]:
    """Per key: whether another version of its document among ``keys`` is the one to answer from.

    Versions of one document are keys that differ only in their one version
    directory (``4.0.4/R-admin.pdf``, ``4.2.2/R-admin.pdf``; ``docs/v1/x``,
    ``docs/v2/x``); here the directory must read as a release, dotted or
    ``v``-led: a year or a numbered folder (``2023/``, ``2/``) orders
    nothing.  The one to answer from is the highest version the
    question names (a named ``4.0`` names ``4.0.4``, which extends it), else
    the newest present; a key with no other version present is never passed over.
    """
    vks = [_version_key(k) if _release_dir(k) else None for k in keys]
    lineage: dict[str, set[tuple[int, ...]]] = {}
    for vk in vks:
        if vk is not None:
            lineage.setdefault(vk[0], set()).add(vk[1])
    named = named_versions(question) if any(len(v) > 1 for v in lineage.values()) else set()
    out = []
    for vk in vks:
        versions = lineage.get(vk[0], set()) if vk is not None else set()
        if vk is None or len(versions) < 2:
            out.append(False)
            continue
        asked = [v for v in versions if any(v[: len(n)] == n for n in named)]
        out.append(vk[1] != max(asked or versions))
    return out


#: A directory that reads as a release: ``4.2.2``, ``3.11``, ``v2``, ``v1_4`` (not ``2023`` or ``2``).
_RELEASE_SEGMENT = re.compile(r"^(?:v\d+(?:[._-]\d+)*|\d+(?:\.\d+)+)$", re.IGNORECASE)


def _release_dir(key: str) -> bool:
    return any(_RELEASE_SEGMENT.match(p) for p in key.split("/")[:-1])


def _newer(a: Member, b: Member) -> int:
    """1 when ``a`` is the newer valid version of the two, -1 when ``b`` is, 0 when neither says."""
    if a.stale != b.stale:
        return -1 if a.stale else 1
    da, db = parse_time(a.date), parse_time(b.date)
    if da is not None and db is not None and da != db:
        return 1 if da > db else -1
    va, vb = _version_key(a.key), _version_key(b.key)
    if va is not None and vb is not None and va[0] == vb[0] and va[1] != vb[1]:
        return 1 if va[1] > vb[1] else -1
    return 0


def canonical_groups(question: str, members: Sequence[Member], *, jaccard: float, containment_at: float,
                     similar: Callable[[frozenset[str], frozenset[str]], float]) -> list[list[int]]:
    """Groups of member indexes (each of two or more, from two or more documents), canonical first.

    ``members`` come in rank order (best first); ``similar`` is the Jaccard
    function assembly uses.  Members of one document are never grouped with
    each other here (assembly's own near-duplicate step handles those).
    """
    n = len(members)
    root = list(range(n))

    def find(i: int) -> int:
        while root[i] != i:
            root[i] = root[root[i]]
            i = root[i]
        return i

    hubs = [hub_like(m.text) for m in members]
    leads = [_lead(m.norm, m.text) if hubs[i] else "" for i, m in enumerate(members)]
    for i in range(n):
        a = members[i]
        for j in range(i + 1, n):
            b = members[j]
            if a.document_id == b.document_id:
                continue
            same = a.norm == b.norm or (min(len(a.shingles), len(b.shingles)) >= MIN_SHINGLES
                    and (similar(a.shingles, b.shingles) >= jaccard
                         or containment(a.shingles, b.shingles) >= containment_at))
            restated = bool((leads[i] and hubs[i] and not hubs[j] and f" {leads[i]} " in f" {b.norm} ")
                            or (leads[j] and hubs[j] and not hubs[i] and f" {leads[j]} " in f" {a.norm} "))
            if same or restated:
                root[find(j)] = find(i)
    groups: dict[int, list[int]] = {}
    for i in range(n):
        groups.setdefault(find(i), []).append(i)
    terms = frozenset(lexical.tokenize(question))
    out = []
    for idx in groups.values():
        if len(idx) < 2 or len({members[i].document_id for i in idx}) < 2:
            continue
        best = idx[0]
        for i in idx[1:]:
            if _better(members[i], i, hubs[i], members[best], best, hubs[best], terms):
                best = i
        out.append([best, *[i for i in idx if i != best]])
    return out


def _better(a: Member, ai: int, a_hub: bool, b: Member, bi: int, b_hub: bool, terms: frozenset[str]) -> bool:
    """Whether ``a`` is more canonical than ``b`` (newer valid version, then more specific, then rank)."""
    newer = _newer(a, b)
    if newer:
        return newer > 0
    if a_hub != b_hub:
        return b_hub
    sa, sb = specificity(terms, a), specificity(terms, b)
    if sa != sb:
        return sa > sb
    return ai < bi


#: A test file by its key: a ``tests``/``test`` folder (test code and its fixtures), or a source file named as a
#: test (``test_x.py``, ``x_test.go``, ``XTest.java``, ``x_spec.rb``, ``x.test.ts``, ``x.spec.js``), in any case.
#: A page ABOUT tests is not one: ``topics/testing/overview.html``, ``command/add_test.html``.
_CODE = r"\.(?:py|go|rs|js|jsx|mjs|cjs|ts|tsx|java|kt|rb|c|cc|cpp|h|hpp|cs|sh|php|swift|scala)$"
_TEST_FILE = re.compile(rf"(?:^|/)tests?/|(?:^|/)test_[^/]+{_CODE}|(?:_test|_spec){_CODE}|\.(?:test|spec){_CODE}",
                        re.IGNORECASE)
#: JUnit's convention, in its own case: ``FooTest.java``, ``BarTests.kt`` (``contest.py`` is no test).
_CLASS_TEST = re.compile(r"[a-z0-9]Tests?\.(?:java|kt|cs|scala|swift)$")


def is_test_file(key: str) -> bool:
    """Whether the document ``key`` is a repository's test (its tests restate what its code and docs define)."""
    return _TEST_FILE.search(key) is not None or _CLASS_TEST.search(key) is not None


#: A changelog by its key: a file named for one (``CHANGELOG.md``, ``CHANGES.rst``, ``NEWS``, ``HISTORY.txt``,
#: ``release-notes.md``, ``whats-new.html``), or a page in a folder of them (``releases/3.2.html``,
#: ``releases/5.0/index.html``, ``release/3.23.html``, ``change_log/release-2.1.md``, ``whatsnew/3.11.html``,
#: ``changelog.d/1.bugfix.md``). Documentation files only: ``history.py`` or ``release/bump.py`` is code.
#: Software documentation's convention, not one corpus's.
_DOC_EXT = r"\.(?:md|markdown|rst|txt|html?|adoc|asciidoc)"
_CHANGELOG = re.compile(
    rf"(?:^|/)(?:change[-_]?logs?|changes|news|history|release[-_]?notes|whats[-_]?new)(?:{_DOC_EXT})?$"
    rf"|(?:^|/)(?:releases?|change[-_]?logs?|release[-_]?notes|whats[-_]?new|changelog\.d|news\.d)/"
    rf"(?:[^/]+/)*[^/]+{_DOC_EXT}$", re.IGNORECASE)
#: A question about what changed: a version number (``3.2``, ``2.x``, ``v1.4.2``; not ``0.5 s``, ``1.5 GB`` or an
#: address), "what's new", "added in", "changes since", "since version", "release notes", "which release" ...
#: Not a lone "new", "change" or "now": "how do I change the port", "create a new project" ask how it works.
_ASKS_CHANGES = re.compile(
    r"(?<![\d.])\bv?\d+\.(?:\d+|x)(?:\.\d+)?\b(?!\.\d)(?!\s*(?:%|[kmgt]i?b|ms|s|secs?|seconds?|minutes?)\b)"
    r"|\bwhat(?:'s| is| has| was)? (?:new|changed)\b"
    r"|\b(?:new|added|removed|deprecated|dropped|introduced|changed|fixed) (?:in|since|between)\b"
    r"|\b(?:changes?|differences?) (?:in|since|between)\b"
    r"|\bsince (?:version|release|v?\d)"
    r"|\b(?:release notes?|changelog|change log)\b"
    r"|\b(?:which|what|latest|recent|previous|next|newest|this|last) (?:[\w.-]+ ){0,2}(?:releases?|versions?)\b",
    re.IGNORECASE)


def is_changelog(key: str) -> bool:
    """Whether the document ``key`` is a changelog or release note (it names what each release touched); a web
    key's query or fragment is not part of its name."""
    return _CHANGELOG.search(key.split("#", 1)[0].split("?", 1)[0]) is not None


def asks_about_changes(question: str) -> bool:
    """Whether ``question`` asks what a release changed (a version number, "what's new", "removed in" ...)."""
    return _ASKS_CHANGES.search(question) is not None


#: Extensions that make a dotted token a file name (the last one: ``.h.in`` and ``.tar.gz`` end in one too). Only
#: ones no library names an attribute or module after: not ``json``, ``html``, ``xml``, ``csv``, ``pdf``, ``lock``,
#: ``svg``, ``zip``, ``h``, ``c``, ``js``, ``ts``, ``yaml``, ``conf``, ``log`` or ``sqlite3`` (``httpx.Response.json``,
#: ``asyncio.Lock``, R's ``read.csv``, ``numpy.matrix.H``, ``dbm.sqlite3``: names a corpus holds or does not).
_FILE_NAME = re.compile(
    r"[^\s/]*[\w-]\.(?:in|am|ac|cmake|hh|hpp|cc|cxx|cpp|txt|md|rst|yml|toml|ini|cfg|deb|rpm|tar|gz|tgz|bz2|xz|"
    r"whl|py|pyi|mjs|sh|bat|exe|dll|so|dylib|jar|png|jpe?g|gif)",
    re.IGNORECASE)


def is_file_name(token: str) -> bool:
    """Whether ``token`` is a file's name (``config.h.in``, ``name_version-revision_arch.deb``): a reader's own
    file, which documentation names by its role ("the input file", "the package"), not a name it must hold."""
    return _FILE_NAME.fullmatch(token.rsplit("/", 1)[-1]) is not None  # a path's file: ``cmake/config.h.in``

