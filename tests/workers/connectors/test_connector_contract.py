"""Every built-in connector kind passes :class:`freshindex.testing.ConnectorContract`.

Folder (a folder under tmp_path), S3 (moto's server over HTTP), git (a local
repository, one commit per change) and web (a local HTTP server serving a
folder, with an index page linking every page).  The rules of each kind
(hidden files, links, prefixes, redirects, robots, ...) stay in its own tests.
"""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from bench.docsite import DocSite, serve
from freshindex.testing import ConnectorContract, MemoryCursor
from freshindex.workers.connectors import Connector
from freshindex.workers.connectors.folder import FolderConnector
from freshindex.workers.connectors.git import GitConnector
from freshindex.workers.connectors.retry import RetryPolicy
from freshindex.workers.connectors.s3 import S3Connector, s3_client
from freshindex.workers.connectors.web import WebConnector
from freshindex.workers.connectors.web_options import WebOptions

MAX = 1 << 20


class TestFolderConnector(ConnectorContract):
    def make_connector(self, tmp_path: Path, cursor: MemoryCursor) -> Connector:
        self.root = tmp_path / "src"
        self.root.mkdir()
        return FolderConnector(self.root, max_bytes=MAX)

    def put(self, name: str, data: bytes) -> None:
        (self.root / name).parent.mkdir(parents=True, exist_ok=True)
        (self.root / name).write_bytes(data)

    def remove(self, name: str) -> None:
        (self.root / name).unlink()


class TestS3Connector(ConnectorContract):
    @pytest.fixture(autouse=True)
    def _endpoint(self, s3_server: str) -> None:
        self.client = s3_client(endpoint_url=s3_server, region="us-east-1", access_key_id="test",
                                secret_access_key="test")

    def make_connector(self, tmp_path: Path, cursor: MemoryCursor) -> Connector:
        self.bucket = f"contract-{uuid.uuid4().hex[:12]}"
        self.client.create_bucket(Bucket=self.bucket)
        self.client.put_object(Bucket=self.bucket, Key="outside.html", Body=b"outside the prefix")
        return S3Connector(self.client, f"s3://{self.bucket}/docs", max_bytes=MAX)

    def put(self, name: str, data: bytes) -> None:
        self.client.put_object(Bucket=self.bucket, Key=f"docs/{name}", Body=data, ContentType="text/html")

    def remove(self, name: str) -> None:
        self.client.delete_object(Bucket=self.bucket, Key=f"docs/{name}")


GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.com", "PATH": "/usr/bin:/bin"}


class TestGitConnector(ConnectorContract):
    def _git(self, *args: str) -> None:
        subprocess.run(["git", "-C", str(self.repo), *args], check=True, capture_output=True, env=GIT_ENV)

    def make_connector(self, tmp_path: Path, cursor: MemoryCursor) -> Connector:
        self.repo = tmp_path / "repo"
        self.repo.mkdir()
        self._git("init", "-q", "-b", "main")
        return GitConnector(str(self.repo), "main", tmp_path / "cache", max_bytes=MAX, cursor=cursor)

    def put(self, name: str, data: bytes) -> None:
        (self.repo / name).parent.mkdir(parents=True, exist_ok=True)
        (self.repo / name).write_bytes(data)
        self._git("add", name)
        self._git("commit", "-qm", f"put {name}")

    def remove(self, name: str) -> None:
        self._git("rm", "-q", name)
        self._git("commit", "-qm", f"remove {name}")


class TestWebConnector(ConnectorContract):
    lists_media_types = True

    @pytest.fixture(autouse=True)
    def _site(self, tmp_path: Path) -> Iterator[None]:
        self.docs = tmp_path / "site" / "docs"
        self.docs.mkdir(parents=True)
        self.pages: list[str] = []
        with ExitStack() as stack:
            self.site = stack.enter_context(serve(DocSite(root=tmp_path / "site")))
            self._index()
            self.extra_keys = frozenset({self.key_of("index.html")})
            yield

    def _index(self) -> None:
        links = "".join(f'<a href="{name}">{name}</a> ' for name in self.pages)
        (self.docs / "index.html").write_text(f"<html><head><title>Index</title></head><body>{links}</body></html>")

    def make_connector(self, tmp_path: Path, cursor: MemoryCursor) -> Connector:
        options = WebOptions.of(None, {"rate_limit": "1000/second"})
        return WebConnector(self.key_of("index.html"), options=options, cursor=cursor,
                            retry=RetryPolicy(retries=1, backoff_s=0.0, backoff_max_s=0.0))

    def key_of(self, name: str) -> str:
        return f"{self.site.base}/docs/{name}"

    def put(self, name: str, data: bytes) -> None:
        (self.docs / name).parent.mkdir(parents=True, exist_ok=True)
        (self.docs / name).write_bytes(data)
        if name not in self.pages:
            self.pages.append(name)
            self._index()

    def remove(self, name: str) -> None:
        (self.docs / name).unlink()
        self.pages.remove(name)
        self._index()
