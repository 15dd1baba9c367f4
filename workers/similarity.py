"""How alike two texts are, and which vanished document a new key continues (moves by similarity).

A source that cannot name its renames (folder, S3, web) shows a moved and
edited file as one key gone and one key new.  :func:`match_moves` pairs
them the way ``git diff -M`` does, in git's order: the caller pairs
identical content first, then keys with the same basename are compared
(git's basename pass), then, among what is left, keys with the same suffix
whose sizes make the threshold reachable (git's full matrix, here bounded).
Within a pass the pairs go best similarity first, ties by new key then old
key, each key in at most one pair, so the answer is deterministic and
one-to-one.  A pass never takes a key an earlier pass paired: a same-name
match wins over a better-scoring pair under another name, as in git.

The measure (:func:`similarity`) is git's on lines: the bytes of the old
text's lines that the new text also holds (a line counted as often as both
hold it), over the larger text's bytes; 0.5 is git's default ``-M``.  Lines
are compared with the surrounding whitespace stripped and blank lines left
out, so a re-indented block (code moved under an ``if``) still matches,
where git would count it changed.

What this does not do: read anything (the caller passes a ``score``
callback that fetches and parses, and decides where the texts come from);
diff; weigh line order (a file with its lines shuffled scores 1.0, as in
git); promise that the sizes it filters on predict the score (sizes are of
the raw bytes, the texts may be extracted from markup).
"""

from __future__ import annotations

import heapq
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Lines:
    """A text as the measure sees it: its stripped, non-blank lines with their counts, and their bytes."""

    counts: Counter[str]
    weight: int  # sum of (UTF-8 bytes + 1 for the newline) over every counted line

    @classmethod
    def of(cls, texts: Iterable[str]) -> Lines:
        """The lines of ``texts`` (a document's chunk texts, or a file's one text) taken together."""
        counts: Counter[str] = Counter()
        for text in texts:
            counts.update(line for raw in text.splitlines() if (line := raw.strip()))
        return cls(counts, sum(_bytes(line) * n for line, n in counts.items()))


def _bytes(line: str) -> int:
    return len(line.encode("utf-8", "surrogatepass")) + 1


def similarity(old: Lines, new: Lines) -> float:
    """Bytes of lines both texts hold over the larger text's bytes: 1.0 identical, 0.0 nothing shared or empty."""
    larger = max(old.weight, new.weight)
    if larger == 0:
        return 0.0
    small, big = (old.counts, new.counts) if len(old.counts) <= len(new.counts) else (new.counts, old.counts)
    common = sum(_bytes(line) * min(n, big[line]) for line, n in small.items() if line in big)
    return common / larger


@dataclass(frozen=True)
class Match:
    """A new key that continues a vanished one, with its similarity and the pass that found it."""

    new: str
    old: str
    score: float
    by: str  # "basename" or "size"


def basename(key: str) -> str:
    """The last path segment of a key (a URL's query left out; a trailing slash ignored)."""
    return key.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1]


def suffix(key: str) -> str:
    """The basename's extension, lower-cased, with its dot ("" when it has none)."""
    name = basename(key)
    return name[name.rfind("."):].lower() if name.rfind(".") > 0 else ""


def size_plausible(old_size: int, new_size: int, threshold: float) -> bool:
    """Whether two raw sizes allow ``threshold``: the smaller at least that share of the larger (unknown: no)."""
    if old_size <= 0 or new_size <= 0:
        return False
    return min(old_size, new_size) >= threshold * max(old_size, new_size)


def _shared_tail(a: str, b: str) -> int:
    """How many trailing path segments two keys share (``requests/api.py``, ``src/requests/api.py``: 2)."""
    n = 0
    for x, y in zip(reversed(a.split("/")), reversed(b.split("/")), strict=False):
        if x != y:
            break
        n += 1
    return n


def _ratio(old_size: int, new_size: int) -> float:
    return min(old_size, new_size) / max(old_size, new_size) if old_size > 0 and new_size > 0 else 0.0


def match_moves(new: Mapping[str, int], old: Mapping[str, int], score: Callable[[str, str], float | None], *,
                threshold: float = 0.5, max_comparisons: int = 200, deadline: float | None = None,
                clock: Callable[[], float] = time.monotonic) -> list[Match]:
    """Pair new keys with vanished ones whose text they mostly hold: one-to-one, best first, ties by key.

    ``new`` and ``old`` map keys to their raw sizes (0 or less: unknown).
    ``score(new_key, old_key)`` is called at most ``max_comparisons`` times
    in all, on the most plausible pairs first (same basename, more shared
    path segments, closer sizes, then keys); it answers the similarity, or
    None when either side cannot be read.  A pair scoring under
    ``threshold`` is never a move.  Not guaranteed beyond the cap: a source
    with more same-named keys, or more unpaired keys, than
    ``max_comparisons`` on a side has only the first of them (by key)
    considered.  ``deadline`` (on ``clock``): no pair is scored after it, whatever is left of the cap, so
    hostile candidates that each take the parser's whole time limit cannot hold the planner.
    """
    if deadline is not None:
        score = _until(score, deadline, clock)
    cap = max(0, max_comparisons)
    budget = [cap]
    # Enumeration is bounded too: at most ``cap`` keys of a basename on each side, and in the size
    # pass at most ``cap`` keys on each side (the first by key), so a pass looks at <= cap * min(new, old)
    # pairs to choose the ``cap`` it scores.
    old_by_name: dict[str, list[str]] = {}
    new_by_name: dict[str, list[str]] = {}
    for key in sorted(old):
        old_by_name.setdefault(basename(key), []).append(key)
    for key in sorted(new):
        new_by_name.setdefault(basename(key), []).append(key)
    named = heapq.nsmallest(cap, ((n, o) for name, keys in new_by_name.items() for n in keys[:cap]
                                  for o in old_by_name.get(name, ())[:cap]),
                            key=lambda p: (-_shared_tail(*p), -_ratio(old[p[1]], new[p[0]]), p))
    matches = _pass(named, score, threshold, budget, "basename", taken=set())
    taken = {m.new for m in matches} | {m.old for m in matches}
    new_left = [n for n in sorted(new) if n not in taken][:cap]
    old_left = [o for o in sorted(old) if o not in taken][:cap]
    sized = heapq.nsmallest(budget[0], ((n, o) for n in new_left for o in old_left
                                        if suffix(n) == suffix(o) and size_plausible(old[o], new[n], threshold)),
                            key=lambda p: (-_ratio(old[p[1]], new[p[0]]), p))
    return matches + _pass(sized, score, threshold, budget, "size", taken=taken)


def _until(score: Callable[[str, str], float | None], deadline: float,
           clock: Callable[[], float]) -> Callable[[str, str], float | None]:
    """``score`` until ``deadline``; after it every pair answers None (not read) without being scored."""
    def bounded(new_key: str, old_key: str) -> float | None:
        return score(new_key, old_key) if clock() < deadline else None
    return bounded


def _pass(pairs: list[tuple[str, str]], score: Callable[[str, str], float | None], threshold: float,
          budget: list[int], by: str, *, taken: set[str]) -> list[Match]:
    """Score ``pairs`` in order while the budget lasts, then pair best first (ties by new key, old key)."""
    scored: list[Match] = []
    for new_key, old_key in pairs:
        if budget[0] <= 0:
            break
        budget[0] -= 1
        value = score(new_key, old_key)
        if value is not None and value >= threshold:
            scored.append(Match(new_key, old_key, value, by))
    out: list[Match] = []
    for m in sorted(scored, key=lambda m: (-m.score, m.new, m.old)):
        if m.new not in taken and m.old not in taken:
            taken.update((m.new, m.old))
            out.append(m)
    return out


__all__ = ["Lines", "Match", "basename", "match_moves", "similarity", "size_plausible", "suffix"]
