"""The bad-input corpus: every hostile or broken file fails alone, with its reason.

Given one folder source holding good documents next to a 50 MB text file, a
PDF whose 1 MB flate stream inflates to 1 GB, a 400-megapixel image (as a
PNG and inside a PDF), a damaged PDF, an encrypted PDF, pathologically
nested HTML, a million-row CSV, links out of the folder (to a file and to a
folder), a file name with a newline, a file that is not UTF-8 and a binary
file; when a real ``sync_inline`` runs over it in a separate process (the
hashing embedder: the model does not matter here); then each bad file is a
per-document error with its exact reason and a metric (the PNG, which no parser
reads, is skipped with its reason instead: not an error), the good documents
are indexed and answer queries, the run ends ``partial``, the process stays
under 1 GB of memory (its peak RSS is printed), and no log line is split by
the newline in a key.

Run as ``python -m tests.workers.test_bad_input sync DATA SRC OUT`` the
module is that separate process.
"""

from __future__ import annotations

import io
import json
import logging
import os
import re
import struct
import subprocess
import sys
import time
import zlib
from pathlib import Path

import pymupdf
import pytest

from freshindex import logs
from freshindex.core.errors import DocumentError, SourceError
from freshindex.workers.connectors.folder import FolderConnector
from tests.conftest import ROOT

# -- the corpus ---------------------------------------------------------------------------------------------


def pdf_bytes(objects: list[bytes]) -> bytes:
    """A PDF written by hand: numbered objects, a classic xref table, object 1 the catalog."""
    out = bytearray(b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    for off in offsets:
        out += b"%010d 00000 n \n" % off
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


def pdf_stream(entries: bytes, data: bytes) -> bytes:
    return b"<< " + entries + b" /Length %d >>\nstream\n" % len(data) + data + b"\nendstream"


def one_page_pdf(content: bytes, resources: bytes = b"<< /Font << /F1 5 0 R >> >>", extra: tuple = ()) -> bytes:
    return pdf_bytes([
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R /Resources " + resources + b" >>",
        content,
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        *extra,
    ])


def flate_bomb(inflated: int, tail: bytes) -> bytes:
    """A zlib stream of ``inflated`` spaces then ``tail``, built without compressing it all.

    After a full flush deflate starts afresh, so every further MiB of spaces
    compresses to the same bytes; only the Adler-32 at the end covers the
    whole, and that is cheap to compute.
    """
    block = b" " * (1 << 20)
    c = zlib.compressobj(9)
    first = c.compress(block) + c.flush(zlib.Z_FULL_FLUSH)
    again = c.compress(block) + c.flush(zlib.Z_FULL_FLUSH)
    end = c.compress(tail) + c.flush()
    blocks = inflated >> 20
    adler = 1
    for _ in range(blocks):
        adler = zlib.adler32(block, adler)
    adler = zlib.adler32(tail, adler)
    return first + again * (blocks - 1) + end[:-4] + adler.to_bytes(4, "big")


def bomb_pdf() -> bytes:
    """One page whose 1 MB content stream inflates to 1 GiB of spaces and one line of text."""
    data = flate_bomb(1 << 30, b"\nBT /F1 12 Tf 72 720 Td (The flate bomb says hello.) Tj ET\n")
    return one_page_pdf(pdf_stream(b"/Filter /FlateDecode", data))


SIDE = 20_000  # 20000 x 20000 = 400 megapixels, 1 bit each: 50 MB raw, 50 KB compressed


def poster_pdf() -> bytes:
    """A "scanned" page: one 400-megapixel image and no text (so it would go to OCR)."""
    raw = zlib.compress(bytes(SIDE * SIDE // 8), 9)
    image = pdf_stream(b"/Type /XObject /Subtype /Image /Width %d /Height %d /ColorSpace /DeviceGray "
                       b"/BitsPerComponent 1 /Filter /FlateDecode" % (SIDE, SIDE), raw)
    content = pdf_stream(b"", b"q 612 0 0 792 0 0 cm /Im1 Do Q")
    return one_page_pdf(content, resources=b"<< /XObject << /Im1 6 0 R >> >>", extra=(image,))


def poster_png() -> bytes:
    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    header = struct.pack(">IIBBBBB", SIDE, SIDE, 1, 0, 0, 0, 0)
    pixels = zlib.compress(bytes((SIDE // 8 + 1) * SIDE), 9)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels) + chunk(b"IEND", b"")


def text_pdf(sentence: str, *, deflate: bool = False) -> bytes:
    doc = pymupdf.open()
    for n in range(3):
        doc.new_page().insert_text((72, 72), f"{sentence} (page {n + 1}).")
    return doc.tobytes(deflate=deflate)


def damaged_pdf() -> bytes:
    """Pages and xref intact, every stream's bytes scrambled: MuPDF opens it and reads no text."""
    def scramble(m: re.Match[bytes]) -> bytes:
        return m.group(1) + bytes(b ^ 0x5A for b in m.group(2)) + m.group(3)

    good = text_pdf("Words nobody will read", deflate=True)
    return re.sub(rb"(stream\r?\n)(.*?)(\r?\nendstream)", scramble, good, flags=re.S)


def encrypted_pdf() -> bytes:
    doc = pymupdf.open()
    doc.new_page().insert_text((72, 72), "The vault code is locked away.")
    return doc.tobytes(encryption=pymupdf.PDF_ENCRYPT_AES_256, user_pw="pw", owner_pw="pw")


def write_big_text(path: Path, size: int = 50_000_000) -> None:
    with open(path, "w") as fh:
        written = n = 0
        while written < size:
            para = (f"Paragraph {n} of the long log explains step {n % 97} of the rollback in plain words, "
                    f"with detail number {n * 7919 % 100003} so that no two paragraphs are alike. ") * 4 + "\n\n"
            fh.write(para)
            written += len(para)
            n += 1


GOOD = {
    "guides/rollback.md": "# Rollback\n\nTo roll back a release, run `deploy rollback --to previous` and watch "
                          "the canary for ten minutes.\n",
    "guides/quotas.html": "<html><body><h1>Quotas</h1><p>Each tenant may create at most forty buckets per "
                          "region.</p></body></html>",
    "regions.csv": "region,city,price\neu-central-1,Frankfurt,0.0245\nap-southeast-1,Singapore,0.025\n",
}

#: Every bad file of the corpus and the reason it must fail with.
EXPECTED = {
    "huge.txt": DocumentError.TOO_LARGE,
    "bomb.pdf": DocumentError.TOO_LARGE,
    "poster.pdf": DocumentError.TOO_LARGE,
    "damaged.pdf": DocumentError.PARSE_FAILED,
    "locked.pdf": DocumentError.ENCRYPTED,
    "deep.html": DocumentError.TOO_COMPLEX,
    "million.csv": DocumentError.TOO_LARGE,
    "escape.md": DocumentError.SYMLINK_OUTSIDE,
    "escape-dir": DocumentError.SYMLINK_OUTSIDE,
    "line\nbreak.md": DocumentError.UNSAFE_KEY,
    "latin1.txt": DocumentError.ENCODING,
    "blob.txt": DocumentError.BINARY,
}

#: Files no parser reads are skipped with their reason, never errors (the run stays as it would be).
SKIPPED = {"poster.png": DocumentError.UNSUPPORTED}


def build_corpus(root: Path, outside: Path) -> None:
    for key, text in GOOD.items():
        (root / key).parent.mkdir(parents=True, exist_ok=True)
        (root / key).write_text(text)
    (root / "manual.pdf").write_bytes(text_pdf("The failover drill runs every Tuesday at noon"))
    write_big_text(root / "huge.txt")
    (root / "bomb.pdf").write_bytes(bomb_pdf())
    (root / "poster.pdf").write_bytes(poster_pdf())
    (root / "poster.png").write_bytes(poster_png())
    (root / "damaged.pdf").write_bytes(damaged_pdf())
    (root / "locked.pdf").write_bytes(encrypted_pdf())
    (root / "deep.html").write_bytes(b"<html><body>" + b"<div>" * 5000 + b"deep" + b"</div>" * 5000
                                     + b"</body></html>")
    with open(root / "million.csv", "w") as fh:
        fh.write("id,value\n")
        fh.writelines(f"{i},{i * 3}\n" for i in range(1_000_000))
    (root / "latin1.txt").write_bytes("caf\u00e9 menu du jour\n".encode("latin-1"))
    (root / "blob.txt").write_bytes(os.urandom(4096))
    (root / "line\nbreak.md").write_text("# Injected\n\nA name with a newline.\n")
    outside.mkdir(parents=True)
    (outside / "secret.md").write_text("# Secret\n\nThe launch codes live outside the source.\n")
    (outside / "dir").mkdir()
    (outside / "dir" / "more.md").write_text("# More\n\nAlso outside the source.\n")
    (root / "escape.md").symlink_to(outside / "secret.md")
    (root / "escape-dir").symlink_to(outside / "dir")
    (root / "guides" / "inside-link").symlink_to(root / "guides")  # inside: not followed, not an error


# -- the test -----------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_every_bad_input_fails_alone_with_its_reason_and_memory_stays_bounded(tmp_path: Path) -> None:
    src = tmp_path / "src"
    started = time.perf_counter()
    build_corpus(src, tmp_path / "outside")
    built = time.perf_counter() - started
    out = tmp_path / "report.json"
    env = {**os.environ, "FRESHINDEX_EMBEDDING__PROVIDER": "hashing", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-m", "tests.workers.test_bad_input", "sync", str(tmp_path / "data"), str(src), str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(out.read_text())
    print(f"\ncorpus built in {built:.1f}s; sync {report['seconds']:.1f}s; peak RSS of the sync process "
          f"{report['peak_rss_mb']} MB (VmHWM)")

    # Each bad file is a per-document error with its exact reason, a detail and a metric.
    reasons = {e["key"]: e["reason"] for e in report["errors"]}
    assert reasons == EXPECTED, report["errors"]
    assert {e["key"]: e["reason"] for e in report["skipped"]} == SKIPPED
    assert report["documents"]["skipped"] == len(SKIPPED)
    assert all(e["detail"] for e in report["errors"])
    details = {e["key"]: e["detail"] for e in report["errors"]}
    assert "tokens" in details["huge.txt"]
    assert "inflate" in details["bomb.pdf"]
    assert "20000x20000" in details["poster.pdf"]
    assert "damaged" in details["damaged.pdf"]
    for reason in set(EXPECTED.values()):
        assert report["metrics"][reason] == sum(1 for r in EXPECTED.values() if r == reason), reason

    # The good documents are indexed and answer queries; the run is partial, not failed.
    assert report["status"] == "partial" and report["build"] == "built"
    assert report["documents"]["added"] == len(GOOD) + 1
    assert report["answers"]["How often does the failover drill run?"] == "manual.pdf"
    assert report["answers"]["How many buckets may a tenant create per region?"] == "guides/quotas.html"
    assert report["answers"]["How do I roll back a release?"] == "guides/rollback.md"
    assert not any("outside" in text for text in report["texts"])  # the linked-out files were never read

    # Memory stays bounded: the 50 MB file never became 46,000 chunks, the bomb was never inflated.
    assert report["peak_rss_mb"] < 1024

    # No log line was split: the key with a newline is written escaped, on the line of its record.
    lines = proc.stderr.splitlines()
    failed = [ln for ln in lines if "document failed" in ln]
    assert len(failed) == len(EXPECTED), proc.stderr[-3000:]
    assert any("key=line\\nbreak.md" in ln for ln in failed)
    assert not any(ln.startswith("break.md") for ln in lines)


def test_an_unreadable_sub_folder_is_recorded_and_keeps_its_documents_while_the_rest_syncs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from freshindex.services import Services
    from freshindex.settings import load_settings
    from freshindex.workers.runner import sync_inline

    root = tmp_path / "src"
    (root / "team").mkdir(parents=True)
    (root / "index.md").write_text("# Index\n\nThe team pages are below.\n")
    (root / "team" / "oncall.md").write_text("# On call\n\nThe on-call rota changes every Monday.\n")
    svc = Services(load_settings(data_dir=tmp_path / "data", embedding={"provider": "hashing"}))
    try:
        svc.registry.add_source("docs", kind="folder", location=str(root), owner="t", kb="default")
        assert sync_inline(svc, "docs").run.status == "succeeded"

        (root / "team").chmod(0)
        (root / "new.md").write_text("# New\n\nA page added while the team folder is unreadable.\n")
        real = os.scandir

        def scandir(path: object = ".") -> object:  # root reads a mode-0 folder anyway: fail as for a user
            if Path(os.fsdecode(path)) in (root / "team", root.parent / "gone-root"):
                raise PermissionError(13, "Permission denied", os.fsdecode(path))
            return real(path)

        monkeypatch.setattr(os, "scandir", scandir)
        refs = list(FolderConnector(root, max_bytes=1000).list())
        assert [r.key for r in refs] == ["index.md", "new.md", "team/"]
        report = sync_inline(svc, "docs")
        assert [(e.key, e.reason) for e in report.errors] == [("team/", "unreadable")]
        assert "folder team/ cannot be read (Permission denied)" in report.errors[0].detail
        states = {k: d.state for k, d in svc.registry.documents_for_source("docs").items()}
        assert states["team/oncall.md"] == "active" and states["new.md"] == "active"  # kept, and the rest indexed
        assert states["team/"] == "error"
        (root.parent / "gone-root").mkdir()
        with pytest.raises(SourceError, match="cannot read folder"):  # the root itself: the listing stops
            list(FolderConnector(root.parent / "gone-root", max_bytes=1000).list())
    finally:
        (root / "team").chmod(0o755)
        svc.close()


def test_links_out_of_a_folder_are_listed_and_links_inside_are_not_errors(tmp_path: Path) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "real").mkdir(parents=True)
    (root / "real" / "a.md").write_text("a")
    (outside / "dir").mkdir(parents=True)
    (outside / "dir" / "b.md").write_text("b")
    (root / "out-dir").symlink_to(outside / "dir")
    (root / "in-dir").symlink_to(root / "real")
    (root / "in-file.md").symlink_to(root / "real" / "a.md")
    conn = FolderConnector(root, max_bytes=100)
    refs = {r.key: r for r in conn.list()}
    assert set(refs) == {"out-dir", "in-file.md", "real/a.md"}
    assert refs["out-dir"].etag.startswith("symlink-")
    with pytest.raises(DocumentError) as err:
        conn.fetch("out-dir")
    assert err.value.reason == DocumentError.SYMLINK_OUTSIDE and "folder outside" in err.value.detail
    assert conn.fetch("in-file.md") == b"a"


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_control_characters_in_keys_never_split_a_log_line(fmt: str) -> None:
    stream = io.StringIO()
    logs.configure("INFO", fmt, stream)
    try:
        key = "a\nb\r\x1b[31mc\u2028d\x85.md"
        logging.getLogger("freshindex.test").warning("document %s failed", key,
                                                     extra={"event": "document_failed", "key": key})
    finally:
        logs.configure("WARNING", "text")
    text = stream.getvalue()
    assert text.count("\n") == 1 and text.endswith("\n")
    assert not re.search("[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029]", text)
    if fmt == "json":
        record = json.loads(text)
        assert record["key"] == key and record["msg"] == f"document {key} failed"  # lossless
    else:
        assert "key=a\\nb\\r\\x1b[31mc\\u2028d\\x85.md" in text


def test_limits_count_while_chunking_and_a_flate_stream_is_measured_in_bounded_steps() -> None:
    from freshindex.core.types import Block, ParsedDocument
    from freshindex.workers.chunking import Chunker
    from freshindex.workers.parsing import Limits, Parsers
    from freshindex.workers.parsing.streams import inflated_size

    parsed = ParsedDocument("t", tuple(Block("paragraph", f"Paragraph {i} says something new. " * 30)
                                       for i in range(400)), "text", "t")
    assert len(Chunker().chunk("d", parsed)) > 100
    with pytest.raises(DocumentError) as err:
        Chunker(max_chunks=100).chunk("d", parsed)
    assert err.value.reason == DocumentError.TOO_LARGE and "100 chunks" in err.value.detail
    with pytest.raises(DocumentError) as err:
        Chunker(max_document_tokens=5_000).chunk("d", parsed)
    assert err.value.reason == DocumentError.TOO_LARGE and "5000 tokens" in err.value.detail

    bomb = flate_bomb(64 << 20, b"end")
    assert inflated_size(bomb, 1 << 40) == (64 << 20) + 3
    assert inflated_size(bomb, 1 << 20) <= (1 << 20) + 8 * 1024 * 1024  # stopped one step past the cap
    pdf = one_page_pdf(pdf_stream(b"/Filter /FlateDecode", bomb))
    with pytest.raises(DocumentError) as err:
        Parsers(limits=Limits(max_decompressed_bytes=32 << 20)).parse(pdf, "bomb.pdf")
    assert err.value.reason == DocumentError.TOO_LARGE
    assert Parsers().parse(text_pdf("A small honest file", deflate=True), "ok.pdf").blocks
    # At the limit passes, one pixel over is refused.
    image = pdf_stream(b"/Type /XObject /Subtype /Image /Width 100 /Height 100 /ColorSpace /DeviceGray "
                       b"/BitsPerComponent 8", bytes(10_000))
    at_limit = one_page_pdf(pdf_stream(b"", b"BT /F1 12 Tf 72 720 Td (Caption) Tj ET q 100 0 0 100 72 72 cm "
                                            b"/Im1 Do Q"),
                            resources=b"<< /Font << /F1 5 0 R >> /XObject << /Im1 6 0 R >> >>", extra=(image,))
    assert Parsers(limits=Limits(max_image_pixels=10_000)).parse(at_limit, "at.pdf").blocks
    with pytest.raises(DocumentError) as err:
        Parsers(limits=Limits(max_image_pixels=9_999)).parse(at_limit, "over.pdf")
    assert err.value.reason == DocumentError.TOO_LARGE


# -- the separate sync process ------------------------------------------------------------------------------


def _peak_rss_mb() -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) // 1024
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024


def _sync(data_dir: str, src: str, out: str) -> None:
    from freshindex.services import Services
    from freshindex.settings import load_settings
    from freshindex.workers.runner import sync_inline

    logs.configure("INFO", "text")
    svc = Services(load_settings(data_dir=data_dir))
    svc.registry.add_source("docs", kind="folder", location=src, owner="t", kb="default")
    report = sync_inline(svc, "docs")
    questions = ("How often does the failover drill run?", "How many buckets may a tenant create per region?",
                 "How do I roll back a release?")
    answers, texts = {}, []
    for q in questions:
        packet = svc.client.retrieve(q, kb="default", limit=3)
        answers[q] = packet.evidence[0].key if packet.evidence else None
        texts.extend(e.text for e in packet.evidence)
    data = report.as_dict()
    result = {
        "status": data["status"], "build": data["build"]["status"], "documents": data["documents"],
        "errors": data["errors"], "skipped": data["skipped"], "seconds": data["seconds"], "answers": answers,
        "texts": texts,
        "metrics": {r: svc.metrics.value("freshindex_document_errors_total", source="docs", reason=r)
                    for r in {e["reason"] for e in data["errors"]}},
        "peak_rss_mb": _peak_rss_mb(),
    }
    svc.close()
    Path(out).write_text(json.dumps(result))


if __name__ == "__main__":
    {"sync": _sync}[sys.argv[1]](*sys.argv[2:])
