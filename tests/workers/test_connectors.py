"""Folder and S3 connectors (S3 against a local S3 server over HTTP)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from freshindex.core.errors import DocumentError, SourceError
from freshindex.workers.connectors import check_key
from freshindex.workers.connectors.folder import FolderConnector
from freshindex.workers.connectors.s3 import S3Connector, s3_client


def test_folder_lists_files_with_etags_and_skips_hidden(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("a")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.txt").write_text("bb")
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "HEAD").write_text("x")
    (tmp_path / ".hidden.md").write_text("x")
    refs = {r.key: r for r in FolderConnector(tmp_path, max_bytes=100).list()}
    assert set(refs) == {"a.md", "sub/b.txt"}
    assert refs["sub/b.txt"].size == 2 and refs["sub/b.txt"].etag.endswith("-2")


def test_folder_refuses_links_that_escape_and_reports_dangling_ones(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (tmp_path / "secret.txt").write_text("secret")
    os.symlink(tmp_path / "secret.txt", root / "escape.md")
    os.symlink(root / "missing.md", root / "dangling.md")
    conn = FolderConnector(root, max_bytes=100)
    assert {r.key for r in conn.list()} == {"escape.md", "dangling.md"}
    with pytest.raises(DocumentError) as err:
        conn.fetch("escape.md")
    assert err.value.reason == DocumentError.SYMLINK_OUTSIDE
    with pytest.raises(DocumentError) as err:
        conn.fetch("dangling.md")
    assert err.value.reason == DocumentError.UNREADABLE


def test_folder_enforces_the_size_limit(tmp_path: Path) -> None:
    (tmp_path / "big.txt").write_bytes(b"x" * 101)
    with pytest.raises(DocumentError) as err:
        FolderConnector(tmp_path, max_bytes=100).fetch("big.txt")
    assert err.value.reason == DocumentError.TOO_LARGE


def test_a_missing_folder_is_a_source_error(tmp_path: Path) -> None:
    with pytest.raises(SourceError):
        list(FolderConnector(tmp_path / "nope", max_bytes=1).list())


@pytest.mark.parametrize("key", ["../etc/passwd", "/abs.md", "a/../../b.md", "a\\b.md", "a\x00.md", ""])
def test_unsafe_keys_are_refused(key: str) -> None:
    with pytest.raises(DocumentError) as err:
        check_key(key)
    assert err.value.reason == DocumentError.UNSAFE_KEY


def _s3(endpoint: str):
    return s3_client(endpoint_url=endpoint, region="us-east-1", access_key_id="test", secret_access_key="test")


def test_s3_lists_and_fetches_below_a_prefix(s3_server: str) -> None:
    client = _s3(s3_server)
    client.create_bucket(Bucket="kb-list")
    client.put_object(Bucket="kb-list", Key="docs/a.md", Body=b"# A")
    client.put_object(Bucket="kb-list", Key="docs/sub/b.md", Body=b"# B")
    client.put_object(Bucket="kb-list", Key="other/c.md", Body=b"# C")
    conn = S3Connector(client, "s3://kb-list/docs", max_bytes=1000)
    refs = {r.key: r for r in conn.list()}
    assert set(refs) == {"a.md", "sub/b.md"}
    assert refs["a.md"].etag and refs["a.md"].size == 3
    assert conn.fetch("sub/b.md") == b"# B"
    with pytest.raises(DocumentError) as err:
        conn.fetch("gone.md")
    assert err.value.reason == DocumentError.VANISHED


def test_s3_unreachable_bucket_is_a_source_error(s3_server: str) -> None:
    conn = S3Connector(_s3(s3_server), "s3://no-such-bucket/x", max_bytes=10)
    with pytest.raises(SourceError):
        list(conn.list())


def test_the_client_uses_the_configured_endpoint_with_path_style(s3_server: str) -> None:
    client = _s3(s3_server)
    assert client.meta.endpoint_url == s3_server
    assert client.meta.config.s3["addressing_style"] == "path"
