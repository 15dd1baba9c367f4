"""ACL sources: static rules, sidecars on disk, S3 tags on a real S3 server, an HTTP permission service."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from freshindex.acl.model import DocumentAcl
from freshindex.acl.resolution import AclResolver, AclRule, AclSourceError, PermissionService, SourceAcl
from freshindex.workers.connectors.folder import FolderConnector
from freshindex.workers.connectors.s3 import S3Connector
from freshindex.workers.document_acl import acl_resolver


def _source(**over: Any) -> SimpleNamespace:
    values = dict(id="docs", acl=("public",), tenant="default", sensitivity="internal", acl_rules=(), options={})
    values.update(over)
    return SimpleNamespace(**values)


def _write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


# -- static rules ---------------------------------------------------------------------------------------------------


def test_static_rules_union_their_groups_and_the_most_specific_sensitivity_wins() -> None:
    rules = ({"glob": "hr/*", "groups": ["hr"], "sensitivity": "confidential"},
             {"glob": "hr/payroll/*", "groups": ["payroll"], "users": ["ana"], "sensitivity": "restricted"},
             {"glob": "*.md", "groups": [], "sensitivity": "public"})
    r = AclResolver(SourceAcl.of(_source(acl_rules=rules, options={"acl_sources": "none"})))
    assert r.resolve("guide.txt") == DocumentAcl(("public",), "default", "internal", "source")
    assert r.resolve("guide.md") == DocumentAcl(("public",), "default", "public", "rule")  # sensitivity only
    hr = r.resolve("hr/policy.txt")
    assert hr.tokens == ("hr",) and hr.sensitivity == "confidential" and hr.origin == "rule"
    pay = r.resolve("hr/payroll/2026.md")
    assert pay.tokens == ("hr", "payroll", "user:ana")
    assert pay.sensitivity == "restricted"  # 'hr/payroll/*' is more specific than 'hr/*' and '*.md'


def test_a_cli_rule_parses_groups_and_users_and_refuses_bad_names() -> None:
    rule = AclRule.parse("legal/**=legal, user:bob")
    assert rule.as_dict() == {"glob": "legal/**", "groups": ["legal"], "users": ["bob"], "sensitivity": None}
    for bad in ("no-equals", "x=bad group", "x=user:a:b", "=hr"):
        with pytest.raises(ValueError):
            AclRule.parse(bad)


def test_an_unknown_acl_source_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown acl_sources"):
        SourceAcl.of(_source(options={"acl_sources": "sidecar,ldap"}))


# -- sidecars on disk -----------------------------------------------------------------------------------------------


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "src"
    _write(root, "top.md", "# Top\n\ntext")
    _write(root, "open/readme.md", "# Open\n\ntext")
    _write(root, "hr/a.md", "# A\n\ntext")
    _write(root, "hr/secret.md", "# Secret\n\ntext")
    _write(root, "hr/deep/b.md", "# B\n\ntext")
    _write(root, ".freshindex-acl.json", json.dumps({"groups": ["staff"]}))
    _write(root, "open/.freshindex-acl.json", json.dumps({"groups": ["public"]}))
    _write(root, "hr/.freshindex-acl.json", json.dumps({"groups": ["hr-managers"], "sensitivity": "confidential"}))
    _write(root, "hr/secret.md.acl.json", json.dumps({"users": ["ana"], "inherit": True, "sensitivity": "restricted"}))
    return root


def test_the_folder_connector_never_lists_a_sidecar_but_remembers_them(tree: Path) -> None:
    conn = FolderConnector(tree, max_bytes=1 << 20)
    keys = sorted(r.key for r in conn.list())
    assert keys == ["hr/a.md", "hr/deep/b.md", "hr/secret.md", "open/readme.md", "top.md"]
    assert conn.sidecar_keys == {".freshindex-acl.json", "open/.freshindex-acl.json", "hr/.freshindex-acl.json",
                                 "hr/secret.md.acl.json"}


@pytest.mark.parametrize("listed", [True, False], ids=["sidecars-from-listing", "sidecars-probed"])
def test_resolution_order_default_rules_folder_sidecars_document_sidecar(tree: Path, listed: bool) -> None:
    conn = FolderConnector(tree, max_bytes=1 << 20)
    list(conn.list())
    source = SourceAcl.of(_source(acl_rules=({"glob": "hr/*", "groups": ["hr"]},)))
    r = acl_resolver(SimpleNamespace(acl_service=None), source, conn,
                     sidecar_keys=conn.sidecar_keys if listed else None)
    assert r.resolve("top.md") == DocumentAcl(("staff",), "default", "internal", "sidecar")
    assert r.resolve("open/readme.md").tokens == ("public",)  # the nearest folder overrides the root's
    a = r.resolve("hr/a.md")  # rule hr < root sidecar staff < hr/ sidecar
    assert a.tokens == ("hr-managers",) and a.sensitivity == "confidential"
    assert r.resolve("hr/deep/b.md").tokens == ("hr-managers",)  # nearest folder sidecar up the tree
    secret = r.resolve("hr/secret.md")  # the document's own sidecar inherits and adds a user
    assert secret.tokens == ("hr-managers", "user:ana") and secret.sensitivity == "restricted"
    # Without the sidecar kind, only the default and the rules count.
    static = AclResolver(SourceAcl.of(_source(acl_rules=({"glob": "hr/*", "groups": ["hr"]},),
                                              options={"acl_sources": "none"})))
    assert static.resolve("hr/a.md").tokens == ("hr",) and static.resolve("top.md").tokens == ("public",)


@pytest.mark.parametrize("body", ["{not json", "[1]", '{"groups": "hr"}', '{"groups": ["bad group"]}',
                                  '{"groups": ["user:ana"]}', '{"sensitivity": "secret"}', '{"gruops": ["x"]}',
                                  '{"inherit": "yes"}', "\xff\xfe"])
def test_a_malformed_sidecar_fails_closed_for_the_documents_it_governs(tmp_path: Path, body: str) -> None:
    _write(tmp_path, "d/doc.md", "# D\n\ntext")
    _write(tmp_path, "other.md", "# O\n\ntext")
    (tmp_path / "d" / ".freshindex-acl.json").write_bytes(body.encode("utf-8", "surrogateescape")
                                                          if body != "\xff\xfe" else b"\xff\xfe")
    conn = FolderConnector(tmp_path, max_bytes=1 << 20)
    list(conn.list())
    r = acl_resolver(SimpleNamespace(acl_service=None), SourceAcl.of(_source()), conn, sidecar_keys=conn.sidecar_keys)
    with pytest.raises(AclSourceError) as err:
        r.resolve("d/doc.md")
    assert err.value.reason == "acl_invalid"
    assert r.resolve("other.md").tokens == ("public",)  # only the governed documents


def test_a_sidecar_linking_outside_the_source_is_not_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside.json"
    outside.write_text(json.dumps({"groups": ["public"]}))
    root = tmp_path / "src"
    _write(root, "doc.md", "# D\n\ntext")
    (root / "doc.md.acl.json").symlink_to(outside)
    conn = FolderConnector(root, max_bytes=1 << 20)
    list(conn.list())
    r = acl_resolver(SimpleNamespace(acl_service=None), SourceAcl.of(_source(acl=("hr",))), conn,
                     sidecar_keys=conn.sidecar_keys)
    with pytest.raises(AclSourceError, match="outside"):
        r.resolve("doc.md")


# -- S3 tags and metadata on a real S3 server -----------------------------------------------------------------------


def _s3(endpoint: str):
    from freshindex.workers.connectors.s3 import s3_client

    return s3_client(endpoint_url=endpoint, region="us-east-1", access_key_id="test", secret_access_key="test")


def test_s3_tags_override_metadata_and_sidecars_and_sidecars_are_not_listed(s3_server: str) -> None:
    client = _s3(s3_server)
    client.create_bucket(Bucket="kb-acl")
    put = client.put_object
    put(Bucket="kb-acl", Key="p/plain.md", Body=b"# P\n\ntext")
    put(Bucket="kb-acl", Key="p/meta.md", Body=b"# M\n\ntext", Metadata={"acl-groups": "finance,audit"})
    put(Bucket="kb-acl", Key="p/both.md", Body=b"# B\n\ntext", Metadata={"acl-groups": "finance"},
        Tagging="acl-groups=legal&acl-users=ana&acl-sensitivity=restricted")
    put(Bucket="kb-acl", Key="p/bad.md", Body=b"# X\n\ntext", Tagging="acl-groups=user:root")
    put(Bucket="kb-acl", Key="p/.freshindex-acl.json", Body=json.dumps({"groups": ["staff"]}).encode())
    put(Bucket="kb-acl", Key="p/plain.md.acl.json", Body=json.dumps({"groups": ["eng"]}).encode())
    conn = S3Connector(client, "s3://kb-acl/p/", max_bytes=1 << 20)
    assert sorted(r.key for r in conn.list()) == ["bad.md", "both.md", "meta.md", "plain.md"]
    assert conn.sidecar_keys == {".freshindex-acl.json", "plain.md.acl.json"}
    source = SourceAcl.of(_source(options={"acl_sources": "sidecar,s3"}))
    r = acl_resolver(SimpleNamespace(acl_service=None), source, conn, sidecar_keys=conn.sidecar_keys)
    assert r.resolve("plain.md") == DocumentAcl(("eng",), "default", "internal", "sidecar")
    assert r.resolve("meta.md") == DocumentAcl(("audit", "finance"), "default", "internal", "s3")
    assert r.resolve("both.md") == DocumentAcl(("legal", "user:ana"), "default", "restricted", "s3")
    with pytest.raises(AclSourceError) as err:
        r.resolve("bad.md")
    assert err.value.reason == "acl_invalid"
    # Sidecars are read from the bucket even without the listing's hint.
    probed = acl_resolver(SimpleNamespace(acl_service=None), SourceAcl.of(_source()), conn)
    assert probed.resolve("plain.md").tokens == ("eng",) and probed.resolve("meta.md").tokens == ("staff",)


def test_s3_tags_that_cannot_be_read_fail_closed(s3_server: str) -> None:
    conn = S3Connector(_s3(s3_server), "s3://no-such-bucket-acl/x/", max_bytes=10)
    r = acl_resolver(SimpleNamespace(acl_service=None), SourceAcl.of(_source(options={"acl_sources": "s3"})), conn)
    with pytest.raises(AclSourceError) as err:
        r.resolve("a.md")
    assert err.value.reason == "acl_unavailable"


# -- the HTTP permission service ------------------------------------------------------------------------------------


class _Service:
    """A real HTTP permission service on a loopback port; counts requests, can be slowed down."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, dict[str, Any], str | None]] = []
        self.delay = 0.0
        self.acls: dict[str, Any] = {}
        self.members: dict[str, Any] = {}
        service = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])) or b"{}")
                service.requests.append((self.path, body, self.headers.get("Authorization")))
                time.sleep(service.delay)
                if self.path == "/acl/members":
                    answer = service.members.get(body.get("principal"))
                else:
                    answer = service.acls.get(f"{body.get('source')}:{body.get('key')}")
                if answer is None:
                    self.send_response(404)
                    self.end_headers()
                    return
                data = answer if isinstance(answer, bytes) else json.dumps(answer).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/acl"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def http_service() -> Iterator[_Service]:
    service = _Service()
    yield service
    service.close()


def test_the_permission_service_answers_are_cached_for_their_ttl(http_service: _Service) -> None:
    http_service.acls["docs:a.md"] = {"groups": ["eng"], "users": ["ana"], "sensitivity": "confidential"}
    http_service.members["ana"] = {"groups": ["eng", "oncall"]}
    now = [1000.0]
    svc = PermissionService(http_service.url, cache_ttl_s=60, token="s3cret", clock=lambda: now[0])
    assert svc.check("docs", "a.md") == DocumentAcl(("eng", "user:ana"), "default", "confidential", "http")
    assert svc.check("docs", "a.md").tokens == ("eng", "user:ana")
    assert svc.groups_of("ana") == frozenset({"eng", "oncall"}) == svc.groups_of("ana")
    assert len(http_service.requests) == 2 and svc.stats.cache_hits == 2  # one request each, then the cache
    assert http_service.requests[0] == ("/acl", {"source": "docs", "key": "a.md"}, "Bearer s3cret")
    assert http_service.requests[1] == ("/acl/members", {"principal": "ana"}, "Bearer s3cret")
    now[0] += 61  # the TTL passed: asked again
    http_service.acls["docs:a.md"] = {"groups": ["eng"]}
    assert svc.check("docs", "a.md").tokens == ("eng",)
    assert len(http_service.requests) == 3
    assert svc.check("docs", "nobody-knows.md") is None  # 404: no opinion, the other layers decide
    svc.close()


def test_the_permission_service_fails_closed_and_counts(http_service: _Service) -> None:
    errors: list[tuple[str, str]] = []
    # A timeout of 1 s: an ordinary answer on a loaded machine comes well within it, a slow one (2.5 s) not
    svc = PermissionService(http_service.url, timeout_s=1.0, on_error=lambda kind, reason: errors.append((kind, reason)))
    http_service.acls["docs:bad.md"] = {"groups": ["user:root"]}
    http_service.acls["docs:junk.md"] = b"<html>"
    http_service.members["eve"] = {"groups": ["bad group"]}
    with pytest.raises(AclSourceError) as err:
        svc.check("docs", "bad.md")
    assert err.value.reason == "acl_invalid"
    with pytest.raises(AclSourceError):
        svc.check("docs", "junk.md")
    assert svc.groups_of("eve") == frozenset()
    http_service.delay = 2.5
    http_service.acls["docs:slow.md"] = {"groups": ["public"]}
    with pytest.raises(AclSourceError) as err:
        svc.check("docs", "slow.md")
    assert err.value.reason == "acl_unavailable"
    http_service.members["slow"] = {"groups": ["admins"]}
    assert svc.groups_of("slow") == frozenset()  # a principal never gains a group because the service is slow
    http_service.delay = 0.0
    with pytest.raises(AclSourceError):
        svc.check("docs", "bad.md")  # failures are not cached
    assert ("check", "timeout") in errors and ("members", "timeout") in errors and ("check", "invalid") in errors
    assert svc.stats.errors["timeout"] == 2
    svc.close()
    dead = PermissionService("http://127.0.0.1:9/acl", timeout_s=0.5)
    with pytest.raises(AclSourceError, match=r"permission service"):
        dead.check("docs", "a.md")


def test_the_service_is_the_last_layer_of_resolution(http_service: _Service, tmp_path: Path) -> None:
    _write(tmp_path, "a.md", "# A\n\ntext")
    _write(tmp_path, "a.md.acl.json", json.dumps({"groups": ["eng"]}))
    http_service.acls["docs:a.md"] = {"groups": ["legal"], "sensitivity": "restricted"}
    conn = FolderConnector(tmp_path, max_bytes=1 << 20)
    list(conn.list())
    svc = PermissionService(http_service.url)
    source = SourceAcl.of(_source(options={"acl_sources": "sidecar,http"}))
    r = acl_resolver(SimpleNamespace(acl_service=svc), source, conn, sidecar_keys=conn.sidecar_keys)
    assert r.resolve("a.md") == DocumentAcl(("legal",), "default", "restricted", "http")
    no_service = acl_resolver(SimpleNamespace(acl_service=None), source, conn, sidecar_keys=conn.sidecar_keys)
    with pytest.raises(AclSourceError, match="service_url"):
        no_service.resolve("a.md")
    svc.close()
