"""Hostile Office packages: counted as they inflate, refused before a library reads them.

Given Word, PowerPoint and Excel packages built here (with python-docx,
python-pptx and openpyxl) and then made hostile by hand (a part whose zip
headers declare 1,000 bytes but whose stream inflates to 1 GiB, a part that
declares its first bytes and their CRC but holds more, thousands of parts,
millions of XML elements, nesting 100,000 deep, bzip2, the encryption flag),
when they are parsed, then each fails alone with a reason code before any
library reads the lying part, memory stays at one inflate step, and an
honest package still parses; when a real ``sync_inline`` runs over a folder
holding the 1 GiB liar and an honest 100 MB-of-XML Word file in a separate
process, its peak RSS stays under 500 MB; and a hypothesis suite of
generated hostile packages, run in a separate process, stays under the same
bound and a time bound per package.

Run as ``python -m tests.workers.test_office_bombs sync DATA SRC OUT`` or
``... fuzz OUT`` the module is that separate process.
"""

from __future__ import annotations

import bz2
import io
import json
import os
import struct
import subprocess
import sys
import time
import tracemalloc
import zipfile
import zlib
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from freshindex.core.errors import DocumentError
from freshindex.workers.parsing import Parsers
from freshindex.workers.parsing.archive import check_package
from freshindex.workers.parsing.limits import Limits
from tests.conftest import ROOT

MiB = 1 << 20
#: The main part of each format: the one a bomb or a flood of elements goes into.
MAIN = {"docx": "word/document.xml", "pptx": "ppt/slides/slide1.xml", "xlsx": "xl/worksheets/sheet1.xml"}
#: Where generated elements are put in the main part, and one element (with its children) of each format.
ANCHOR = {"docx": b"</w:body>", "pptx": b"</p:spTree>", "xlsx": b"</sheetData>"}
UNIT = {
    "docx": "<w:p><w:r><w:t>hello world</w:t></w:r></w:p>",
    "pptx": '<p:sp><p:nvSpPr><p:cNvPr id="{j}" name="t{i}"/><p:cNvSpPr/><p:nvPr/></p:nvSpPr><p:spPr/>'
            "<p:txBody><a:bodyPr/><a:p><a:r><a:t>x {i}</a:t></a:r></a:p></p:txBody></p:sp>",
    "xlsx": '<row r="{j}"><c r="A{j}"><v>{i}</v></c></row>',
}
DEEP = {"docx": (b"<w:p>", b"</w:p>"), "pptx": (b"<p:grpSp>", b"</p:grpSp>"), "xlsx": (b"<row>", b"</row>")}


# -- packages, written by hand so that every header can lie --------------------------------------------------


@dataclass(frozen=True)
class Part:
    """One zip member as written: its raw (compressed) bytes and what its headers declare."""

    name: str
    raw: bytes
    declared: int
    crc: int
    method: int = zipfile.ZIP_DEFLATED
    flags: int = 0


def deflated(name: str, content: bytes) -> Part:
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    return Part(name, c.compress(content) + c.flush(), len(content), zlib.crc32(content))


def write_zip(parts: list[Part]) -> bytes:
    """A zip package holding ``parts`` exactly as given (sizes, CRC, method and flags are not checked)."""
    out, central = io.BytesIO(), io.BytesIO()
    for p in parts:
        name = p.name.encode()
        offset = out.tell()
        out.write(struct.pack("<4s5H3L2H", b"PK\x03\x04", 20, p.flags, p.method, 0, 0x21, p.crc, len(p.raw),
                              p.declared, len(name), 0) + name + p.raw)
        central.write(struct.pack("<4s6H3L5H2L", b"PK\x01\x02", 20, 20, p.flags, p.method, 0, 0x21, p.crc,
                                  len(p.raw), p.declared, len(name), 0, 0, 0, 0, 0, offset) + name)
    start = out.tell()
    out.write(central.getvalue())
    out.write(struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, len(parts), len(parts), len(central.getvalue()),
                          start, 0))
    return out.getvalue()


def rewrite_sizes(data: bytes, name: str, declared: int, crc: int | None = None) -> bytes:
    """``data`` with the uncompressed size (and CRC) of ``name`` rewritten in its local and central headers."""
    buf = bytearray(data)
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        local = z.getinfo(name).header_offset
    struct.pack_into("<L", buf, local + 22, declared)
    at = data.find(b"PK\x01\x02")
    while at >= 0:
        size = struct.unpack_from("<H", data, at + 28)[0]
        if data[at + 46 : at + 46 + size] == name.encode():
            struct.pack_into("<L", buf, at + 24, declared)
            if crc is not None:
                struct.pack_into("<L", buf, at + 16, crc)
                struct.pack_into("<L", buf, local + 14, crc)
            return bytes(buf)
        at = data.find(b"PK\x01\x02", at + 4)
    raise AssertionError(f"{name} has no central directory entry")


@cache
def base(ext: str) -> tuple[tuple[str, bytes], ...]:
    """An honest package of the format, written by its own library: (part name, content) in order."""
    buf = io.BytesIO()
    if ext == "docx":
        import docx

        doc = docx.Document()
        doc.add_heading("Failover drills", 1)
        doc.add_paragraph("The failover drill runs every quarter, on the first Tuesday.")
        doc.save(buf)
    elif ext == "pptx":
        import pptx

        deck = pptx.Presentation()
        slide = deck.slides.add_slide(deck.slide_layouts[1])
        slide.shapes.title.text = "Quotas"
        slide.placeholders[1].text = "A tenant may create 100 buckets per region."
        deck.save(buf)
    else:
        import openpyxl

        book = openpyxl.Workbook()
        sheet = book.active
        sheet.append(["region", "buckets"])
        sheet.append(["eu-west", 100])
        book.save(buf)
    with zipfile.ZipFile(io.BytesIO(buf.getvalue())) as z:
        return tuple((i.filename, z.read(i)) for i in z.infolist())


def package(ext: str, changes: dict[str, Part] | None = None, extra: list[Part] | None = None) -> bytes:
    """The base package of ``ext`` with some parts replaced and some added."""
    changes = changes or {}
    parts = [changes.get(name) or deflated(name, content) for name, content in base(ext)]
    return write_zip(parts + (extra or []))


def main_part(ext: str) -> bytes:
    return dict(base(ext))[MAIN[ext]]


@cache
def padded(ext: str, pad: int) -> Part:
    """The main part followed by ``pad`` spaces, honestly declared (a deflate ratio of about 1000:1)."""
    content = main_part(ext)
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    raw = [c.compress(content)]
    crc = zlib.crc32(content)
    block = b" " * MiB
    for _ in range(pad // MiB):
        raw.append(c.compress(block))
        crc = zlib.crc32(block, crc)
    return Part(MAIN[ext], b"".join(raw) + c.flush(), len(content) + pad // MiB * MiB, crc)


def with_elements(ext: str, count: int = 0, depth: int = 0) -> bytes:
    """The main part with ``count`` more elements of the format, or one chain nested ``depth`` deep."""
    body = "".join(UNIT[ext].format(i=i, j=i + 10) for i in range(count)).encode()
    body += DEEP[ext][0] * depth + DEEP[ext][1] * depth
    content = main_part(ext)
    at = content.rindex(ANCHOR[ext])
    return content[:at] + body + content[at:]


def parse(data: bytes, ext: str, limits: Limits | None = None):
    return Parsers(limits=limits or Limits()).parse(data, f"hostile.{ext}")


# -- in-process checks ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("ext", sorted(MAIN))
def test_an_honest_package_passes_the_reader_and_parses(ext: str) -> None:
    data = package(ext)
    counted = check_package(data, "package")
    assert counted.members == len(base(ext)) and counted.inflated == sum(len(c) for _, c in base(ext))
    assert 10 < counted.xml_elements < 100_000  # python-docx's template alone holds 18,663
    assert parse(data, ext).blocks


@pytest.mark.parametrize("ext", sorted(MAIN))
def test_a_part_that_holds_more_than_it_declares_is_refused_before_a_library_reads_it(ext: str) -> None:
    """The part declares its own first bytes and their CRC: zipfile alone would hand the library those
    bytes after inflating all 64 MiB of the stream (and the old check parsed the document)."""
    bomb = padded(ext, 64 * MiB)
    content = main_part(ext)
    liar = replace(bomb, declared=len(content), crc=zlib.crc32(content))
    data = package(ext, {MAIN[ext]: liar})
    tracemalloc.start()
    try:
        with pytest.raises(DocumentError) as err:
            parse(data, ext)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert err.value.reason == DocumentError.PARSE_FAILED and MAIN[ext] in err.value.detail
    assert f"declares {len(content):,} bytes but holds more" in err.value.detail
    assert peak < 6 * MiB, peak  # stopped at the first step past the declared size, never the stream

    # A part holding fewer bytes than it declares, or other bytes than its CRC says, is refused as well.
    honest = deflated(MAIN[ext], content)
    for part, words in ((replace(honest, declared=len(content) + 10), f"holds {len(content):,}"),
                        (replace(honest, crc=honest.crc ^ 1), "fails its CRC check")):
        with pytest.raises(DocumentError) as err:
            parse(package(ext, {MAIN[ext]: part}), ext)
        assert err.value.reason == DocumentError.PARSE_FAILED and words in err.value.detail, err.value


@pytest.mark.slow
def test_a_gibibyte_declaring_a_kilobyte_is_refused_at_its_first_step() -> None:
    data = lying_docx(1024 * MiB)
    assert len(data) < 1.5 * MiB
    started = time.perf_counter()
    with pytest.raises(DocumentError) as err:
        parse(data, "docx")
    assert err.value.reason == DocumentError.PARSE_FAILED and "declares 1,000 bytes" in err.value.detail
    # A bound a loaded machine keeps, far under what inflating it all costs (the old reader: 5.9 s and 2.1 GB)
    assert time.perf_counter() - started < 2.0


def test_what_the_directory_shows_is_refused_without_inflating() -> None:
    content = main_part("docx")
    cases = {
        "ratio": (replace(deflated(MAIN["docx"], content), declared=2**31), DocumentError.TOO_LARGE, "deflate"),
        "bzip2": (Part(MAIN["docx"], bz2.compress(content), len(content), zlib.crc32(content),
                       method=zipfile.ZIP_BZIP2), DocumentError.PARSE_FAILED, "compression method 12"),
        "flag": (replace(deflated(MAIN["docx"], content), flags=1), DocumentError.ENCRYPTED, "encrypted"),
    }
    for case, (part, reason, words) in cases.items():
        with pytest.raises(DocumentError) as err:
            parse(package("docx", {MAIN["docx"]: part}), "docx")
        assert err.value.reason == reason and words in err.value.detail, (case, err.value)
    honest = padded("docx", 300 * MiB)  # declared truthfully: over the 256 MiB cap by its directory alone
    started = time.perf_counter()
    with pytest.raises(DocumentError) as err:
        parse(package("docx", {MAIN["docx"]: honest}), "docx")
    assert err.value.reason == DocumentError.TOO_LARGE and "unpacks to 301 MiB, limit 256 MiB" in err.value.detail
    assert time.perf_counter() - started < 2.0  # refused from the directory: inflating 300 MiB takes far longer


def test_too_many_parts_are_refused_before_the_directory_is_read() -> None:
    extra = [deflated(f"customXml/item{i}.xml", b"<a/>") for i in range(2_000)]
    data = package("xlsx", extra=extra)
    with pytest.raises(DocumentError) as err:
        parse(data, "xlsx", Limits(max_archive_members=1_000))
    assert err.value.reason == DocumentError.TOO_LARGE and "lists 2,0" in err.value.detail
    assert parse(data, "xlsx").blocks  # under the default (10,000) the same package parses


@pytest.mark.parametrize("ext", sorted(MAIN))
def test_xml_elements_are_capped_before_a_library_builds_its_tree(ext: str) -> None:
    content = with_elements(ext, count=30_000)
    data = package(ext, {MAIN[ext]: deflated(MAIN[ext], content)})
    with pytest.raises(DocumentError) as err:
        parse(data, ext, Limits(max_xml_elements=50_000))
    assert err.value.reason == DocumentError.TOO_LARGE and "elements" in err.value.detail
    assert MAIN[ext] in err.value.detail
    counted = check_package(data, "package").xml_elements
    assert 30_000 * UNIT[ext].count("<") // 2 < counted < 30_000 * UNIT[ext].count("<")


def test_elements_split_between_two_steps_are_counted_once() -> None:
    from freshindex.workers.parsing.archive import STEP

    content = main_part("docx")
    at = content.rindex(b"</w:body>")
    pad = b" " * (STEP - at - 1)  # "</w:body>" starts on the last byte of the first step
    data = package("docx", {MAIN["docx"]: deflated(MAIN["docx"], content[:at] + pad + content[at:])})
    plain = package("docx")
    assert check_package(data, "p").xml_elements == check_package(plain, "p").xml_elements


@pytest.mark.slow
def test_an_honest_word_file_of_100_mb_of_xml_fails_fast_and_small() -> None:
    """The issue's Low finding: a 333 KB .docx holding 100 MB of XML used 2 GB before the parse timeout."""
    content = with_elements("docx", count=2_300_000)
    assert len(content) > 100 * 10**6
    data = package("docx", {MAIN["docx"]: deflated(MAIN["docx"], content)})
    del content
    assert len(data) < 2 * MiB
    started = time.perf_counter()
    with pytest.raises(DocumentError) as err:
        parse(data, "docx")
    assert err.value.reason == DocumentError.TOO_LARGE and "2,000,000 elements" in err.value.detail
    assert time.perf_counter() - started < 20


def test_a_word_file_of_many_paragraphs_parses_in_linear_time() -> None:
    """python-docx looked every paragraph's style up by scanning all styles (about 3 ms a paragraph):
    30,000 paragraphs took minutes, and the time limit is what stopped them."""
    heading = '<w:p><w:pPr><w:pStyle w:val="Heading1"/></w:pPr><w:r><w:t>Part {i}</w:t></w:r></w:p>'
    body = "".join(heading.format(i=i) if i % 100 == 0 else UNIT["docx"] for i in range(30_000)).encode()
    content = main_part("docx")
    at = content.rindex(ANCHOR["docx"])
    data = package("docx", {MAIN["docx"]: deflated(MAIN["docx"], content[:at] + body + content[at:])})
    started = time.perf_counter()
    doc = parse(data, "docx", Limits(time_limit_s=60))
    spent = time.perf_counter() - started
    headings = [b for b in doc.blocks if b.kind == "heading"]
    assert len(headings) == 301 and headings[2].text == "Part 100" and headings[2].meta["level"] == 1
    assert len(doc.blocks) == 30_000 + 2  # and the base document's own heading and paragraph
    assert spent < 15, spent


# -- a real sync in a separate process -----------------------------------------------------------------------


def lying_docx(inflated: int) -> bytes:
    """A Word package whose ``word/document.xml`` inflates to ``inflated`` bytes and declares 1,000.

    Written by zipfile (honestly), then the two headers rewritten: about 1 MB on disk."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as z:
        for name, content in base("docx"):
            if name != MAIN["docx"]:
                z.writestr(name, content)
                continue
            with z.open(name, "w") as member:
                member.write(content)
                block = b" " * MiB
                for _ in range(inflated // MiB):
                    member.write(block)
    return rewrite_sizes(out.getvalue(), MAIN["docx"], 1_000)


@pytest.mark.slow
def test_a_sync_over_a_lying_and_a_huge_office_file_stays_under_500_mb(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "drills.docx").write_bytes(package("docx"))
    (src / "quotas.pptx").write_bytes(package("pptx"))
    (src / "regions.xlsx").write_bytes(package("xlsx"))
    (src / "liar.docx").write_bytes(lying_docx(1024 * MiB))
    sheet = padded("xlsx", 600 * MiB)
    (src / "liar.xlsx").write_bytes(package("xlsx", {MAIN["xlsx"]: replace(sheet, declared=2_000)}))
    huge = with_elements("docx", count=2_300_000)
    (src / "huge.docx").write_bytes(package("docx", {MAIN["docx"]: deflated(MAIN["docx"], huge)}))
    del huge
    out = tmp_path / "report.json"
    env = {**os.environ, "FRESHINDEX_EMBEDDING__PROVIDER": "hashing", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-m", "tests.workers.test_office_bombs", "sync", str(tmp_path / "data"), str(src), str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(out.read_text())
    print(f"\nsync {report['seconds']:.1f}s; peak RSS of the sync process {report['peak_rss_mb']} MB (VmHWM)")
    reasons = {e["key"]: (e["reason"], e["detail"]) for e in report["errors"]}
    assert set(reasons) == {"liar.docx", "liar.xlsx", "huge.docx"}, report["errors"]
    assert reasons["liar.docx"] == (DocumentError.PARSE_FAILED, "not a readable Word document: part "
                                    "'word/document.xml' declares 1,000 bytes but holds more")
    assert reasons["liar.xlsx"][0] == DocumentError.PARSE_FAILED and "sheet1.xml" in reasons["liar.xlsx"][1]
    assert reasons["huge.docx"][0] == DocumentError.TOO_LARGE and "elements" in reasons["huge.docx"][1]
    assert report["status"] == "partial" and report["documents"]["added"] == 3
    assert report["peak_rss_mb"] < 500


def _peak_rss_mb() -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) // 1024
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024


def _reset_peak_rss() -> None:
    """Start VmHWM again from the current RSS (Linux: ``/proc/self/clear_refs``); without it the peak is the
    process's whole life."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
    except OSError:
        pass


def _sync(data_dir: str, src: str, out: str) -> None:
    from freshindex.services import Services
    from freshindex.settings import load_settings
    from freshindex.workers.runner import sync_inline

    svc = Services(load_settings(data_dir=data_dir))
    svc.registry.add_source("docs", kind="folder", location=src, owner="t", kb="default")
    data = sync_inline(svc, "docs").as_dict()
    svc.close()
    Path(out).write_text(json.dumps({"status": data["status"], "documents": data["documents"],
                                     "errors": data["errors"], "seconds": data["seconds"],
                                     "peak_rss_mb": _peak_rss_mb()}))


# -- generated hostile packages, in a separate process -------------------------------------------------------

#: The fuzz runs under small caps, so that a package past them is cheap to make, and a 600 MiB stream is
#: still 40 times the byte cap.
FUZZ_LIMITS = Limits(time_limit_s=5, max_decompressed_bytes=16 * MiB, max_archive_members=500,
                     max_xml_elements=200_000)
#: Reasons a hostile package may fail with.
FUZZ_REASONS = {DocumentError.TOO_LARGE, DocumentError.PARSE_FAILED, DocumentError.ENCRYPTED,
                DocumentError.TIMED_OUT, DocumentError.EMPTY, DocumentError.TOO_COMPLEX}


@dataclass(frozen=True)
class Hostile:
    ext: str
    data: bytes = field(repr=False)
    #: What was done to the package.
    tricks: tuple[str, ...]
    #: Why a library must never see it (a lie or a cap passed); empty when it may parse.
    refused_because: tuple[str, ...]


@st.composite
def hostile_packages(draw: st.DrawFn) -> Hostile:
    """A base package with one or two tricks in its content and, one time in two, one in its headers."""
    ext = draw(st.sampled_from(sorted(MAIN)))
    tricks = draw(st.lists(st.sampled_from(["bomb", "members", "deep", "wide"]), min_size=1, max_size=2,
                           unique=True))
    header = draw(st.sampled_from([None, None, None, "method", "ratio", "flag"]))
    main, extra, why = None, [], []
    if "deep" in tricks or "wide" in tricks:
        count = draw(st.sampled_from([1_000, 12_000, 400_000])) if "wide" in tricks else 0
        depth = draw(st.sampled_from([300, 100_000, 1_000_000])) if "deep" in tricks else 0
        main = deflated(MAIN[ext], with_elements(ext, count=count, depth=depth))
    if "bomb" in tricks:
        pad = draw(st.sampled_from([1, 40, 600])) * MiB
        lie = draw(st.sampled_from(["none", "prefix", "tiny", "huge"]))
        main = padded(ext, pad)
        content = main_part(ext)
        main = {"none": main, "prefix": replace(main, declared=len(content), crc=zlib.crc32(content)),
                "tiny": replace(main, declared=1_000),
                "huge": replace(main, declared=main.declared * 2)}[lie]
        tricks = [*tricks, f"bomb {pad // MiB} MiB, lie {lie}"]
        why += ["lie"] if lie != "none" else []
        why += ["bytes"] if pad > FUZZ_LIMITS.max_decompressed_bytes else []
    if "members" in tricks:
        many = draw(st.sampled_from([50, 600, 5_000]))
        extra = [deflated(f"customXml/item{i}.xml", b"<a/>") for i in range(many)]
        why += ["members"] if many + len(base(ext)) > FUZZ_LIMITS.max_archive_members else []
    main = main or deflated(MAIN[ext], main_part(ext))
    if header == "method":
        main = replace(main, method=draw(st.sampled_from([zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA, 99])))
    elif header == "ratio":
        main = replace(main, declared=min(len(main.raw) * 2_000, 0xFFFFFFFF))
    elif header == "flag":
        main = replace(main, flags=1)
    if header:
        tricks, why = [*tricks, header], [*why, header]
    return Hostile(ext, package(ext, {MAIN[ext]: main}, extra), tuple(tricks), tuple(why))


def _fuzz(out: str) -> None:
    seen: list[dict[str, object]] = []

    @settings(max_examples=int(os.environ.get("OFFICE_FUZZ_EXAMPLES", "60")), deadline=None, derandomize=True,
              database=None, suppress_health_check=list(HealthCheck))
    @given(hostile_packages())
    def run(h: Hostile) -> None:
        _reset_peak_rss()  # what this parse costs, not what generating the package cost
        started = time.perf_counter()
        try:
            parse(h.data, h.ext, FUZZ_LIMITS)
            outcome = "parsed"
            detail = ""
        except DocumentError as exc:
            outcome, detail = exc.reason, exc.detail[:100]
        spent = time.perf_counter() - started
        seen.append({"ext": h.ext, "tricks": h.tricks, "why": h.refused_because, "outcome": outcome,
                     "detail": detail, "seconds": round(spent, 2), "size": len(h.data), "peak_rss_mb": _peak_rss_mb()})
        assert outcome in FUZZ_REASONS | {"parsed"}
        assert not (h.refused_because and outcome == "parsed"), h.refused_because
        assert spent < 20

    run()
    Path(out).write_text(json.dumps({"examples": seen, "peak_rss_mb": _peak_rss_mb()}))


@pytest.mark.slow
def test_generated_hostile_packages_fail_alone_under_a_memory_and_time_bound(tmp_path: Path) -> None:
    out = tmp_path / "fuzz.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "tests.workers.test_office_bombs", "fuzz", str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=900, check=False)
    assert proc.returncode == 0, proc.stderr[-5000:]
    report = json.loads(out.read_text())
    examples = report["examples"]
    worst = max(examples, key=lambda e: e["peak_rss_mb"])
    print(f"\n{len(examples)} hostile packages; peak RSS while parsing {worst['peak_rss_mb']} MB (VmHWM, {worst}); "
          f"process peak {report['peak_rss_mb']} MB; slowest {max(e['seconds'] for e in examples)}s")
    for e in examples:
        print(e)
    assert len(examples) >= 60
    tricks = {t.split()[0] for e in examples for t in e["tricks"]}
    assert tricks == {"bomb", "members", "deep", "wide", "method", "ratio", "flag"}, tricks
    assert any("lie" in e["why"] for e in examples) and any(e["outcome"] == "parsed" for e in examples)
    assert any("XMLSyntaxError" in e["detail"] for e in examples)  # deep XML that reached libxml2's own limit
    assert worst["peak_rss_mb"] < 500


if __name__ == "__main__":
    {"sync": _sync, "fuzz": _fuzz}[sys.argv[1]](*sys.argv[2:])


def test_a_part_that_reads_as_xml_is_counted_whatever_its_name() -> None:
    # Given a package with a flood of elements in a part not named .xml (the libraries pick parts by their
    # content type, so a main part renamed word/document.dat is still read and built into a tree)
    flood = b'<?xml version="1.0"?><w:body>' + UNIT["docx"].encode() * 30_000 + b"</w:body>"
    data = package("docx", extra=[deflated("word/document.dat", flood), deflated("word/media/image1.png",
                                                                                  b"\x89PNG<<<<" * 1000)])
    # Then its elements count against the cap (the image's stray "<" bytes do not)
    with pytest.raises(DocumentError) as err:
        parse(data, "docx", Limits(max_xml_elements=50_000))
    assert err.value.reason == DocumentError.TOO_LARGE and "word/document.dat" in err.value.detail
    plain = check_package(package("docx", extra=[deflated("word/media/image1.png", b"\x89PNG<<<<" * 1000)]), "p")
    assert plain.xml_elements == check_package(package("docx"), "p").xml_elements
