"""OCR of one PDF page: PyMuPDF renders it, tesseract reads it as TSV.

Why not ``page.get_textpage_ocr``: PyMuPDF exposes no confidence, and we
need one per word to mark the numbers, amounts and commands an answer must
not trust blindly.  ``tesseract page.png stdout tsv`` gives the words with
their boxes, their block/paragraph/line numbers and a confidence (0-100)
in one pass, and as a subprocess it can be given a timeout (the per-document
time limit) and one thread (``OMP_THREAD_LIMIT=1``; OCR parallelises across
worker processes, not inside one).

The page confidence is the mean word confidence, weighted by word length,
scaled to 0-1.  Stray spaces tesseract puts between CJK characters are
removed.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from freshindex.core.errors import DocumentError
from freshindex.workers.parsing import limits

if TYPE_CHECKING:  # imported where a page is read: see workers/parsing/pdf/__init__.py
    import pymupdf

_CJK = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u3000-\u303f\uff00-\uffef\u3040-\u30ff"
_CJK_GAP = re.compile(rf"(?<=[{_CJK}])\s+(?=[{_CJK}])")
_DIGIT = re.compile(r"\d")
_CURRENCY = re.compile(r"[$€£¥₹]|^\W*(usd|eur|gbp|cny|rmb|jpy|chf|元|美元)\W*$", re.I)
_COMMAND = re.compile(r"^(-{1,2}\w|[./~]\S*/|\$\S)|[_=/\\`|]|::|\w\.\w+\(|^[a-z]+-[a-z]+$")
#: Seconds one tesseract call may take even without a document time limit.
PAGE_TIMEOUT_S = 180.0


def ocr_available() -> bool:
    return shutil.which("tesseract") is not None


def fix_cjk_spaces(text: str) -> str:
    return _CJK_GAP.sub("", text)


@dataclass(frozen=True)
class OcrWord:
    text: str
    conf: float
    left: float
    top: float
    width: float
    height: float
    block: int
    par: int
    line: int


@dataclass(frozen=True)
class OcrLine:
    text: str
    words: tuple[OcrWord, ...]
    block: int
    par: int
    height: float
    top: float
    left: float


@dataclass
class OcrPage:
    number: int
    words: list[OcrWord]
    dpi: int
    seconds: float
    confidence: float = 0.0
    lines: list[OcrLine] = field(default_factory=list)
    #: The page segmentation mode whose reading was kept.
    psm: int = 3
    #: Every mode tried: ``{"psm", "seconds", "confidence", "fragmentation", "chars"}``.
    tried: list[dict] = field(default_factory=list)


def fragmentation(words: list[OcrWord]) -> float:
    """Share of words on a printed row that tesseract split between several blocks.

    A page segmentation that reads an aligned table or listing column by
    column puts each column in a block of its own: the words of one printed
    row then sit in different blocks.  Prose read well has every row in one
    block (0.0); a two-column listing read as columns is near 1.0.  The mean
    confidence does not see this (the words are read right, in the wrong
    order), which is why it is measured apart.
    """
    if not words:
        return 0.0
    heights = sorted(w.height for w in words)
    tol = heights[len(heights) // 2] * 0.5
    rows: list[list[OcrWord]] = []
    for w in sorted(words, key=lambda w: w.top + w.height / 2):
        mid = w.top + w.height / 2
        if rows and abs(mid - (rows[-1][0].top + rows[-1][0].height / 2)) <= tol:
            rows[-1].append(w)
        else:
            rows.append([w])
    split = sum(len(r) for r in rows if len({w.block for w in r}) > 1)
    return round(split / len(words), 4)


def _confidence(words: list[OcrWord]) -> float:
    weight = sum(len(w.text) for w in words)
    return round(sum(w.conf * len(w.text) for w in words) / weight / 100.0, 4) if weight else 0.0


def render_dpi(page: pymupdf.Page, dpi: int, max_pixels: int) -> int:
    """The DPI to render at: ``dpi``, lowered until the page fits ``max_pixels``."""
    inches = (page.rect.width / 72.0) * (page.rect.height / 72.0)
    if inches <= 0:
        raise DocumentError(DocumentError.PARSE_FAILED, f"page {page.number + 1} has no area")
    fit = int((max_pixels / inches) ** 0.5)
    if fit < 72:
        raise DocumentError(
            DocumentError.TOO_LARGE,
            f"page {page.number + 1} is {page.rect.width:.0f}x{page.rect.height:.0f} pt: rendering it for OCR "
            f"would exceed {max_pixels} pixels even at 72 DPI",
        )
    return min(dpi, fit)


def check_images(page: pymupdf.Page) -> None:
    """Refuse a page whose images declare more than ``max_image_pixels``, before rendering decodes them.

    :func:`workers.parsing.streams.check_pdf_streams` already checked every
    image of the file; this is the guard of :func:`ocr_page` itself.
    """
    for img in page.get_images(full=True):
        limits.check_image(int(img[2] or 0), int(img[3] or 0), f"an image on page {page.number + 1}")


def ocr_page(page: pymupdf.Page, *, language: str, dpi: int, psms: tuple[int, ...] = (3,),
             retry_fragmentation: float = 0.15, retry_confidence: float = 0.85) -> OcrPage:
    """Read one page; try the next of ``psms`` while the reading looks poor.

    Poor means its rows are split between blocks (:func:`fragmentation` over
    ``retry_fragmentation``: a table or listing read column by column) or
    its confidence is under ``retry_confidence``.  Of the modes tried the
    one kept has the best ``confidence * coverage * (1 - fragmentation)``,
    coverage being its characters over the most any mode read: a mode that
    reads fewer words, or splits rows, does not win on confidence alone.
    """
    import pymupdf

    lim = limits.current()
    check_images(page)
    used_dpi = render_dpi(page, dpi, lim.max_render_pixels)
    number = page.number + 1
    started = time.perf_counter()
    pix = page.get_pixmap(dpi=used_dpi, colorspace=pymupdf.csGRAY, alpha=False)
    scale = 72.0 / used_dpi
    readings: list[tuple[int, list[OcrWord]]] = []
    tried: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="fi-ocr-") as tmp:
        png = Path(tmp) / "page.png"
        pix.save(png)
        del pix
        for psm in tuple(p for p in psms if 1 <= int(p) <= 13) or (3,):  # 0 is layout only: no text
            t0 = time.perf_counter()
            words = parse_tsv(run_tesseract(png, language=language, dpi=used_dpi, page=number, psm=psm), scale)
            frag, conf = fragmentation(words), _confidence(words)
            readings.append((psm, words))
            tried.append({"psm": psm, "seconds": round(time.perf_counter() - t0, 3), "confidence": conf,
                          "fragmentation": frag, "chars": sum(len(w.text) for w in words)})
            if frag <= retry_fragmentation and conf >= retry_confidence:
                break
    most = max(t["chars"] for t in tried) or 1
    best = max(range(len(tried)),
               key=lambda i: tried[i]["confidence"] * (tried[i]["chars"] / most) * (1 - tried[i]["fragmentation"]))
    psm, words = readings[best]
    result = OcrPage(number=number, words=words, dpi=used_dpi, seconds=time.perf_counter() - started,
                     psm=psm, tried=tried)
    result.lines = group_lines(words)
    result.confidence = _confidence(words)
    return result


@functools.lru_cache(maxsize=8)
def installed_languages(binary: str = "tesseract") -> frozenset[str]:
    """The language data this tesseract has (``tesseract --list-langs``)."""
    try:
        proc = subprocess.run([binary, "--list-langs"], capture_output=True, text=True, timeout=30, check=False)
    except (FileNotFoundError, subprocess.TimeoutExpired):
        return frozenset()
    # The first line is a header ("List of available languages in ...: N").
    lines = (proc.stdout or proc.stderr).splitlines()
    return frozenset(line.strip() for line in lines[1:] if line.strip())


def check_languages(language: str) -> None:
    """Fail as ``ocr_unavailable`` unless every ``+``-joined language is installed.

    Tesseract asked for ``eng+chi_sim`` without ``chi_sim`` data still exits 0
    with the English reading: silent garbage for the Chinese text, so the
    check is made here rather than trusted to the exit code.
    """
    wanted = [part for part in language.split("+") if part]
    if not wanted:
        raise DocumentError(DocumentError.OCR_UNAVAILABLE, "no OCR language configured")
    have = installed_languages()
    if not have:
        raise DocumentError(DocumentError.OCR_UNAVAILABLE, "tesseract is not installed or lists no languages")
    missing = [part for part in wanted if part not in have]
    if missing:
        raise DocumentError(
            DocumentError.OCR_UNAVAILABLE,
            f"tesseract has no language data for {'+'.join(missing)} (installed: {', '.join(sorted(have))}); "
            "install the tesseract-ocr-<lang> package",
        )


def run_tesseract(png: Path, *, language: str, dpi: int, page: int, psm: int = 3) -> str:
    check_languages(language)
    left = limits.remaining()
    timeout = PAGE_TIMEOUT_S if left is None else max(0.1, min(PAGE_TIMEOUT_S, left))
    cmd = ["tesseract", str(png), "stdout", "-l", language, "--dpi", str(dpi), "--psm", str(int(psm)), "tsv"]
    env = {**os.environ, "OMP_THREAD_LIMIT": "1"}
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, check=False)
    except FileNotFoundError as exc:
        raise DocumentError(DocumentError.OCR_UNAVAILABLE, "tesseract is not installed") from exc
    except subprocess.TimeoutExpired as exc:
        if left is not None and timeout >= left:
            raise DocumentError(DocumentError.TIMED_OUT,
                                f"OCR of page {page} ran past the per-document time limit") from exc
        raise DocumentError(DocumentError.TIMED_OUT, f"OCR of page {page} took over {timeout:.0f}s") from exc
    if proc.returncode != 0:
        err = proc.stderr.strip().splitlines()[-1:] or ["no message"]
        if "Failed loading language" in proc.stderr or "Error opening data file" in proc.stderr:
            raise DocumentError(DocumentError.OCR_UNAVAILABLE, f"tesseract has no {language!r} data: {err[0]}")
        raise DocumentError(DocumentError.PARSE_FAILED, f"OCR failed on page {page}: {err[0]}")
    return proc.stdout


def parse_tsv(tsv: str, scale: float = 1.0) -> list[OcrWord]:
    words: list[OcrWord] = []
    for row in tsv.splitlines()[1:]:
        cols = row.split("\t")
        if len(cols) < 12 or cols[0] != "5":
            continue
        text = cols[11].strip()
        try:
            conf = float(cols[10])
        except ValueError:
            continue
        if not text or conf < 0:
            continue
        left, top, width, height = (float(c) * scale for c in cols[6:10])
        words.append(OcrWord(text, conf, left, top, width, height, int(cols[2]), int(cols[3]), int(cols[4])))
    return words


def group_lines(words: list[OcrWord]) -> list[OcrLine]:
    lines: list[OcrLine] = []
    current: list[OcrWord] = []

    def flush() -> None:
        if current:
            text = fix_cjk_spaces(" ".join(w.text for w in current))
            heights = sorted(w.height for w in current)
            lines.append(OcrLine(text, tuple(current), current[0].block, current[0].par, heights[len(heights) // 2],
                                 min(w.top for w in current), min(w.left for w in current)))
            current.clear()

    for w in words:
        if current and (w.block, w.par, w.line) != (current[0].block, current[0].par, current[0].line):
            flush()
        current.append(w)
    flush()
    return lines


def token_kind(word: str, neighbours: tuple[str, ...] = ()) -> str | None:
    """What a word is, when it is the kind an answer quotes exactly."""
    if _DIGIT.search(word):
        if _CURRENCY.search(word) or any(_CURRENCY.search(n) for n in neighbours):
            return "amount"
        return "number"
    if _CURRENCY.search(word) and len(word) <= 4:
        return "amount"
    if _COMMAND.search(word):
        return "command"
    return None


def low_confidence_tokens(line: OcrLine, threshold: float, page: int) -> list[dict]:
    """Numbers, amounts and commands on ``line`` read with confidence below ``threshold``."""
    out = []
    words = line.words
    for i, w in enumerate(words):
        if w.conf >= threshold:
            continue
        neighbours = tuple(x.text for x in words[max(0, i - 1) : i + 2] if x is not w)
        kind = token_kind(w.text, neighbours)
        if kind:
            out.append({"text": w.text, "kind": kind, "confidence": round(w.conf / 100.0, 3), "page": page})
    return out
