"""Bytes to text, refusing what is not text.

We do not guess encodings: a file that is not UTF-8 (or UTF-16 with a BOM)
is an error recorded against the document, because a wrong guess silently
corrupts every chunk of it.
"""

from __future__ import annotations

from freshindex.core.errors import DocumentError

_CONTROL = bytes(range(0, 9)) + bytes(range(14, 32))


def looks_binary(data: bytes, sample: int = 8192) -> bool:
    head = data[:sample]
    if b"\0" in head and not head.startswith((b"\xff\xfe", b"\xfe\xff")):
        return True
    if not head:
        return False
    control = sum(1 for b in head if b in _CONTROL)
    return control / len(head) > 0.1


def decode_text(data: bytes) -> str:
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    elif data.startswith((b"\xff\xfe", b"\xfe\xff")):
        try:
            return data.decode("utf-16")
        except UnicodeDecodeError as exc:
            raise DocumentError(DocumentError.ENCODING, f"invalid UTF-16 at byte {exc.start}") from exc
    if looks_binary(data):
        raise DocumentError(DocumentError.BINARY, "binary content (NUL or control bytes) in a text file")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        bad = data[exc.start : exc.start + 1].hex()
        raise DocumentError(
            DocumentError.ENCODING, f"not valid UTF-8: byte 0x{bad} at offset {exc.start}"
        ) from exc
    return text.replace("\r\n", "\n").replace("\r", "\n")
