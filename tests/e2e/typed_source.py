"""Test-only: a source kind ``typed`` whose listing gives media types, and the CLI with it registered.

``python -m tests.e2e.typed_source worker ...`` runs the real ``freshindex``
CLI after :func:`install` has registered the kind, so a worker process can
plan and fetch such a source; a test process calls :func:`install` itself.
The listing holds keys without an extension a parser reads (as an HTTP
source's Content-Type would type them), one typed Markdown key and one
ordinary ``.md`` key.  Nothing of it is product code, and it serves only
what :data:`LISTED` holds: no ACLs, no change between syncs.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

KIND = "typed"

HTML = ("<html><head><title>Ferry</title></head><body><h1>Ferry</h1>"
        "<p>The ferry leaves at noon from pier nine.</p></body></html>")

#: key -> (media type, text)
LISTED: dict[str, tuple[str | None, str]] = {
    "pages/ferry": ("text/html; charset=utf-8", HTML),  # no extension: HTML by its media type
    "export.php": ("text/html", HTML.replace("Ferry", "Tickets")),  # an extension no parser reads
    "exports/1234": ("text/markdown", "# Backup\n\nCopy the data folder to another disk every night.\n"),
    "guide/plain.md": (None, "# Plain\n\nAn ordinary Markdown file, read by its extension.\n"),
}


class TypedSource:
    """The connector: lists :data:`LISTED` with its media types and serves its texts."""

    def list(self) -> Iterator[object]:
        from freshindex.core.types import ObjectRef

        for key, (media, text) in sorted(LISTED.items()):
            yield ObjectRef(key=key, etag=str(len(text)), size=len(text), media_type=media)

    def fetch(self, key: str) -> bytes:
        from freshindex.core.errors import DocumentError

        if key not in LISTED:  # e.g. an ACL sidecar it does not hold
            raise DocumentError(DocumentError.VANISHED, f"{key} is gone")
        return LISTED[key][1].encode()


def install() -> None:
    """Register the ``typed`` kind in this process."""
    from freshindex.workers import connectors
    from freshindex.workers.connectors import ConnectorSpec

    connectors.register(ConnectorSpec(kind=KIND, build=lambda source, env: TypedSource(),
                                      source_uri=lambda location, key: f"{location}/{key}"), replace=True)


def uninstall() -> None:
    from freshindex.workers import connectors

    connectors.unregister(KIND)


if __name__ == "__main__":
    install()
    from freshindex.cli import main

    sys.argv = ["freshindex", *sys.argv[1:]]
    main()
