"""Every built-in parser passes :class:`freshindex.testing.ParserContract`.

One class per spec of ``workers.parsing.BUILTIN``; the Office and PDF
samples are written here by the libraries that read them (python-docx,
python-pptx, openpyxl, PyMuPDF), a few lines each.  A new built-in spec
without a class here fails :func:`test_every_registered_parser_has_a_contract_class`.
"""

from __future__ import annotations

import io
import sys

import docx
import openpyxl
import pptx
import pymupdf

from freshindex.testing import ParserContract
from freshindex.workers.parsing.registry import specs

PHRASE = "Rotate the signing key every ninety days"
#: A PNG header repeated: what a text format must refuse as binary.
BINARY = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" * 40


class TestMarkdownParser(ParserContract):
    parser, sample_text = "markdown", PHRASE

    def sample(self) -> bytes:
        return f"# Keys\n\n{PHRASE}.\n\n- one\n- two\n".encode()

    def bad_input(self) -> bytes:
        return "caf\u00e9 menu".encode("latin-1")  # not UTF-8


class TestHtmlParser(ParserContract):
    parser, sample_text = "html", PHRASE

    def sample(self) -> bytes:
        return f"<html><head><title>Keys</title></head><body><h1>Keys</h1><p>{PHRASE}.</p></body></html>".encode()

    def bad_input(self) -> bytes:
        return BINARY


class TestTextParser(ParserContract):
    parser, sample_text = "text", PHRASE

    def sample(self) -> bytes:
        return f"Keys\n\n{PHRASE}.\n".encode()

    def bad_input(self) -> bytes:
        return BINARY


class TestTableParser(ParserContract):
    parser, sample_text = "table", "signing key"

    def sample(self) -> bytes:
        return b"secret,rotation days\nsigning key,90\napi token,30\n"

    def bad_input(self) -> bytes:
        return BINARY


class TestCodeParser(ParserContract):
    parser, sample_text = "code", "def rotate_signing_key"

    def key(self) -> str:
        return "keys.py"

    def sample(self) -> bytes:
        return b'"""Keys."""\n\n\ndef rotate_signing_key(days: int = 90) -> int:\n    return days\n'

    def bad_input(self) -> bytes:
        return BINARY


class TestPdfParser(ParserContract):
    parser, sample_text = "pdf", PHRASE

    def sample(self) -> bytes:
        doc = pymupdf.open()
        doc.new_page().insert_text((72, 72), f"{PHRASE}.", fontsize=11)
        return doc.tobytes()

    def bad_input(self) -> bytes:
        return b"<html>not a pdf</html>"


class TestDocxParser(ParserContract):
    parser, sample_text = "docx", PHRASE

    def sample(self) -> bytes:
        document = docx.Document()
        document.add_heading("Keys", level=1)
        document.add_paragraph(f"{PHRASE}.")
        buf = io.BytesIO()
        document.save(buf)
        return buf.getvalue()

    def bad_input(self) -> bytes:
        return b"not a word document at all"


class TestPptxParser(ParserContract):
    parser, sample_text = "pptx", PHRASE

    def sample(self) -> bytes:
        deck = pptx.Presentation()
        slide = deck.slides.add_slide(deck.slide_layouts[1])
        slide.shapes.title.text = "Keys"
        slide.placeholders[1].text = f"{PHRASE}."
        buf = io.BytesIO()
        deck.save(buf)
        return buf.getvalue()

    def bad_input(self) -> bytes:
        return b"not a presentation at all"


class TestXlsxParser(ParserContract):
    parser, sample_text = "xlsx", "signing key"

    def sample(self) -> bytes:
        book = openpyxl.Workbook()
        sheet = book.active
        sheet.title = "Rotation"
        sheet.append(["secret", "rotation days"])
        sheet.append(["signing key", 90])
        buf = io.BytesIO()
        book.save(buf)
        return buf.getvalue()

    def bad_input(self) -> bytes:
        return b"not a workbook at all"


def test_every_registered_parser_has_a_contract_class() -> None:
    here = sys.modules[__name__]
    covered = {cls.parser for cls in vars(here).values()
               if isinstance(cls, type) and issubclass(cls, ParserContract) and cls is not ParserContract}
    assert covered == {spec.name for spec in specs()}
