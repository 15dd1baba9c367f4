"""A page as lxml's HTML tree (libxml2's parser), read the way the HTML parser reads it.

lxml builds the tree in C, tens of times faster than a pure-Python parser,
but it models text differently: an element's ``text`` (before its first
child) and ``tail`` (after it) are strings on the elements, comments are
nodes among them, and removing an element takes its tail with it.  This
module is the one place that knows that; the rest of the parser asks it:

* :func:`parse_document` parses a decoded page.  A whitespace-only run of
  text outside ``<pre>``/``<textarea>`` becomes one newline (when it held
  one) or one space, and text inside ``<script>``, ``<style>``,
  ``<template>``, ``<rt>`` and ``<rp>`` is not text, as the parser has
  always read pages.
* :func:`children` yields an element's text runs and child elements in
  order; :func:`text` and :func:`has_text` read the text under an element.
  Comments (and processing instructions, which libxml2 keeps as comments)
  are never text, but the text after one is a run of its own.
* :class:`Pruning` removes, extracts and unwraps elements and says whether
  one was removed; the text around an element stays in place and stays in
  separate runs (an empty comment marks where the element was), so a walk
  after the removal reads what it read before.
* :func:`iter_tags` and friends search by tag name and attribute, in
  document order, skipping comments.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterator
from functools import lru_cache
from typing import Any, TypeAlias

from lxml import etree

#: An element of the tree (libxml2's HTML parser, lxml's plain ``etree._Element``); lxml ships no
#: type information, so to the type checker it is Any.
Element: TypeAlias = Any
Names = str | Collection[str] | None

_PARSER = etree.HTMLParser(huge_tree=True)  # huge_tree: deep pages reach the depth check instead of being cut
_PRESERVE = ("pre", "textarea")
_NOT_TEXT = ("script", "style", "template", "rt", "rp")
_ASCII_SPACE = " \n\t\f\r"
#: lxml refuses a str that starts with an XML declaration naming an encoding; the text is decoded already.
_XML_DECLARATION = re.compile(r"^<\?xml[^>]*>")
_BODY_TAG = re.compile(r"<body[\s/>]", re.I)


def is_tag(node: object) -> bool:
    """An element (not a comment, a processing instruction or an entity)."""
    return isinstance(node, etree._Element) and isinstance(node.tag, str)


def _collapse(value: str | None) -> str | None:
    if not value or value.strip(_ASCII_SPACE):
        return value
    return "\n" if "\n" in value else " "


#: Whitespace-only runs of text outside <pre> and <textarea> (XPath's whitespace: space, tab, CR, LF).
_BLANK_RUNS = etree.XPath("//text()[normalize-space(.) = '' and not(ancestor::pre or ancestor::textarea)]")
_HIDDEN_RUNS = etree.XPath("|".join(f"//{name}//text()" for name in _NOT_TEXT))


def _normalise(root: Element, form_feed: bool) -> None:
    """Whitespace-only runs outside <pre>/<textarea> to one newline or space; no text in scripts and ruby."""
    if form_feed:  # a form feed is whitespace to the parser but not to XPath
        _normalise_each(root)
    else:
        for run in _BLANK_RUNS(root):
            value = "\n" if "\n" in run else " "
            if run != value:
                _set_run(run, value)
    for run in _HIDDEN_RUNS(root):
        _set_run(run, None)


def _set_run(run: Any, value: str | None) -> None:
    """Replace a run of text found by XPath (lxml's "smart string", which knows where it sits)."""
    if run.is_tail:
        run.getparent().tail = value
    else:
        run.getparent().text = value


def _normalise_each(root: Element) -> None:
    """:func:`_normalise`'s whitespace rule, element by element."""
    kept = [(el, el.text, el.tail if el is not pre else None)
            for pre in root.iter(*_PRESERVE) for el in pre.iter()]
    for el in root.iter():
        if isinstance(el.tag, str):
            el.text = _collapse(el.text)
        el.tail = _collapse(el.tail)
    for el, text, tail in kept:
        if isinstance(el.tag, str):
            el.text = text
        if tail is not None:
            el.tail = tail


def parse_document(text: str) -> tuple[Element, bool]:
    """The page's root element (``<html>``) and whether the page has a ``<body>`` of its own."""
    text = _XML_DECLARATION.sub("", text, count=1)
    root = etree.fromstring(text, _PARSER) if text.strip() else None
    if root is None:  # nothing but whitespace or comments
        root = etree.fromstring("<html><body></body></html>", _PARSER)
    _normalise(root, "\f" in text)
    return root, bool(_BODY_TAG.search(text))


# reading -------------------------------------------------------------------


def children(node: Element) -> Iterator[Element | str]:
    """The text runs and child elements of ``node`` in document order (comments skipped)."""
    if node.text:
        yield node.text
    for child in node:
        if isinstance(child.tag, str):
            yield child
        if child.tail:
            yield child.tail


def child_tags(node: Element) -> list[Element]:
    return [c for c in node if isinstance(c.tag, str)]


def strings(node: Element) -> Iterator[str]:
    """Every text run under ``node`` (not its tail), in document order."""
    return node.itertext()


def get_text(node: Element, sep: str = "") -> str:
    """The text under ``node``, runs joined with ``sep``."""
    return sep.join(node.itertext())


def has_text(node: Element) -> bool:
    """Whether any text under ``node`` is more than whitespace."""
    return any(s.strip() for s in node.itertext())


def classes(node: Element) -> list[str]:
    """The element's classes, one per whitespace-separated word."""
    value = node.get("class")
    return value.split() if value else []


def class_text(node: Element) -> str:
    """The element's classes joined by single spaces."""
    value = node.get("class")
    return " ".join(value.split()) if value else ""


# searching -----------------------------------------------------------------


def _tags(names: Names) -> tuple[str, ...]:
    if names is None:
        return ()
    return (names,) if isinstance(names, str) else tuple(names)


def iter_tags(node: Element, names: Names = None, *, attr: str | None = None,
              values: Collection[str] | None = None, recursive: bool = True) -> Iterator[Element]:
    """Elements under ``node`` (never ``node`` itself), in document order.

    ``names``: a tag name or a collection of them (``None``: any element).
    ``attr``: only elements that have this attribute; with ``values`` too,
    only those whose value is one of ``values`` (the class attribute: one of
    its words, or all of them).  ``recursive=False``: direct children only.
    Do not change the tree while iterating; :func:`find_tags` lists first.
    """
    tags = _tags(names)
    if recursive and attr is not None and node.getparent() is None:
        found = _attribute_search(tags, attr)(node)  # a whole page: XPath filters in C
    elif recursive:
        found = node.iterdescendants(*tags) if tags else node.iterdescendants(etree.Element)
    else:
        found = (c for c in node if isinstance(c.tag, str) and (not tags or c.tag in tags))
    if attr is None:
        return found
    if values is None:
        return (el for el in found if el.get(attr) is not None)
    return (el for el in found if (v := el.get(attr)) is not None and _value_matches(attr, v, values))


@lru_cache(maxsize=256)
def _attribute_search(tags: tuple[str, ...], attr: str) -> Any:
    """An XPath selecting the descendants named ``tags`` (any when empty) that have ``attr``, in document order."""
    names = " or ".join(f"self::{t}" for t in tags)
    return etree.XPath(f"descendant::*[{f'({names}) and ' if names else ''}@{attr}]")


def _value_matches(attr: str, value: str, values: Collection[str]) -> bool:
    if attr == "class":
        words = value.split()
        return any(v in values for v in words) or " ".join(words) in values
    return value in values


def find_tags(node: Element, names: Names = None, *, attr: str | None = None,
              values: Collection[str] | None = None, recursive: bool = True) -> list[Element]:
    """:func:`iter_tags` as a list (the tree may change afterwards)."""
    return list(iter_tags(node, names, attr=attr, values=values, recursive=recursive))


def find_tag(node: Element, names: Names = None, *, attr: str | None = None) -> Element | None:
    """The first element :func:`iter_tags` yields, or None."""
    return next(iter_tags(node, names, attr=attr), None)


def find_parent_tag(node: Element, names: Names) -> Element | None:
    """The nearest ancestor named one of ``names``, or None."""
    return next(node.iterancestors(*_tags(names)), None)


def depth_over(root: Element, limit: int) -> bool:
    """Whether an element sits more than ``limit`` levels deep (``root``, the document's element, is level 1)."""
    return bool(_level(limit + 1)(root))


@lru_cache(maxsize=8)
def _level(depth: int) -> Any:
    """An XPath: is there an element ``depth`` levels deep (one step a level, each step one pass in C)."""
    return etree.XPath(f"boolean({'/*' * depth})")


# changing ------------------------------------------------------------------


def _mark() -> Element:
    return etree.Comment("")


class Pruning:
    """Removals from one tree, remembered so that a removed element (and all it held) is known as removed."""

    def __init__(self) -> None:
        self._removed: set[Element] = set()

    def is_removed(self, node: Element) -> bool:
        return node in self._removed

    def remove(self, node: Element) -> None:
        """Take ``node`` and everything in it out of the tree; the text after it stays."""
        self._removed.update(node.iter())
        self.extract(node)

    @staticmethod
    def extract(node: Element) -> Element:
        """Detach ``node`` (to be read on its own); the text after it stays where it was, a run of its own."""
        parent = node.getparent()
        if parent is not None:
            mark = _mark()
            mark.tail = node.tail
            node.tail = None
            parent.replace(node, mark)
        return node

    @staticmethod
    def unwrap(node: Element) -> None:
        """Replace ``node`` by what it holds, each run of text staying a run of its own."""
        parent = node.getparent()
        if parent is None:
            return
        first = _mark()
        first.tail, node.text = node.text, None
        node.addprevious(first)
        for child in list(node):
            node.addprevious(child)  # moves the child with its tail
        last = _mark()
        last.tail, node.tail = node.tail, None
        node.addprevious(last)
        parent.remove(node)

    @staticmethod
    def move_before(node: Element, anchor: Element) -> None:
        """Move ``node`` (without the text after it) to just before ``anchor``."""
        Pruning.extract(node)
        anchor.addprevious(node)
