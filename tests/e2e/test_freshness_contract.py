"""The distributed freshness contract (tests/e2e/freshness_contract.py) for every connector kind.

Folder, S3 (the local moto server over HTTP), git (a local repository, a
commit per change) and web (a local static HTTP server on 127.0.0.1, its
pages named by a sitemap) each run the same three syncs through the same
long-lived workers: one ``freshindex worker --pool solo`` per queue on Redis,
with PostgreSQL as the registry and stage queues on.  Each class says only
how its source is made and changed; a new connector kind adds a class here
(or in a module of its own) the same way.

What this module does not test: anything a kind does beyond the contract
(its own rules are in tests/workers/connectors/).
"""

from __future__ import annotations

import uuid

import pytest

from bench.docsite import DocSite, serve
from bench.git_history import git
from tests.e2e.freshness_contract import Fact, FileTree, FreshnessContract, Where

pytestmark = [pytest.mark.services, pytest.mark.slow]


class TestFolderFreshness(FileTree, FreshnessContract):
    kind = "folder"

    def create(self, where: Where, files: dict[str, bytes]) -> None:
        self.write_tree(where.root, files)

    def source_args(self) -> list[str]:
        return ["--kind", "folder", "--location", str(self.root)]


class TestS3Freshness(FreshnessContract):
    kind = "s3"

    def create(self, where: Where, files: dict[str, bytes]) -> None:
        import boto3

        self.endpoint = where.request.getfixturevalue("s3_server")
        self.s3 = boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1",
                               aws_access_key_id="contract", aws_secret_access_key="contract")
        self.bucket = f"contract-{uuid.uuid4().hex[:8]}"
        self.s3.create_bucket(Bucket=self.bucket)
        for path, data in files.items():
            self.add(path, data)

    def source_args(self) -> list[str]:
        return ["--kind", "s3", "--location", f"s3://{self.bucket}/kb", "--option", f"endpoint_url={self.endpoint}"]

    def edit(self, path: str, data: bytes) -> None:
        self.s3.put_object(Bucket=self.bucket, Key=f"kb/{path}", Body=data)

    def add(self, path: str, data: bytes) -> None:
        self.s3.put_object(Bucket=self.bucket, Key=f"kb/{path}", Body=data)

    def move(self, old: str, new: str) -> None:
        self.s3.copy_object(Bucket=self.bucket, Key=f"kb/{new}", CopySource={"Bucket": self.bucket, "Key": f"kb/{old}"})
        self.s3.delete_object(Bucket=self.bucket, Key=f"kb/{old}")

    def delete(self, path: str) -> None:
        self.s3.delete_object(Bucket=self.bucket, Key=f"kb/{path}")


class TestGitFreshness(FileTree, FreshnessContract):
    """A working repository on ``main``; every publish is a commit, so each sync has a commit of its own to read."""

    kind = "git"

    def create(self, where: Where, files: dict[str, bytes]) -> None:
        self.write_tree(where.root, files)
        git(self.root, "init", "-q", "-b", "main")
        self.publish("first")

    def publish(self, message: str) -> None:
        git(self.root, "add", "-A")
        git(self.root, "commit", "-q", "-m", message)

    def move(self, old: str, new: str) -> None:
        (self.root / new).parent.mkdir(parents=True, exist_ok=True)
        git(self.root, "mv", old, new)

    def source_args(self) -> list[str]:
        return ["--kind", "git", "--location", str(self.root), "--option", "ref=main"]


class TestWebFreshness(FileTree, FreshnessContract):
    """A static site on 127.0.0.1 (ETag, Last-Modified, 304s) whose pages a sitemap names, so only pages count."""

    kind = "web"
    suffix = ".html"

    def create(self, where: Where, files: dict[str, bytes]) -> None:
        self.write_tree(where.root, files)
        self.site = where.stack.enter_context(serve(DocSite(root=where.root, mount="/docs/")))
        self.publish("first")

    def render(self, fact: Fact) -> bytes:
        return (f"<html><head><title>{fact.title}</title></head><body><h1>{fact.title}</h1>"
                f"<p>{fact.sentence}</p></body></html>").encode()

    def publish(self, message: str) -> None:
        pages = sorted(p.relative_to(self.root).as_posix() for p in self.root.rglob("*.html"))
        urls = "".join(f"<url><loc>{self.key(p)}</loc></url>" for p in pages)
        (self.root / "sitemap.xml").write_text(
            f'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{urls}</urlset>')

    def key(self, path: str) -> str:
        return f"{self.site.base}/docs/{path}"

    def source_args(self) -> list[str]:
        return ["--kind", "web", "--location", f"{self.site.base}/docs/sitemap.xml",
                "--option", "rate_limit=1000/second"]


def test_every_built_in_connector_kind_has_a_contract_class() -> None:
    """A built-in kind without a contract class here is a kind nobody proved fresh on distributed workers."""
    import importlib

    from freshindex.workers.connectors.registry import BUILTIN

    built_in = {importlib.import_module(module).SPEC.kind for module in BUILTIN}
    covered = {cls.kind for cls in FreshnessContract.__subclasses__()}
    assert built_in <= covered, f"no freshness contract for {sorted(built_in - covered)}"
