"""Zip packages (Office Open XML) counted as they inflate, before any library opens them.

A zip member declares its size, but CPython's ``ZipFile.read`` inflates the
member's whole stream and only then cuts it to that size: a 1.5 MB package
declaring 1,000 bytes for one member took a worker to 2.2 GB.  The Office
libraries (python-docx, python-pptx, openpyxl) all read members that way.
:func:`check_package` is the one gate every zip-based format goes through
first; it reads each member once in steps of :data:`STEP` bytes, counting
the bytes the stream really produces, and refuses the package:

* with more central-directory entries than ``max_archive_members`` (counted
  in the raw bytes, before ``zipfile`` builds an object per entry);
* with an encrypted member (``encrypted``), or one compressed other than
  stored or deflated (bzip2 and LZMA are inflated by ``zipfile`` without any
  output bound; no Office application writes them);
* whose members declare a ratio deflate cannot reach (over
  :data:`~workers.parsing.streams.FLATE_MAX_RATIO` to one), or declare more
  than ``max_decompressed_bytes`` in total (``too_large``, nothing inflated);
* as soon as a member's stream produces one byte more than the member
  declares (``parse_failed``): so no member inflates past its declared size
  plus one step, and the package past ``max_decompressed_bytes`` plus one
  step, and memory stays at one step (a 1 GiB stream declaring 1,000 bytes
  is refused after its first step);
* whose member holds fewer bytes than it declares, or fails its CRC
  (``parse_failed``): the library would read something else than was counted;
* whose XML parts (by name, or any part whose bytes start as XML: the
  libraries choose parts by content type, so a renamed part is still read)
  hold more than ``max_xml_elements`` elements in total
  (``too_large``): the libraries build a tree of every part they read (about
  120 bytes an element in python-docx), so the elements, not the bytes, bound
  their memory.  Elements are counted as ``<`` not followed by ``/``, an upper
  bound for well-formed XML (comments and processing instructions count too).

After the check the libraries read the same bytes: every member they can
open by name was counted and holds exactly what it declares, so their whole
reads inflate no more than the cap.  What this does not guarantee: the
nesting depth of XML is not measured here (libxml2, which python-docx and
python-pptx use, stops at 256 levels; the element cap bounds the rest), nor
the CPU a library spends on what passed (the parse time limit does), and
each member is inflated twice (once here, once by the library).
"""

from __future__ import annotations

import copy
import io
import zipfile
import zlib
from dataclasses import dataclass

from freshindex.core.errors import DocumentError
from freshindex.workers.parsing import limits
from freshindex.workers.parsing.streams import FLATE_MAX_RATIO

#: Bytes inflated per read: the most a member costs in memory while it is counted.
STEP = 1 << 20
#: A central-directory entry starts with these four bytes; ``zipfile`` refuses an entry that does not.
_CENTRAL = b"PK\x01\x02"
_METHODS = {zipfile.ZIP_STORED: "stored", zipfile.ZIP_DEFLATED: "deflated"}
#: Members whose text is XML an Office library parses (Open Packaging relationships included).
_XML_SUFFIXES = (".xml", ".rels", ".vml")


@dataclass(frozen=True)
class Inventory:
    """What :func:`check_package` counted in a package that passed."""

    members: int
    inflated: int
    xml_elements: int


def _mib(n: int) -> str:
    return f"{n / 2**20:.0f} MiB" if n >= 2**20 else f"{n:,} bytes"


def _directory(data: bytes, what: str) -> zipfile.ZipFile:
    """The package's central directory, refused before it is read when it lists too many members."""
    cap = limits.current().max_archive_members
    entries = data.count(_CENTRAL)  # an upper bound on the entries zipfile would build
    if entries > cap:
        raise DocumentError(DocumentError.TOO_LARGE,
                            f"the {what} lists {entries:,} parts, limit {cap:,}")
    try:
        return zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, ValueError, OSError, EOFError) as exc:
        raise DocumentError(DocumentError.PARSE_FAILED,
                            f"not a readable {what}: not a ZIP package ({exc})") from exc


def _declared(infos: list[zipfile.ZipInfo], what: str) -> None:
    """Refuse what the directory alone shows: encryption, foreign methods, impossible ratios, the sum."""
    cap = limits.current().max_decompressed_bytes
    for info in infos:
        if info.flag_bits & 0x1:
            raise DocumentError(DocumentError.ENCRYPTED, f"the {what}'s part {info.filename!r} is encrypted")
        if info.compress_type not in _METHODS:
            raise DocumentError(DocumentError.PARSE_FAILED,
                                f"not a readable {what}: part {info.filename!r} uses compression method "
                                f"{info.compress_type} (an Office package is stored or deflated)")
        if info.file_size > max(info.compress_size, 1) * FLATE_MAX_RATIO:
            raise DocumentError(DocumentError.TOO_LARGE,
                                f"the {what}'s part {info.filename!r} declares {info.file_size:,} bytes from "
                                f"{info.compress_size:,}, more than deflate can produce")
    declared = sum(i.file_size for i in infos)
    if declared > cap:
        raise DocumentError(DocumentError.TOO_LARGE, f"the {what} unpacks to {_mib(declared)}, limit {_mib(cap)}")


class _Count:
    """Bytes and XML elements counted so far across the package; the elements are refused at their cap."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.bytes = 0
        self.elements = 0
        self.element_cap = limits.current().max_xml_elements

    def add_elements(self, name: str, n: int) -> None:
        self.elements += n
        if self.elements > self.element_cap:
            raise DocumentError(DocumentError.TOO_LARGE, f"the {self.what}'s XML holds more than "
                                f"{self.element_cap:,} elements (at {name!r}), limit {self.element_cap:,}")


def _inflate(z: zipfile.ZipFile, info: zipfile.ZipInfo, count: _Count) -> None:
    """Read one member to its end in steps, counting what its stream really produces; then its size and CRC."""
    name = info.filename
    unbounded = copy.copy(info)
    unbounded.file_size = info.file_size + STEP  # zipfile would stop at the declared size; see past it
    del unbounded.CRC  # checked below, after the size, so that a liar is named for its size
    xml: bool | None = True if name.lower().endswith(_XML_SUFFIXES) else None  # else decided by its first bytes
    member = crc = 0
    last = b""
    with z.open(unbounded) as stream:
        while chunk := stream.read(STEP):
            member += len(chunk)
            if member > info.file_size:
                raise DocumentError(DocumentError.PARSE_FAILED, f"not a readable {count.what}: part {name!r} "
                                    f"declares {info.file_size:,} bytes but holds more")
            count.bytes += len(chunk)
            crc = zlib.crc32(chunk, crc)
            if xml is None:
                # The libraries pick parts by content type, not name: a part that reads as XML is counted
                # as XML whatever it is called (a renamed word/document.dat); images never start with "<".
                xml = chunk.lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"<")
            if xml:
                split = 1 if last == b"<" and chunk[:1] == b"/" else 0  # a "</" across two steps
                count.add_elements(name, chunk.count(b"<") - chunk.count(b"</") - split)
                last = chunk[-1:]
            limits.check_time(f"part {name!r}")
    if member != info.file_size:
        raise DocumentError(DocumentError.PARSE_FAILED, f"not a readable {count.what}: part {name!r} declares "
                            f"{info.file_size:,} bytes but holds {member:,}")  # fewer
    if crc != info.CRC:
        raise DocumentError(DocumentError.PARSE_FAILED, f"not a readable {count.what}: part {name!r} fails its "
                            "CRC check (damaged)")


def check_package(data: bytes, what: str) -> Inventory:
    """Refuse a zip package whose members would inflate past the parse limits; count what they hold.

    ``what`` names the format in the errors ("Word document").  Raises
    :class:`~core.errors.DocumentError` (``too_large``, ``parse_failed`` or
    ``encrypted``); a package that passes may be handed to a library.
    """
    with _directory(data, what) as z:
        infos = z.infolist()
        _declared(infos, what)
        count = _Count(what)
        for info in infos:
            try:
                _inflate(z, info, count)
            except (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError, NotImplementedError) as exc:
                raise DocumentError(DocumentError.PARSE_FAILED,
                                    f"not a readable {what}: part {info.filename!r}: {exc}") from exc
    return Inventory(members=len(infos), inflated=count.bytes, xml_elements=count.elements)


__all__ = ["STEP", "Inventory", "check_package"]
