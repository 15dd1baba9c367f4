"""First pass: one page's text lines (size, weight, monospace, box), its tables and links."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from freshindex.workers.parsing.pdf.options import PdfOptions
from freshindex.workers.parsing.pdf.page import Line, Page
from freshindex.workers.parsing.pdf.tables import code_table, find_tables, in_table

if TYPE_CHECKING:  # imported where a page is read: see workers/parsing/pdf/__init__.py
    import pymupdf

_COMMENT = ("/*", "//", "#", "--", ";", "%")
#: A comment starting in a code span: ``/*`` or ``//`` after a space (not the ``//`` of a URL), or a ``#`` line.
_COMMENT_MARK = re.compile(r"(?:^|\s)(?:/\*|//)|^\s*#")


def read_page(page: pymupdf.Page, opts: PdfOptions) -> Page:
    import pymupdf

    out = Page(number=page.number + 1, width=page.rect.width, height=page.rect.height)
    data = page.get_text("dict", flags=pymupdf.TEXTFLAGS_TEXT)
    for block in data.get("blocks", []):
        if block.get("type") != 0:
            continue
        for line in block.get("lines", []):
            spans = [s for s in line.get("spans", []) if s.get("text", "").strip()]
            if not spans:
                continue
            if abs(line.get("dir", (1, 0))[1]) > 0.2:
                continue  # rotated text: watermarks, margin notes
            text = _join_spans(spans)
            size = round(max(s["size"] for s in spans), 1)
            bold = all(s.get("flags", 0) & 16 or "bold" in s.get("font", "").lower() for s in spans)
            mono = _code_spans(spans)
            x0, y0, x1, y1 = line["bbox"]
            out.lines.append(Line(text, size, bold, mono, x0, y0, x1, y1))
    if not out.lines:
        return out
    out.lines = _merge_baselines(out.lines)
    if opts.find_tables:
        # Code with comments aligned after it lines up in columns too: a "table" of code lines is code.
        out.tables = [t for t in find_tables(page, out.lines) if not code_table(t, out.lines)]
        if out.tables:
            out.lines = [ln for ln in out.lines if not any(in_table(ln, t) for t in out.tables)]
    links = [lk for lk in page.get_links() if lk.get("uri")]
    for lk in links:
        r = lk["from"]
        for ln in out.lines:
            if ln.y0 < r.y1 and r.y0 < ln.y1 and ln.x0 < r.x1 and r.x0 < ln.x1:
                ln.links.append({"text": ln.text, "href": lk["uri"]})
                break
    return out


def _mono_span(span: dict) -> bool:
    font = span.get("font", "").lower()
    return bool(span.get("flags", 0) & 8) or "mono" in font or "courier" in font or font.startswith(("cmtt", "sfmono"))


def _code_spans(spans: list[dict]) -> bool:
    """Whether a printed line is code: set in a monospace face up to its comment, if it has one.

    Manuals (Texinfo, LaTeX listings) set the words of a comment in the body
    face (``CTXT_RETURN = 12, /* return() from a closure */``): requiring
    every span to be monospaced would read such a line as prose.
    """
    for s in spans:
        if not s.get("text", "").strip():
            continue
        if _mono_span(s) and _COMMENT_MARK.search(s["text"]):
            return True  # code up to its comment marker; what follows may be in any face
        if not _mono_span(s):
            return False
    return True


def _merge_baselines(lines: list[Line]) -> list[Line]:
    """Pieces of one printed line that MuPDF read apart (a list number and its
    text, a run set in another font) become one line again."""
    out: list[Line] = []
    for ln in sorted(lines, key=lambda ln: (round(ln.y1), ln.x0)):
        last = out[-1] if out else None
        if last is not None and abs(last.y1 - ln.y1) < 2 and 0 <= ln.x0 - last.x1 <= ln.size * 1.5 \
                and last.mono == ln.mono:
            # Code keeps its gap as spaces (a comment one column further right stays aligned with the rest).
            sep = " " * max(1, round((ln.x0 - last.x1) / (last.size * 0.6))) if last.mono else " "
            out[-1] = Line(f"{last.text}{sep}{ln.text}", max(last.size, ln.size), last.bold and ln.bold, last.mono,
                            last.x0, min(last.y0, ln.y0), ln.x1, max(last.y1, ln.y1), last.links + ln.links)
        elif last is not None and last.mono and abs(last.y1 - ln.y1) < 2 and ln.x0 - last.x1 >= 0 \
                and (ln.mono or ln.text.startswith(_COMMENT)):
            # A code line and the comment aligned after it (set in another font, far right): one line,
            # the gap kept as spaces so the comments stay aligned.
            spaces = " " * max(1, round((ln.x0 - last.x1) / (last.size * 0.6)))
            out[-1] = Line(f"{last.text}{spaces}{ln.text}", max(last.size, ln.size), False, True,
                            last.x0, min(last.y0, ln.y0), ln.x1, max(last.y1, ln.y1), last.links + ln.links)
        else:
            out.append(ln)
    return out


def _join_spans(spans: list[dict]) -> str:
    parts: list[str] = []
    last_x1 = None
    for s in spans:
        text = s["text"]
        if last_x1 is not None and parts and not parts[-1].endswith(" ") and not text.startswith(" "):
            gap = s["bbox"][0] - last_x1
            if gap > s["size"] * 0.25:
                parts.append(" ")
        parts.append(text)
        last_x1 = s["bbox"][2]
    return " ".join("".join(parts).split())

