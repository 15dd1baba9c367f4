"""Parsers on the bundled sample files and on bad input."""

from __future__ import annotations

import pymupdf
import pytest

from core.errors import DocumentError
from tests.conftest import EXAMPLES
from workers.parsing import Parsers
from workers.parsing.decode import decode_text

KB = EXAMPLES / "kb"


def parse(key: str):
    return Parsers().parse((KB / key).read_bytes(), key)


def test_markdown_keeps_heading_paths_code_and_front_matter() -> None:
    doc = parse("guides/release.md")
    assert doc.title == "Release procedure"
    migration = [b for b in doc.blocks if b.heading_path == ("Release procedure", "Rollback", "Database migration")]
    assert any("only if the migration has not" in b.text for b in migration)
    code = [b for b in doc.blocks if b.kind == "code"]
    assert code and code[0].meta["language"] == "bash"
    assert doc.meta["owner"] == "platform-team"


def test_html_drops_navigation_scripts_and_footer() -> None:
    doc = parse("guides/onboarding.html")
    text = "\n".join(b.text for b in doc.blocks)
    assert "Request a laptop" in text
    assert "Never share production credentials" in text
    for furniture in ("Home |", "analytics", "Privacy", "Last updated", "Home > Guides"):
        assert furniture not in text
    assert doc.title == "Onboarding checklist"
    assert any(b.kind == "admonition" for b in doc.blocks)


def test_csv_rows_keep_their_cells_and_the_header_is_recorded() -> None:
    doc = parse("reference/pricing.csv")
    assert doc.meta["columns"][0] == "plan"
    team = next(b for b in doc.blocks if b.meta["cells"][0] == "Team")
    assert team.meta["cells"][2] == "200,000"


def test_python_and_typescript_are_split_by_symbol() -> None:
    py = parse("code/retry.py")
    symbols = {b.meta["symbol"] for b in py.blocks}
    assert {"RetryError", "backoff_delay", "retry", "<module>"} <= symbols
    retry = next(b for b in py.blocks if b.meta["symbol"] == "retry")
    assert retry.meta["language"] == "python" and retry.meta["signature"].startswith("def retry(")
    assert "retry_on" in retry.meta["docstring"]
    ts = parse("code/ratelimit.ts")
    assert {"BucketOptions", "TokenBucket", "rejectStatus"} - {b.meta["symbol"] for b in ts.blocks} == {"BucketOptions"}
    bucket = next(b for b in ts.blocks if b.meta["symbol"] == "TokenBucket")
    assert bucket.text.startswith("// A bucket refills")  # the comment above stays with it


def test_text_pdf_keeps_pages_and_headings() -> None:
    doc = parse("pdf/architecture.pdf")
    retention = [b for b in doc.blocks if "13 months" in b.text]
    assert retention and retention[0].page == 2
    assert retention[0].heading_path[-1] == "Data retention"


def test_scanned_pdf_is_read_by_ocr_and_marked() -> None:
    doc = parse("pdf/scanned-policy.pdf")
    assert doc.meta["ocr_pages"] == [1]
    text = " ".join(b.text for b in doc.blocks)
    assert "180 USD per night" in text
    assert all(b.meta.get("ocr") for b in doc.blocks)


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"hello\x00\x01\x02 world" * 20, DocumentError.BINARY),
        ("caf\u00e9".encode("latin-1") + b" menu", DocumentError.ENCODING),
    ],
)
def test_decode_refuses_binary_and_invalid_utf8(data: bytes, reason: str) -> None:
    with pytest.raises(DocumentError) as err:
        decode_text(data)
    assert err.value.reason == reason


def test_decode_accepts_bom_and_utf16() -> None:
    assert decode_text(b"\xef\xbb\xbfhi\r\nthere") == "hi\nthere"
    assert decode_text("hé".encode("utf-16")) == "hé"


def test_corrupt_and_encrypted_pdfs_are_document_errors(tmp_path) -> None:
    with pytest.raises(DocumentError) as err:
        Parsers().parse(b"%PDF-1.7 this is not really a pdf", "x.pdf")
    assert err.value.reason == DocumentError.PARSE_FAILED
    doc = pymupdf.open()
    doc.new_page().insert_text((72, 72), "secret")
    path = tmp_path / "locked.pdf"
    doc.save(path, encryption=pymupdf.PDF_ENCRYPT_AES_256, user_pw="pw", owner_pw="pw")
    with pytest.raises(DocumentError) as err:
        Parsers().parse(path.read_bytes(), "locked.pdf")
    assert err.value.reason == DocumentError.ENCRYPTED


def test_unknown_extension_is_unsupported() -> None:
    with pytest.raises(DocumentError) as err:
        Parsers().parse(b"\x89PNG...", "image.png")
    assert err.value.reason == DocumentError.UNSUPPORTED
