"""Proper names a question spells: a capitalised word inside a sentence ("on Kubernetes", "a SARIF file").

A reader names a product, a format or a tool with a capital letter (``Flatpak``,
``Parquet``, ``Bazel``, ``SARIF``) and a word of the sentence without one.  Such
a name the permitted corpus holds in no form is what an unanswerable question
asks about, like an identifier it lacks (:func:`injection.refusal.signals`:
``unknown``).  The first word of a sentence is capitalised by grammar, not as a
name, and is never one here; nor is a word with a capital inside it
(``CPack``, ``JSONPath``), which the tokenizer already takes as a compound name; nor
are the words of a fragment of three words or fewer (a sign-off: "Thanks, Priya") or of a sentence in
Title Case ("How Do I Enable Autoreload?"), where capitals say nothing.
"""

from __future__ import annotations

import re

from freshindex.vectorstore import lexical

__all__ = ["proper_names"]

#: A sentence ends at . ? ! or : followed by a space, or at a line break.
_SENTENCE = re.compile(r"(?<=[.?!:;])\s+|\n+")
#: Capitalised (``Kubernetes``) or upper-case (``SARIF``, ``GPUs``): a capital, then letters with no capital
#: after a small one.
_CAPITALISED = re.compile(r"[A-Z](?:[a-z]+|[A-Z]+s?)")
_EDGE = "\"'()[]{}<>,;:!?`*_.\u2018\u2019\u201c\u201d"
#: A sentence of at most this many words is a fragment (a sign-off, "Using Docker."): its names are no subject.
_FRAGMENT = 3


def proper_names(question: str) -> dict[str, str]:
    """The capitalised words of ``question`` that are not the first word of a sentence: their lexical token
    (``kubernete``, the tokenizer folds a plural) -> the word as the reader wrote it, in lower case, for a
    refusal to name."""
    names: dict[str, str] = {}
    for sentence in _SENTENCE.split(question):
        pieces = sentence.split()
        words = [p.strip(_EDGE) for p in pieces[1:]]
        # a fragment ("Thanks, Priya") names no subject; in Title Case every word is capitalised
        if len(pieces) <= _FRAGMENT or 2 * sum(w[:1].isupper() for w in words) > len(words):
            continue
        for word in words:
            if _CAPITALISED.fullmatch(word):
                tokens = lexical.tokenize(word)
                if tokens:
                    names.setdefault(tokens[0], word.lower())
    return names
