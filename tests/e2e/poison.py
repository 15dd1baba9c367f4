"""Test-only: the ``freshindex`` CLI whose parser SIGKILLs its own process on a marked document.

``python -m tests.e2e.poison worker ...`` (or ``sync ...``) runs the real CLI
after replacing :meth:`Parsers.parse` with one that, for a document whose
bytes contain :data:`MARKER`, appends its pid to ``$POISON_LOG`` and kills its
process with SIGKILL: a real fault, as a native parser's segfault or the OOM
killer is, with nothing of it in product code.  Any other document parses as usual.
"""

from __future__ import annotations

import os
import signal
import sys

MARKER = b"POISON-PILL: this document kills the process that parses it"


def install() -> None:
    from freshindex.workers.parsing import Parsers

    original = Parsers.parse

    def parse(self: Parsers, data: bytes, key: str, *rest):  # type: ignore[no-untyped-def]  # rest: the media type
        if MARKER in data:
            log = os.environ.get("POISON_LOG")
            if log:
                with open(log, "a") as f:
                    f.write(f"{os.getpid()} {key}\n")
            os.kill(os.getpid(), signal.SIGKILL)
        return original(self, data, key, *rest)

    Parsers.parse = parse  # type: ignore[method-assign]


if __name__ == "__main__":
    install()
    from freshindex.cli import main

    sys.argv = ["freshindex", *sys.argv[1:]]
    main()
