"""The connector contract: what the pipeline relies on from every source kind's :class:`Connector`.

A subclass says how to make a connector over an empty source and how to
put and remove one object there (a file written, an object uploaded, a
commit, a page served); the suite then holds the connector to:

- ``list()`` names every object once, under a key :func:`check_key` accepts,
  with a non-empty etag, and a media type that is either absent or HTML's
  for the HTML the suite puts (required when :attr:`~ConnectorContract.lists_media_types`);
- ``fetch(key)`` returns exactly the bytes put, as ``bytes``;
- an object removed is gone from the next listing; an edit changes the
  object's etag and leaves an untouched object's etag as it was (the planner
  decides "unchanged" from etags alone);
- a key that escapes the source (``..``, absolute) is refused with a
  :class:`DocumentError` and never read, and :func:`check_key` refuses it too;
- ``for_run``: a :class:`RunScoped` connector reads, for a run, the bytes
  that run listed even after the source moved on, and the next run's listing
  reads the new bytes; any other connector is returned as it is.

Objects are small HTML pages named ``guide.html`` and ``notes/setup.html``
(:meth:`ConnectorContract.key_of` maps a name to the connector's key, a web
page's URL).  What it does not check: sidecars, ACL tags, size limits,
retries, truncated listings or a source that is down; each kind's own tests
cover those.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from freshindex.core.errors import DocumentError
from freshindex.core.types import ObjectRef
from freshindex.workers.connectors import Connector, RunScoped, check_key, for_run

GUIDE, SETUP = "guide.html", "notes/setup.html"
#: Keys that leave a source; ``../outside.html`` exists next to the source where a subclass makes a folder.
ESCAPING = ("../outside.html", "notes/../../outside.html", "/etc/passwd")


class MemoryCursor:
    """A source's sync cursor kept in memory, one pending value per run (the registry's ``CursorStore``).

    :attr:`run` is the run whose listing is under way: the suite sets it before listing for a run.
    """

    def __init__(self) -> None:
        self.run = 0
        self.pending: dict[int, dict[str, Any]] = {}
        self.value: dict[str, Any] | None = None

    def get(self) -> dict[str, Any] | None:
        return self.value

    def set_pending(self, value: dict[str, Any]) -> None:
        self.pending[self.run] = value

    def planned(self, run_id: int) -> dict[str, Any] | None:
        return self.pending.get(run_id)


def page(text: str) -> bytes:
    """A small HTML page holding ``text`` (what the suite puts)."""
    return f"<html><head><title>{text}</title></head><body><h1>{text}</h1><p>{text}</p></body></html>".encode()


class ConnectorContract:
    """Subclass as ``TestMyConnector(ConnectorContract)`` and implement the three methods that raise."""

    #: Keys the source lists besides the objects put (a web site's start page).
    extra_keys: frozenset[str] = frozenset()
    #: The source knows each object's media type (an HTTP Content-Type) and lists it.
    lists_media_types = False

    def make_connector(self, tmp_path: Path, cursor: MemoryCursor) -> Connector:
        """A connector over an empty source made under ``tmp_path`` (not inside ``tmp_path`` itself:
        the suite writes ``tmp_path/outside.html``), recording its listings in ``cursor``."""
        raise NotImplementedError

    def put(self, name: str, data: bytes) -> None:
        """Create or replace the object ``name`` (``notes/setup.html``) with ``data``."""
        raise NotImplementedError

    def remove(self, name: str) -> None:
        """Delete the object ``name``."""
        raise NotImplementedError

    def key_of(self, name: str) -> str:
        """The key the connector lists for the object ``name``."""
        return name

    @pytest.fixture
    def cursor(self) -> MemoryCursor:
        return MemoryCursor()

    @pytest.fixture
    def connector(self, tmp_path: Path, cursor: MemoryCursor) -> Iterator[Connector]:
        (tmp_path / "outside.html").write_bytes(page("outside the source"))
        conn = self.make_connector(tmp_path, cursor)
        try:
            yield conn
        finally:
            close = getattr(conn, "close", None)
            if callable(close):
                close()

    def _listing(self, conn: Connector) -> dict[str, ObjectRef]:
        refs = list(conn.list())
        keys = [r.key for r in refs]
        assert len(keys) == len(set(keys)), f"a key listed twice: {keys}"
        return {r.key: r for r in refs if r.key not in self.extra_keys}

    def test_a_listing_names_every_object_with_an_etag(self, connector: Connector) -> None:
        # Given two objects, one in a subfolder
        self.put(GUIDE, page("guide"))
        self.put(SETUP, page("setup"))
        # When the source is listed
        refs = self._listing(connector)
        # Then each is there once, under a safe key, with an etag and at most HTML's media type
        assert set(refs) == {self.key_of(GUIDE), self.key_of(SETUP)}
        for key, ref in refs.items():
            assert check_key(key) == key
            assert isinstance(ref.etag, str) and ref.etag, f"{key} has no etag"
            assert isinstance(ref.size, int) and ref.size >= 0
            if self.lists_media_types or ref.media_type is not None:
                assert (ref.media_type or "").split(";")[0].strip().lower() == "text/html", ref.media_type

    def test_fetch_returns_the_bytes_put(self, connector: Connector) -> None:
        self.put(GUIDE, page("guide"))
        self.put(SETUP, page("setup, in a subfolder"))
        self._listing(connector)
        for name, text in ((GUIDE, "guide"), (SETUP, "setup, in a subfolder")):
            data = connector.fetch(self.key_of(name))
            assert type(data) is bytes and data == page(text)

    def test_a_removed_object_is_gone_from_the_next_listing(self, connector: Connector) -> None:
        self.put(GUIDE, page("guide"))
        self.put(SETUP, page("setup"))
        assert set(self._listing(connector)) == {self.key_of(GUIDE), self.key_of(SETUP)}
        self.remove(SETUP)
        assert set(self._listing(connector)) == {self.key_of(GUIDE)}

    def test_an_edit_changes_the_etag_and_nothing_else_does(self, connector: Connector) -> None:
        # Given two listed objects
        self.put(GUIDE, page("guide"))
        self.put(SETUP, page("setup"))
        before = {k: r.etag for k, r in self._listing(connector).items()}
        # When one is edited and the source listed again
        self.put(GUIDE, page("guide, edited: the timeout is now 45 seconds"))
        after = {k: r.etag for k, r in self._listing(connector).items()}
        # Then only the edited one has a new etag, and its new bytes are fetched
        assert after[self.key_of(GUIDE)] != before[self.key_of(GUIDE)]
        assert after[self.key_of(SETUP)] == before[self.key_of(SETUP)]
        assert connector.fetch(self.key_of(GUIDE)) == page("guide, edited: the timeout is now 45 seconds")

    def test_a_key_that_escapes_the_source_is_refused(self, connector: Connector) -> None:
        self.put(GUIDE, page("guide"))
        self._listing(connector)
        for key in ESCAPING:
            with pytest.raises(DocumentError):
                check_key(key)
            with pytest.raises(DocumentError):
                connector.fetch(key)

    def test_for_run_reads_what_that_run_listed(self, connector: Connector, cursor: MemoryCursor) -> None:
        self.put(GUIDE, page("first"))
        if not isinstance(connector, RunScoped):
            self._listing(connector)
            assert for_run(connector, 1) is connector and for_run(connector, None) is connector
            return
        # Given run 1 listed the first version, and the source changed after
        cursor.run = 1
        self._listing(connector)
        self.put(GUIDE, page("second"))
        # Then run 1's reads are the bytes it listed, whatever the source holds now
        assert for_run(connector, 1).fetch(self.key_of(GUIDE)) == page("first")
        # And run 2, listed after the change, reads the new bytes
        cursor.run = 2
        self._listing(connector)
        assert for_run(connector, 2).fetch(self.key_of(GUIDE)) == page("second")


__all__ = ["ConnectorContract", "MemoryCursor", "page"]
