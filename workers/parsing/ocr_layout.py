"""Layout of an OCR'd page from tesseract's word boxes: rows, tables, code.

Tesseract's own blocks and lines depend on the page segmentation mode (at
``--psm 3`` an aligned listing comes back column by column), so the layout
is rebuilt here from geometry alone:

* **deskew**: the slope of the words along each tesseract line gives the
  page's skew; every word's centre is rotated back before anything else,
  so a page scanned 1 degree off still has level rows;
* **rows**: words whose centres lie within half a word height of each other
  form a printed row, whichever block tesseract put them in; a row is cut
  into **segments** at gaps wider than the body word height (column gaps);
* **tables**: three or more consecutive rows (two with three columns) whose
  segments start at the same positions are a table; a one-segment row that
  starts at a later column continues the cell above it; a row set full
  width (a prose line) ends the table;
* **code**: rows set in a monospace-like font (the width per character of
  their words hardly varies) that are indented past the body text or carry
  code punctuation; their indentation and inner alignment are kept as
  spaces, measured in the row's character width.

What it does not do: decide headings (one row's height is no evidence; the
PDF parser decides with the document's outline, numbering and text pages in
view), nor read multi-column prose, whose columns it would join row by row.
"""

from __future__ import annotations

import itertools
import re
import statistics
from dataclasses import dataclass, field

from freshindex.workers.parsing.ocr import OcrWord, fix_cjk_spaces

_CODE_CHARS = re.compile(r"[{};=]|<-|->|::|/\*|\*/|//|^#\w|^[>+$] \S|\w\([^()]*\)\s*$|\[\d+\]")
_NUMERIC = re.compile(r"^[\s$€£¥+\-−]*[\d.,:%/x×]+\s*[a-zA-Z%]{0,4}$")


@dataclass
class Row:
    words: list[OcrWord]
    y: float  # deskewed centre
    top: float
    bottom: float
    x0: float
    x1: float
    height: float
    segments: list[list[OcrWord]] = field(default_factory=list)
    mono: bool = False
    pitch: float = 0.0  # width of one character, points

    @property
    def text(self) -> str:
        return fix_cjk_spaces(" ".join(w.text for w in self.words))

    @property
    def confidence(self) -> float:
        return confidence(self.words)

    def seg_text(self, i: int) -> str:
        return " ".join(w.text for w in self.segments[i])

    def seg_x(self, i: int) -> float:
        return self.segments[i][0].left


@dataclass
class Item:
    """A run of rows read as one thing: ``text`` rows, a ``table`` or ``code``."""

    kind: str
    rows: list[Row]
    cells: list[list[str]] = field(default_factory=list)
    code: str = ""

    @property
    def words(self) -> list[OcrWord]:
        return [w for r in self.rows for w in r.words]

    @property
    def confidence(self) -> float:
        return confidence(self.words)


def confidence(words: list[OcrWord]) -> float:
    weight = sum(len(w.text) for w in words)
    return round(sum(w.conf * len(w.text) for w in words) / weight / 100.0, 4) if weight else 0.0


def skew(words: list[OcrWord]) -> float:
    """The page's slope (dy/dx): the median over tesseract lines of the fit through their words' centres."""
    lines: dict[tuple[int, int, int], list[OcrWord]] = {}
    for w in words:
        lines.setdefault((w.block, w.par, w.line), []).append(w)
    slopes = []
    for ws in lines.values():
        if len(ws) < 4:
            continue
        xs = [w.left + w.width / 2 for w in ws]
        ys = [w.top + w.height for w in ws]  # the bottoms: baselines, less disturbed by ascenders
        mx, my = statistics.fmean(xs), statistics.fmean(ys)
        den = sum((x - mx) ** 2 for x in xs)
        if den > 0 and max(xs) - min(xs) > 100:
            slopes.append(sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / den)
    return statistics.median(slopes) if slopes else 0.0


def rows_of(words: list[OcrWord]) -> list[Row]:
    """Printed rows in reading order (top to bottom), deskewed, cut into segments."""
    words = [w for w in words if w.text.strip()]
    if not words:
        return []
    slope = skew(words)
    body_h = statistics.median(w.height for w in words)

    def cy(w: OcrWord) -> float:
        return (w.top + w.height / 2) - slope * (w.left + w.width / 2)

    rows: list[list[OcrWord]] = []
    centres: list[float] = []
    for w in sorted(words, key=cy):
        y = cy(w)
        if rows and abs(y - centres[-1]) <= body_h * 0.5:
            rows[-1].append(w)
            n = len(rows[-1])
            centres[-1] += (y - centres[-1]) / n
        else:
            rows.append([w])
            centres.append(y)
    out = []
    for ws, y in zip(rows, centres, strict=True):
        ws.sort(key=lambda w: w.left)
        # Deskew x too (tiny for small angles, but keeps columns aligned down a tall page).
        row = Row(ws, y, min(w.top for w in ws), max(w.top + w.height for w in ws), ws[0].left,
                  max(w.left + w.width for w in ws), statistics.median(w.height for w in ws))
        row.segments = _segments(ws, body_h)
        row.pitch, row.mono = _pitch(ws)
        out.append(row)
    return out


def _segments(words: list[OcrWord], body_h: float) -> list[list[OcrWord]]:
    segs: list[list[OcrWord]] = [[words[0]]]
    for prev, w in itertools.pairwise(words):
        if w.left - (prev.left + prev.width) > body_h * 1.25:
            segs.append([w])
        else:
            segs[-1].append(w)
    return segs


#: Widths (em) of a proportional roman face, to tell proportional rows from monospaced ones.
_PROP = dict(zip("abcdefghijklmnopqrstuvwxyz", (.5, .556, .444, .556, .444, .306, .5, .556, .278, .306, .528, .278,
                                                 .833, .556, .5, .556, .528, .392, .394, .389, .556, .528, .722,
                                                 .528, .528, .444), strict=True))
_PROP.update(dict.fromkeys("IJ", .4), M=.917, W=1.03, m=.833)


def _prop_width(text: str) -> float:
    total = 0.0
    for c in text:
        if c in _PROP:
            total += _PROP[c]
        elif c.isupper():
            total += .72
        elif c.isdigit():
            total += .5
        else:
            total += .3
    return total


def _spread(values: list[float]) -> float:
    mean = statistics.fmean(values)
    return statistics.pstdev(values) / mean if mean else 1.0


def _pitch(words: list[OcrWord]) -> tuple[float, bool]:
    """Character width of the row and whether its words look monospaced.

    Monospaced: the words' widths follow their character counts better than
    the widths a proportional face would give them ("ill" as wide as
    "mmm"), by a clear margin.
    """
    sample = [w for w in words if len(w.text) >= 2 and w.text.isascii()]
    chars = sum(len(w.text) for w in words)
    pitch = sum(w.width for w in words) / chars if chars else 0.0
    if len(sample) < 2 or sum(len(w.text) for w in sample) < 8:
        return pitch, False
    mono = _spread([w.width / len(w.text) for w in sample])
    prop = _spread([w.width / _prop_width(w.text) for w in sample])
    per = statistics.median(w.width / len(w.text) for w in sample)
    return per, mono < 0.1 and mono < prop * 0.75


def layout(words: list[OcrWord]) -> list[Item]:
    """The page as text, table and code items in reading order."""
    rows = rows_of(words)
    if not rows:
        return []
    left = _body_left(rows)
    right = _body_right(rows)
    items: list[Item] = []
    i = 0
    while i < len(rows):
        table = _table_at(rows, i, left)
        if table is not None and sum(1 for r in table.rows if _CODE_CHARS.search(r.text)) * 2 < len(table.rows):
            items.append(table)
            i += len(table.rows)
            continue
        if _code_like(rows, i, left, right):
            j = i + 1
            while j < len(rows) and _code_like(rows, j, left, right, inside=True):
                j += 1
            items.append(_code(rows[i:j]))
            i = j
            continue
        if items and items[-1].kind == "text":
            items[-1].rows.append(rows[i])
        else:
            items.append(Item("text", [rows[i]]))
        i += 1
    return items


def _body_left(rows: list[Row]) -> float:
    """The left margin of body text: where full-width (justified prose) rows start, the most common start."""
    right = _body_right(rows)
    full = [r for r in rows if r.x1 > right - 4 * max(r.pitch, 3.0) and len(r.words) >= 6] or rows
    counts: dict[int, float] = {}
    for r in full:
        key = round(r.x0 / 4)
        counts[key] = counts.get(key, 0.0) + (r.x1 - r.x0)
    best = max(counts, key=lambda k: counts[k])
    # The first lines of paragraphs are indented: the margin is the leftmost common start.
    return min((k for k, v in counts.items() if v >= counts[best] * 0.3 and k <= best), default=best) * 4.0


def _body_right(rows: list[Row]) -> float:
    ends = sorted(r.x1 for r in rows)
    return ends[int(len(ends) * 0.9)] if ends else 0.0


def _code_like(rows: list[Row], i: int, left: float, right: float, *, inside: bool = False) -> bool:
    """Is row ``i`` a line of code (an indented example, not a paragraph's indented first line)?

    Code is indented past the body text and does not run to the right
    margin as a justified prose line does; a run of such rows needs code
    punctuation or a monospace fit on some of them.  Inside a block a row
    only has to stay indented and short of the margin (or carry code
    punctuation), and sit close under the row above.
    """
    r = rows[i]
    pitch = max(r.pitch, 3.0)
    indented = r.x0 > left + 2.5 * pitch
    full = r.x1 > right - 3 * pitch
    syntax = bool(_CODE_CHARS.search(r.text))
    if inside:
        prev = rows[i - 1]
        close = r.top - prev.bottom < max(prev.height, r.height) * 1.6
        prose = not syntax and not r.mono and len(r.words) >= 5
        return close and indented and (not full or syntax) and not prose and not (
            len(r.segments) >= 3 and not syntax and not r.mono and not prev.mono)
    if not indented or (full and not (syntax and r.mono)):
        return False
    if not syntax and (len(r.words) >= 6 or len(r.words) < 3 or not r.mono):
        return False  # a block of code starts with a line that looks like code itself
    # Look at the run this row would start: enough code evidence in it?
    run = [r]
    for nxt in rows[i + 1 : i + 12]:
        if nxt.x0 > left + 2.5 * pitch and nxt.top - run[-1].bottom < run[-1].height * 1.6:
            run.append(nxt)
        else:
            break
    evidence = sum(1 for x in run if _CODE_CHARS.search(x.text) or x.mono)
    if len(run) == 1:
        return syntax and (r.mono or len(r.segments) == 1)
    return evidence >= max(1, len(run) // 2)


def _code(rows: list[Row]) -> Item:
    pitch = _code_pitch(rows)
    base = min(r.x0 for r in rows)
    lines = []
    for r in rows:
        line = " " * max(0, round((r.x0 - base) / pitch))
        for prev, w in zip([None, *r.words], r.words, strict=False):
            if prev is not None:
                gap = w.left - (prev.left + prev.width)
                if gap < 2.2 * pitch:
                    line += " "
                else:
                    # Aligned columns (comments set under each other): the column the word starts in.
                    line += " " * max(2, round((w.left - base) / pitch) - len(line))
            line += w.text
        lines.append(line.rstrip())
    return Item("code", rows, code="\n".join(lines))


def _code_pitch(rows: list[Row]) -> float:
    """The character advance of a code block: from word starts one space apart (glyph boxes are narrower)."""
    rough = statistics.median([r.pitch for r in rows if r.mono] or [r.pitch for r in rows]) or 6.0
    steps = [(b.left - a.left) / (len(a.text) + 1) for r in rows for a, b in itertools.pairwise(r.words)
             if b.left - (a.left + a.width) < 1.6 * rough and len(a.text) >= 2]
    return statistics.median(steps) if len(steps) >= 3 else rough


def _table_at(rows: list[Row], i: int, left: float) -> Item | None:
    """The table starting at row ``i``, or None."""
    if len(rows[i].segments) < 2:
        return None
    cols = [rows[i].seg_x(k) for k in range(len(rows[i].segments))]
    tol = max(6.0, rows[i].height)
    body: list[Row] = [rows[i]]
    j = i + 1
    while j < len(rows):
        r = rows[j]
        gap = r.top - body[-1].bottom
        if gap > body[-1].height * 2.5:
            break
        starts = [r.seg_x(k) for k in range(len(r.segments))]
        matched = sum(1 for s in starts if any(abs(s - c) <= tol for c in cols))
        if len(starts) >= 2 and matched >= min(2, len(starts)) and matched >= len(starts) - 1:
            body.append(r)
        elif len(starts) == 1 and any(abs(starts[0] - c) <= tol for c in cols[1:]):
            body.append(r)  # a wrapped cell: continues the cell above
        else:
            break
        j += 1
    full_rows = sum(1 for r in body if len(r.segments) >= 2)
    if full_rows < 3 and not (full_rows >= 2 and len(cols) >= 3):
        return None
    # Columns: the segment starts of the multi-segment rows, clustered.
    starts = sorted(r.seg_x(k) for r in body if len(r.segments) >= 2 for k in range(len(r.segments)))
    clusters: list[list[float]] = []
    for s in starts:
        if clusters and s - clusters[-1][-1] <= tol:
            clusters[-1].append(s)
        else:
            clusters.append([s])
    need = max(2, full_rows // 3)
    positions = [statistics.fmean(c) for c in clusters if len(c) >= need]
    if len(positions) < 2:
        return None
    cells: list[list[str]] = []
    for r in body:
        row = [""] * len(positions)
        for k in range(len(r.segments)):
            x = r.seg_x(k)
            col = min(range(len(positions)), key=lambda c: abs(positions[c] - x))
            row[col] = f"{row[col]} {r.seg_text(k)}".strip()
        if len(r.segments) == 1 and cells and not row[0]:
            prev = cells[-1]
            for c, v in enumerate(row):
                if v:
                    prev[c] = f"{prev[c]} {v}".strip()
            continue
        cells.append(row)
    # Columns of prose side by side (a two-column page) align too: a table has some column of short cells.
    widths = [statistics.median([len(r[c].split()) for r in cells if r[c]] or [0]) for c in range(len(positions))]
    if min(widths) >= 5:
        return None
    return Item("table", body, cells=cells)


def is_numeric(cell: str) -> bool:
    return bool(_NUMERIC.match(cell.strip())) if cell.strip() else False


def has_header(cells: list[list[str]]) -> bool:
    """Whether the first row names the columns rather than being data.

    Evidence, without fonts: some column is numeric in every body row but
    not in the first; or every first-row cell is short and capitalised while
    no later row looks like it (few words each, and the body repeats none of
    them).  A table with neither is given no header: its columns are named
    by position, never after a data row.
    """
    if len(cells) < 3:
        return False
    first, body = cells[0], cells[1:]
    for c in range(len(first)):
        col = [r[c] for r in body if c < len(r) and r[c]]
        if col and all(is_numeric(v) for v in col) and first[c] and not is_numeric(first[c]):
            return True
    words = [len(c.split()) for c in first if c]
    if first and all(c for c in first) and all(n <= 3 for n in words) and all(c[:1].isupper() for c in first):
        body_caps = sum(1 for r in body if all(c[:1].isupper() for c in r if c) and all(c for c in r))
        return body_caps <= len(body) // 4
    return False
