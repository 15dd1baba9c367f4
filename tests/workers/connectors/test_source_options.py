"""A source's options are checked by its kind's model when it is registered.

Given each built-in kind's ``options_model``, when a source is added with an
option its kind does not take, or with a value of the wrong type, then the
registration is refused naming the option (through ``sources add`` too, so
nothing is stored); the options every source takes (patterns, ACL sources,
OCR) and a kind's own are accepted, strings converted as the CLI gives them.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from freshindex.cli import cli
from freshindex.core.errors import ConfigError
from freshindex.registry import Registry
from freshindex.workers.connectors import ConnectorSpec, spec_for


def test_unknown_and_ill_typed_options_are_refused_by_the_kind_model(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"a folder source: unknown option 'colour' \(it takes: .*include"):
        spec_for("folder").validate(str(tmp_path), {"colour": "red"})
    with pytest.raises(ConfigError, match=r"option max_pages='ten': Input should be a valid integer"):
        spec_for("web").validate("https://docs.example.com/", {"max_pages": "ten"})
    with pytest.raises(ConfigError, match="unknown option 'branch'"):
        spec_for("git").validate(str(tmp_path), {"branch": "main"})
    with pytest.raises(ConfigError, match="unknown option 'bucket'"):
        spec_for("s3").validate("s3://b/p", {"bucket": "b"})
    # the options every source takes, and a kind's own, as the CLI stores them
    assert spec_for("git").validate("https://git.example.com/org/docs.git", {"ref": "main", "include": ["*.md"], "acl_sources": "sidecar",
                                             "ocr_page_floor": "0.7", "ocr_language": "eng"}).endswith("docs.git")
    spec_for("web").validate("https://docs.example.com/", {"max_pages": "10", "sitemap": "true"})
    spec_for("s3").validate("s3://b/p", {"endpoint_url": "http://127.0.0.1:9000", "region": "eu-west-1"})
    # a kind registered without a model keeps checking only its required options
    toy = ConnectorSpec(kind="toy", build=lambda s, e: None, source_uri=lambda loc, k: k)  # type: ignore[arg-type,return-value]
    assert toy.validate("anywhere", {"colour": "red"}) == "anywhere"


def test_sources_add_refuses_an_unknown_option_and_stores_nothing(tmp_path: Path) -> None:
    env = {"FRESHINDEX_DATA_DIR": str(tmp_path / "data"), "FRESHINDEX_EMBEDDING__PROVIDER": "hashing"}
    (tmp_path / "kb").mkdir()
    out = CliRunner().invoke(cli, ["sources", "add", "kb", "--kind", "folder", "--location", str(tmp_path / "kb"),
                                   "--option", "max_pages=3"], env=env)
    assert out.exit_code == 2 and "unknown option 'max_pages'" in out.output
    registry = Registry.open(f"sqlite:///{tmp_path / 'data' / 'registry.db'}")
    try:
        assert registry.list_sources() == []
    finally:
        registry.close()


@pytest.mark.parametrize(("given", "read"), [("t", True), ("y", True), ("on", True), ("1", True), ("TRUE", True),
                                             ("f", False), ("no", False), ("0", False), (True, True)])
def test_a_web_sitemap_value_the_model_accepts_is_read_the_same_way(given: object, read: bool) -> None:
    # Given a value of `sitemap` the kind's model accepts, then the crawler reads it as the model did
    spec_for("web").validate("https://docs.example.com/", {"sitemap": given})
    from freshindex.workers.connectors.web_options import WebOptions

    assert WebOptions.of(None, {"sitemap": given}).sitemap is read
    with pytest.raises(ConfigError, match="sitemap must be true or false"):
        WebOptions.of(None, {"sitemap": "maybe"})
