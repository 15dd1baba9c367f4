"""The connector registry: a new source kind is one module plus one registration.

Given a toy kind (objects held in memory) registered from this test and
nothing else, when a source of that kind is added through the CLI and
synced, then its documents are indexed, their provenance URI is the one its
spec names, and an unknown kind is an error wherever it is used (no guessed
``file://`` URI).  The built-in kinds keep the hooks their specs declare.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from freshindex.cli import cli
from freshindex.core.errors import ConfigError, DocumentError
from freshindex.core.ids import document_id
from freshindex.core.types import ObjectRef
from freshindex.services import Services
from freshindex.settings import load_settings
from freshindex.workers import connectors
from freshindex.workers.connectors import ConnectorEnv, ConnectorOption, ConnectorSpec, register, unregister
from freshindex.workers.provenance import source_uri
from freshindex.workers.runner import sync_inline

#: The toy source: ``mem://<shelf>`` names one of these dicts of key -> text.
SHELVES: dict[str, dict[str, str]] = {}


class MemoryConnector:
    def __init__(self, shelf: str) -> None:
        self.shelf = shelf

    def list(self) -> Iterator[ObjectRef]:
        for key, text in sorted(SHELVES[self.shelf].items()):
            yield ObjectRef(key=key, etag=str(hash(text)), size=len(text.encode()))

    def fetch(self, key: str) -> bytes:
        try:
            return SHELVES[self.shelf][key].encode()
        except KeyError:
            raise DocumentError(DocumentError.VANISHED, f"{key} is gone") from None


def _check(location: str, options: Mapping[str, Any]) -> str:
    if not location.startswith("mem://"):
        raise ConfigError(f"a memory location looks like mem://shelf, got {location!r}")
    return location


TOY = ConnectorSpec(
    kind="memory",
    build=lambda source, env: MemoryConnector(source.location.removeprefix("mem://")),
    source_uri=lambda location, key: f"{location}/{key}",
    location_help="mem://shelf",
    check_location=_check,
    options=(ConnectorOption("colour", "a required toy option", required=True),),
)


@pytest.fixture
def toy_kind() -> Iterator[ConnectorSpec]:
    register(TOY)
    SHELVES["handbook"] = {"leave.md": "# Leave\n\nAsk your manager two weeks ahead for any leave over three days.\n",
                           "oncall.md": "# On call\n\nThe on-call engineer answers a page within fifteen minutes.\n"}
    yield TOY
    unregister("memory")
    SHELVES.clear()


def test_a_registered_toy_kind_is_added_by_the_cli_and_synced(toy_kind: ConnectorSpec, tmp_path: Path) -> None:
    runner = CliRunner()
    env = {"FRESHINDEX_DATA_DIR": str(tmp_path / "data"), "FRESHINDEX_EMBEDDING__PROVIDER": "hashing"}
    missing = runner.invoke(cli, ["sources", "add", "hb", "--kind", "memory", "--location", "mem://handbook"], env=env)
    assert missing.exit_code == 2 and "colour" in missing.output  # the spec's required option
    bad = runner.invoke(cli, ["sources", "add", "hb", "--kind", "memory", "--location", "/tmp/x",
                              "--option", "colour=red"], env=env)
    assert bad.exit_code == 2 and "mem://shelf" in bad.output  # the spec's location check
    added = runner.invoke(cli, ["sources", "add", "hb", "--kind", "memory", "--location", "mem://handbook",
                                "--option", "colour=red", "--json"], env=env)
    assert added.exit_code == 0, added.output
    assert json.loads(added.output)["kind"] == "memory"
    kinds = json.loads(runner.invoke(cli, ["sources", "kinds", "--json"], env=env).output)
    assert {"kind": "memory", "location": "mem://shelf",
            "options": [{"name": "colour", "help": "a required toy option", "required": True}]} in kinds

    svc = Services(load_settings(data_dir=tmp_path / "data", embedding={"provider": "hashing"}))
    try:
        report = sync_inline(svc, "hb")
        assert report.run.status == "succeeded", report.errors
        assert report.run.summary["documents"]["added"] == 2
        prov = svc.registry.document_provenance(document_id("hb", "leave.md"))
        assert prov is not None and prov["source_uri"] == "mem://handbook/leave.md"
        SHELVES["handbook"]["oncall.md"] += "Escalate to the incident lead after thirty minutes.\n"
        again = sync_inline(svc, "hb")
        assert again.run.summary["documents"]["modified"] == 1 and again.run.summary["documents"]["unchanged"] == 1
    finally:
        svc.close()


def test_an_unknown_kind_is_an_error_not_a_guess() -> None:
    with pytest.raises(ConfigError, match="unknown source kind 'nfs'"):
        source_uri("nfs", "/mnt/docs", "a.md")
    env = ConnectorEnv(sources=load_settings().sources, data_dir=Path("/nonexistent"))
    with pytest.raises(ConfigError, match=r"known: .*folder.*s3"):
        connectors.build_connector(type("S", (), {"id": "x", "location": "/", "options": {}})(), "nfs", env)
    with pytest.raises(ConfigError, match="already registered"):
        register(ConnectorSpec(kind="folder", build=lambda s, e: None, source_uri=lambda loc, k: k))  # type: ignore[arg-type,return-value]


def test_builtin_kinds_keep_the_hooks_their_specs_declare(tmp_path: Path, s3_server: str) -> None:
    settings = load_settings(data_dir=tmp_path / "data")
    env = ConnectorEnv(sources=settings.sources, data_dir=tmp_path / "conn")
    locations = {"folder": str(tmp_path), "s3": "s3://bucket/prefix"}
    opts = {"s3": {"endpoint_url": s3_server}}
    for kind in ("folder", "s3"):
        spec = connectors.spec_for(kind)
        source = type("S", (), {"id": kind, "location": locations[kind], "options": opts.get(kind, {})})()
        conn = spec.build(source, env)
        assert isinstance(conn, connectors.Connector)
        for hook in spec.hooks:
            assert isinstance(conn, hook), f"{kind} declares {hook.__name__}"
    assert isinstance(connectors.spec_for("s3").build(source, env), connectors.AclTags)
    folder = connectors.spec_for("folder").build(
        type("S", (), {"id": "f", "location": str(tmp_path), "options": {}})(), env)
    assert not isinstance(folder, connectors.AclTags)
