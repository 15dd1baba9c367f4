"""Tag searches over a parsed page: the plain cases of bs4's ``find_all``, as one loop over the tree.

Since 4.13, bs4 runs every element a ``find_all`` visits through its general
``ElementFilter`` (rule objects, a match call per rule per element); a search
by tag name over a large generated page costs tens of times a loop over
``descendants`` that compares names.  The HTML parser searches whole pages a
few dozen times, so these helpers stand in for the cases it uses: by tag name
(one name or a collection), by the presence of an attribute, by an
attribute's value.  They return the same elements in the same (document)
order as the ``find_all`` call they replace; ``tests/workers/test_soup.py``
compares them on real pages.  Not covered: CSS-class matching (``class_=``),
regular expressions, functions as filters, string searches: use bs4 there.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator

from bs4 import Tag

Names = str | Collection[str] | None


def _wanted(names: Names) -> frozenset[str] | None:
    if names is None:
        return None
    return frozenset((names,)) if isinstance(names, str) else frozenset(names)


def _value_matches(value: object, values: Collection[str]) -> bool:
    # As bs4 does for a multi-valued attribute (a list): any one value, or all of them joined.
    if isinstance(value, list):
        return any(v in values for v in value) or " ".join(value) in values
    return value in values


def iter_tags(node: Tag, names: Names = None, *, attr: str | None = None, values: Collection[str] | None = None,
              recursive: bool = True) -> Iterator[Tag]:
    """Tags under ``node`` (never ``node`` itself), in document order.

    ``names``: a tag name or a collection of them (``None``: any tag).
    ``attr``: only tags that have this attribute (``find_all(attr=True)``);
    with ``values`` too, only those whose value is one of ``values``
    (``find_all(attr=[...])``).  ``recursive=False``: direct children only.
    Do not change the tree while iterating; :func:`find_tags` lists first.
    """
    wanted = _wanted(names)
    for el in node.descendants if recursive else node.children:
        if not isinstance(el, Tag) or (wanted is not None and el.name not in wanted):
            continue
        if attr is not None:
            value = el.get(attr)
            if value is None or (values is not None and not _value_matches(value, values)):
                continue
        yield el


def find_tags(node: Tag, names: Names = None, *, attr: str | None = None, values: Collection[str] | None = None,
              recursive: bool = True) -> list[Tag]:
    """:func:`iter_tags` as a list: ``node.find_all(...)`` for these cases (the tree may change afterwards)."""
    return list(iter_tags(node, names, attr=attr, values=values, recursive=recursive))


def find_tag(node: Tag, names: Names = None, *, attr: str | None = None) -> Tag | None:
    """The first tag :func:`iter_tags` yields, or None: ``node.find(...)`` for these cases."""
    return next(iter_tags(node, names, attr=attr), None)


def find_parent_tag(node: Tag, names: Names) -> Tag | None:
    """The nearest ancestor named one of ``names``, or None: ``node.find_parent(names)``."""
    wanted = _wanted(names)
    parent = node.parent
    while parent is not None:
        if wanted is None or parent.name in wanted:
            return parent
        parent = parent.parent
    return None
