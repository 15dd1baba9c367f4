"""What the first pass reads off a page (lines, tables, OCR words), and the
patterns and text helpers both passes read printed lines with."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from freshindex.workers.parsing.ocr import OcrPage

MARGIN = 0.08  # top and bottom share of the page where running heads and footers live
BULLET = re.compile(r"^\s*([•◦▪●○■\-–*]|\(?\d{1,3}[.)]|\(?[a-z][.)])\s+")
CAPTION = re.compile(r"^(table|tabelle|tableau)\s*\d+|^表\s*\d+", re.I)
ADMONITION = re.compile(r"^(warning|caution|danger|note|important|tip|注意|警告)\s*[:：]", re.I)
TERMINAL = tuple(".!?:;。！？：；")
NUMBERED = re.compile(r"^((?:\d{1,2}|[A-Z])(?:\.\d{1,2})*)\.?\s+(\S.*)$")
FOOTNOTE = re.compile(r"^(?:\d{1,2}|[*†‡§])\s*\S")


@dataclass
class Line:
    text: str
    size: float
    bold: bool
    mono: bool
    x0: float
    y0: float
    x1: float
    y1: float
    links: list[dict[str, str]] = field(default_factory=list)


@dataclass
class Table:
    header: list[str]
    rows: list[list[str]]
    y0: float
    y1: float
    x0: float
    x1: float
    headerless: bool = False


@dataclass
class Page:
    number: int
    width: float
    height: float
    lines: list[Line] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    ocr: OcrPage | None = None


def norm(text: str) -> str:
    return " ".join(re.sub(r"[^\w]+", " ", text.lower()).split())



def dehyphenate(parts: list[str]) -> str:
    text = ""
    for part in parts:
        if text.endswith("-") and part[:1].islower() and len(text) > 1 and text[-2].isalpha():
            text = text[:-1] + part
        elif text:
            text += " " + part
        else:
            text = part
    return text

