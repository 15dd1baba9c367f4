"""Logging set-up for every freshindex process: text for people, JSON for machines.

Pipeline code logs with ``extra={"event": ..., ...}``; the JSON formatter
writes those fields as top-level keys, so log pipelines can index them.

One record is one line, whatever it carries: a document key may hold a
newline or another control character (a folder file named ``a\nb.md``, an
S3 key), and written raw it would split the line or forge a second record.
The text formatter escapes control characters (and the Unicode line and
paragraph separators) in the message and every field; the JSON formatter
leaves C0 controls to ``json.dumps`` and escapes the rest, losslessly.  A
traceback (``exc_info``) stays multi-line: its lines are indented, so a
reader still sees where the record ends.
"""

from __future__ import annotations

import json
import logging
import re
import sys
import time

_STANDARD = set(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {"message", "asctime"}
#: C0 and C1 control characters, DEL, and the Unicode line/paragraph separators.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
#: What json.dumps(ensure_ascii=False) leaves raw that log shippers may split on.
_JSON_UNSAFE = re.compile("[\x7f-\x9f\u2028\u2029]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def escape_control(text: str) -> str:
    """``text`` with every control character written as an escape (``\\n``, ``\\x1b``, ``\\u2028``)."""
    def one(m: re.Match[str]) -> str:
        c = m.group()
        return _NAMED.get(c) or (f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}")

    return _CONTROL.sub(one, text)


def _field(value: object) -> str:
    return escape_control(value if isinstance(value, str) else str(value))


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for k, v in record.__dict__.items():
            if k not in _STANDARD and not k.startswith("_"):
                out[k] = v
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        text = json.dumps(out, default=str, ensure_ascii=False)
        return _JSON_UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        base = f"{record.levelname:<7} {record.name}: {_field(record.getMessage())}"
        fields = " ".join(f"{_field(k)}={_field(v)}" for k, v in record.__dict__.items()
                          if k not in _STANDARD and not k.startswith("_") and k != "event")
        text = f"{base} {fields}".rstrip()
        if record.exc_info:
            tb = self.formatException(record.exc_info)
            text += "\n" + "\n".join("    " + escape_control(line) for line in tb.splitlines())
        return text


def configure(level: str = "INFO", fmt: str = "text", stream=None) -> None:
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    root.addHandler(handler)
    root.setLevel(level.upper())
    for noisy in ("httpx", "botocore", "urllib3", "s3transfer", "celery.utils.functional"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
