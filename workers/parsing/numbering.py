"""Section numbers and page titles of generated documentation.

A release that inserts a section renumbers every section after it
("20.4.1. Memory" becomes "20.5.1. Memory") without changing a word of
them.  Headings are therefore split into their number and their text: the
text is the heading (it enters the heading path, the chunk's identity and
what the model sees); the number is kept beside it for citations.

Numbers are recognised in the styles generators print: "3.2.1.", "3.",
"F.1.", "A.", "IV.", and with a word before them, "Chapter 3.",
"Appendix F.", "Part IV.", "Section 2.1".  A heading that is only a number
("2024") keeps it as its text.
"""

from __future__ import annotations

import re

_WORDED = r"(?:chapter|appendix|part|section|lesson|unit|kapitel|anhang|chapitre|annexe|partie|第)"
_NUMBER = (
    rf"(?:{_WORDED}\s+(?:[A-Z]|[IVXLCDM]+|\d+)(?:[.\-]\d+)*\.?"  # Chapter 3. / Appendix F. / Part IV.
    r"|\d+(?:\.\d+)*\."  # 3.2.1. / 3.
    r"|[A-Z](?:\.\d+)+\."  # F.1.
    r"|[A-Z]\."  # A.
    r"|[IVXLCDM]+\.)"  # IV.
    r"(?:\s*[章节])?"
)
_HEADING_NUMBER = re.compile(rf"^\s*({_NUMBER})(?:\s+|\s*[:—–-]\s*)(?=\S)", re.I)
_TITLE_SEPARATORS = re.compile(r"\s+(?:—|–|\||-|·|::|»|‹|›)\s+")


def split_number(text: str) -> tuple[str, str]:
    """``("20.4.1.", "Memory")`` from ``"20.4.1. Memory"``; ``("", text)`` when it has no number.

    A single capital letter or roman numeral followed by a dot counts only
    when a word follows that is not a sentence continuation ("A. Foo"), which
    is how appendix headings read; "I. e." style abbreviations are rare in
    headings and would lose their first letter only.
    """
    m = _HEADING_NUMBER.match(text)
    if not m:
        return "", text
    rest = text[m.end():].strip()
    if not rest:
        return "", text
    return m.group(1).strip(), rest


#: Javadoc's "RetryPolicy (Acme Client 4.2.0 API)": the site named in parentheses.
_SITE_PARENS = re.compile(r"^(.+?)\s+\(([^()]*\b(api|documentation|docs|manual|reference)|[^()]*\d+\.\d+[^()]*)\)$", re.I)


def page_title(title: str, headings: list[str]) -> tuple[str, str]:
    """The page's own title from ``<title>`` (site suffix dropped) and its headings.

    "Settings — Django 3.2.25 documentation" is "Settings"; "20.4. Resource
    Consumption" is "Resource Consumption" with number "20.4.".  When the
    title has several parts, the one that is also a heading of the page
    wins, else the first.  Returns ``(number, title)``.
    """
    title = " ".join(title.split())
    m = _SITE_PARENS.match(title)
    if m:
        title = m.group(1)
    parts = [p for p in _TITLE_SEPARATORS.split(title) if p] if title else []
    if len(parts) > 1:
        texts = {split_number(h)[1].casefold() for h in headings}
        chosen = next((p for p in parts if split_number(p)[1].casefold() in texts), parts[0])
    else:
        chosen = title
    if not chosen and headings:
        chosen = headings[0]
    return split_number(chosen)
