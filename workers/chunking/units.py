"""Prose sections as *units*: the smallest pieces a chunk boundary may fall between.

A unit is one step, paragraph or list item together with what qualifies it:

* a condition or exception ("Only if ...", "Unless ...", "This does not
  apply to ...", "Except ...", 仅当, 除非, 不适用于) written as its own
  paragraph or list item joins the step before it;
* a warning or note (admonition) joins the step before it;
* a lead-in ("Before you roll back:") joins what it introduces;
* a code block joins the paragraph that introduces it, and a paragraph that
  explains the code right after it ("This command ...") joins the code.

Lists longer than the budget are read item by item (nested lines stay with
their item), so a long procedure can span chunks without a step being
separated from its condition.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from freshindex.core.enums import BlockKind
from freshindex.core.types import Block
from freshindex.workers.chunking.pack import Count, estimate_tokens

_CONDITION_START = re.compile(
    r"^\W{0,3}(only (if|when|after|before|for)|unless|except|excluding|this (step |rule |procedure |section )?"
    r"(does not|doesn't|must not|should not|only) apply|(does not|doesn't|do not|never) apply|not applicable|"
    r"however|but\b|otherwise|in that case|if (not|so|this|that|the above)|provided that|as long as|note\b|"
    r"important\b|caution\b|warning\b|exception\b|"
    r"仅当|只有当|仅在|只在|除非|除外|不适用于|本步骤不适用|但是|但|否则|注意|例外|前提是)",
    re.I,
)
_CONDITION_ANYWHERE = re.compile(
    r"\b(only if|only when|unless|does not apply to|do not apply to|doesn't apply to|except (for|when|if))\b|"
    r"仅当|除非|不适用于", re.I)
_EXPLAINS_CODE = re.compile(r"^(this|these|the (above|command|commands|example|snippet|output|code)|here|it|"
                            r"in this example|above|该|这|上面|以上)\b", re.I)
_ITEM_START = re.compile(r"^(\s{0,3})([-*+•]|\d{1,3}[.)])\s+")
_LEAD_IN = (":", "：")
#: A short paragraph that mentions a condition is assumed to qualify the step before it.
_SHORT = 60


@dataclass
class Unit:
    parts: list[Block] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)

    @property
    def text(self) -> str:
        return render([self])

    @property
    def tokens(self) -> int:
        return estimate_tokens(self.text)

    def add(self, block: Block, text: str | None = None) -> None:
        self.parts.append(block)
        self.texts.append(block.text if text is None else text)

    @property
    def last_kind(self) -> str:
        return self.parts[-1].kind if self.parts else ""

    @property
    def ends_with_lead_in(self) -> bool:
        return bool(self.texts) and self.texts[-1].rstrip().endswith(_LEAD_IN) and self.last_kind != BlockKind.CODE


def render(units: list[Unit]) -> str:
    """The text of consecutive units: items of one list on consecutive lines,
    everything else separated by a blank line."""
    out: list[str] = []
    prev: Block | None = None
    for unit in units:
        for block, text in zip(unit.parts, unit.texts, strict=True):
            if out:
                out.append("\n" if block is prev and block.kind == BlockKind.LIST else "\n\n")
            out.append(text)
            prev = block
    return "".join(out)


def is_condition(text: str) -> bool:
    """Text that qualifies the step before it rather than standing alone."""
    first = text.lstrip()
    m = _ITEM_START.match(first)
    if m:
        first = first[m.end() :]
    first = first.lstrip("*_> ")
    if _CONDITION_START.match(first):
        return True
    return estimate_tokens(text) <= _SHORT and bool(_CONDITION_ANYWHERE.search(text))


def list_items(text: str) -> list[str]:
    """Top-level items of a rendered list; nested and continuation lines stay with their item."""
    items: list[str] = []
    base: int | None = None
    for line in text.split("\n"):
        m = _ITEM_START.match(line)
        if m and base is None:
            base = len(m.group(1))
        if not items or (m and len(m.group(1)) == base):
            items.append(line)
        else:
            items[-1] += "\n" + line
    return items


def entry_of(block: Block) -> tuple[Any, str] | None:
    """The definition-list entry a block belongs to (``meta["entry"]``, ``meta["term"]``), if any."""
    term = block.meta.get("term")
    return (block.meta.get("entry"), str(term)) if term else None


def build_units(blocks: list[Block], budget: int, count: Count = estimate_tokens) -> list[Unit]:
    """The units of one section's prose blocks, in order (headings and tables excluded).

    The blocks of one definition-list entry (same ``meta["entry"]`` and
    ``meta["term"]``) are one unit, and an entry never joins the unit before
    it, so a term always sits with its description."""
    atoms: list[tuple[Block, str]] = []
    for b in blocks:
        if b.kind == BlockKind.LIST and entry_of(b) is None and count(b.text) > budget:
            atoms.extend((b, item) for item in list_items(b.text))
        else:
            atoms.append((b, b.text))
    units: list[Unit] = []
    for block, text in atoms:
        prev = units[-1] if units else None
        glue = False
        entry = entry_of(block)
        if prev is not None and (entry is not None or entry_of(prev.parts[-1]) is not None):
            glue = entry is not None and entry == entry_of(prev.parts[-1])
        elif prev is not None:
            if prev.ends_with_lead_in:
                glue = True
            elif block.kind == BlockKind.ADMONITION:
                glue = True
            elif block.kind == BlockKind.CODE and prev.last_kind in (BlockKind.PARAGRAPH, BlockKind.LIST):
                glue = True
            elif prev.last_kind == BlockKind.CODE and block.kind == BlockKind.PARAGRAPH and _EXPLAINS_CODE.match(text):
                glue = True
            elif block.kind in (BlockKind.PARAGRAPH, BlockKind.LIST) and is_condition(text):
                glue = True
        if glue and prev is not None:
            prev.add(block, text)
        else:
            unit = Unit()
            unit.add(block, text)
            units.append(unit)
    return units


#: Block fields a prose chunk does not copy as they are: merged below (links, OCR, pages), or
#: structure the parser gave the chunker that means nothing to a reader of the chunk.
_NOT_KEPT = frozenset({"links", "low_confidence_tokens", "pages", "items", "ocr_confidence", "level", "page_breaks",
                       "header_rows", "rows", "row_pages"})


def merged_meta(blocks: list[Block]) -> dict[str, Any]:
    """The meta of a chunk made of several blocks: provenance that must survive the merge."""
    meta: dict[str, Any] = {}
    links: list[dict] = []
    flagged: list[dict] = []
    pages: list[int] = []
    confidences = []
    for b in blocks:
        for k, v in b.meta.to_dict().items():
            if k in _NOT_KEPT:
                continue
            meta.setdefault(k, v)
        links.extend(x for x in b.meta.get("links", []) if x not in links)
        flagged.extend(x for x in b.meta.get("low_confidence_tokens", []) if x not in flagged)
        for p in b.meta.get("pages", [b.page] if b.page else []):
            if p and p not in pages:
                pages.append(p)
        if "ocr_confidence" in b.meta:
            confidences.append(b.meta["ocr_confidence"])
    if any(b.meta.get("ocr") for b in blocks):
        meta["ocr"] = True
    if confidences:
        meta["ocr_confidence"] = min(confidences)
    if flagged:
        meta["low_confidence_tokens"] = flagged
    if links:
        meta["links"] = links
    if len(pages) > 1:
        meta["pages"] = sorted(pages)
    return meta
