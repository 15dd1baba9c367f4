"""Settings: environment, nested keys, a TOML file, and redaction."""

from __future__ import annotations

from pathlib import Path

import pytest

from freshindex.core.errors import ConfigError
from freshindex.settings import load_settings, redact_url


def test_defaults_are_the_embedded_mode(tmp_path: Path) -> None:
    s = load_settings(data_dir=tmp_path)
    assert not s.distributed
    assert s.registry_url == f"sqlite:///{(tmp_path / 'registry.db').resolve()}"
    assert s.vector_store.kind == "edge" and s.vector_path == (tmp_path / "vectors").resolve()


def test_environment_with_nested_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FRESHINDEX_BROKER__URL", "redis://:s3cret@127.0.0.1:6379/1")
    monkeypatch.setenv("FRESHINDEX_SOURCES__S3__ENDPOINT_URL", "http://127.0.0.1:9000")
    monkeypatch.setenv("FRESHINDEX_SOURCES__CHUNK_TOKENS", "150")
    s = load_settings()
    assert s.distributed and s.broker.url.get_secret_value().endswith("/1")
    assert s.sources.s3.endpoint_url == "http://127.0.0.1:9000"
    assert s.sources.chunk_tokens == 150


def test_toml_file_is_read_and_environment_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = tmp_path / "freshindex.toml"
    cfg.write_text('default_kb = "handbook"\n[registry]\nurl = "postgresql+psycopg://u:pw@db/fi"\n'
                   '[embedding]\nbatch_size = 8\n')
    monkeypatch.setenv("FRESHINDEX_EMBEDDING__BATCH_SIZE", "16")
    s = load_settings(cfg)
    assert s.default_kb == "handbook"
    assert s.embedding.batch_size == 16
    shown = s.redacted()
    assert shown["registry"]["url"] == "postgresql+psycopg://u:***@db/fi"
    assert shown["config_file"] == str(cfg)


def test_secrets_never_appear_in_the_redacted_view(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FRESHINDEX_API__TOKEN", "tok-123")
    monkeypatch.setenv("FRESHINDEX_SOURCES__S3__SECRET_ACCESS_KEY", "aws-secret")
    monkeypatch.setenv("FRESHINDEX_BROKER__URL", "amqp://guest:guestpw@127.0.0.1:5672//")
    text = str(load_settings().redacted())
    for secret in ("tok-123", "aws-secret", "guestpw"):
        assert secret not in text


def test_bad_values_and_missing_files_are_config_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_settings(tmp_path / "missing.toml")
    monkeypatch.setenv("FRESHINDEX_VECTOR_STORE__KIND", "pinecone")
    with pytest.raises(ConfigError, match="invalid configuration"):
        load_settings()


def test_redact_url_keeps_everything_but_the_password() -> None:
    assert redact_url("redis://user:pw@host:6379/0") == "redis://user:***@host:6379/0"
    assert redact_url("sqlite:////tmp/x.db") == "sqlite:////tmp/x.db"


def test_the_configuration_reference_documents_every_setting() -> None:
    from pydantic import BaseModel

    from freshindex.settings import Settings
    from tests.conftest import ROOT

    def names(model: type[BaseModel], prefix: str = "FRESHINDEX_"):
        for name, field in model.model_fields.items():
            env = prefix + name.upper()
            if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel):
                yield from names(field.annotation, env + "__")
            else:
                yield env

    reference = (ROOT / "docs" / "configuration.md").read_text()
    assert [n for n in names(Settings) if f"`{n}`" not in reference] == []
