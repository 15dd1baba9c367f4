"""The settings models.

Precedence, highest first: keyword arguments to :func:`load_settings`,
environment variables (``FRESHINDEX_`` prefix, ``__`` between nesting levels,
for example ``FRESHINDEX_REGISTRY__URL``), a ``.env`` file in the working
directory, the TOML config file (``--config`` or ``FRESHINDEX_CONFIG``), then
the defaults of the section models (:mod:`settings.sections`).  The defaults
are the embedded mode: SQLite and an in-process Qdrant Edge store under
``data_dir``, no broker.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

from pydantic import Field, field_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from freshindex.core.errors import ConfigError
from freshindex.settings.sections.context import ContextSettings, QueryBudgetSettings
from freshindex.settings.sections.ingest import EmbeddingSettings, SourcesSettings, WebSettings
from freshindex.settings.sections.pipeline import BrokerSettings, DocumentLineSettings, ScheduleSettings, SyncSettings
from freshindex.settings.sections.service import (
    JWT_ALGORITHMS,
    AclSettings,
    ApiSettings,
    AuditSettings,
    AuthSettings,
    WebhookSettings,
)
from freshindex.settings.sections.stores import (
    CLUSTER_PRESETS,
    QdrantClusterSettings,
    RegistrySettings,
    S3Settings,
    SnapshotSettings,
    VectorStoreSettings,
)

# The section models live in settings/sections/ (one module per group of subsystems); they are
# re-exported here, where ``from freshindex.settings.model import X`` has always found them.
__all__ = [
    "CLUSTER_PRESETS",
    "JWT_ALGORITHMS",
    "AclSettings",
    "ApiSettings",
    "AuditSettings",
    "AuthSettings",
    "BrokerSettings",
    "ContextSettings",
    "DocumentLineSettings",
    "EmbeddingSettings",
    "QdrantClusterSettings",
    "QueryBudgetSettings",
    "RegistrySettings",
    "S3Settings",
    "ScheduleSettings",
    "Settings",
    "SnapshotSettings",
    "SourcesSettings",
    "SyncSettings",
    "VectorStoreSettings",
    "WebSettings",
    "WebhookSettings",
    "load_settings",
    "redact_url",
]


def redact_url(url: str | None) -> str | None:
    """Hide the password of a URL (``redis://:pw@h`` -> ``redis://:***@h``)."""
    if not url:
        return url
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))


class Settings(BaseSettings):
    """Everything freshindex can be told, in one object."""

    model_config = SettingsConfigDict(
        env_prefix="FRESHINDEX_",
        env_nested_delimiter="__",
        env_file=".env",
        extra="ignore",
    )

    data_dir: Path = Field(default=Path(".freshindex"), description="embedded registry, vectors and artifacts")
    default_kb: str = Field(default="default", description="knowledge base a new source joins by default")
    log_level: str = Field(default="INFO", description="log level of worker, serve and beat (other commands: "
                           "warnings, -v for more)")
    log_format: Literal["text", "json"] = Field(default="text", description="json: one object per line, event "
                                                "fields as keys")
    registry: RegistrySettings = RegistrySettings()
    broker: BrokerSettings = BrokerSettings()
    sync: SyncSettings = SyncSettings()
    pipeline: DocumentLineSettings = DocumentLineSettings()
    vector_store: VectorStoreSettings = VectorStoreSettings()
    embedding: EmbeddingSettings = EmbeddingSettings()
    sources: SourcesSettings = SourcesSettings()
    snapshots: SnapshotSettings = SnapshotSettings()
    api: ApiSettings = ApiSettings()
    auth: AuthSettings = AuthSettings()
    webhooks: WebhookSettings = WebhookSettings()
    acl: AclSettings = AclSettings()
    audit: AuditSettings = AuditSettings()
    context: ContextSettings = ContextSettings()
    schedules: ScheduleSettings = ScheduleSettings()

    @field_validator("data_dir")
    @classmethod
    def _expand(cls, value: Path) -> Path:
        return value.expanduser()

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings, dotenv_settings]
        if settings_cls.model_config.get("toml_file"):
            sources.append(TomlConfigSettingsSource(settings_cls))
        sources.append(file_secret_settings)
        return tuple(sources)

    # -- derived values -----------------------------------------------------

    @property
    def registry_url(self) -> str:
        if self.registry.url is not None:
            return self.registry.url.get_secret_value()
        return f"sqlite:///{(self.data_dir / 'registry.db').resolve()}"

    @property
    def vector_path(self) -> Path:
        return (self.vector_store.path or self.data_dir / "vectors").resolve()

    @property
    def distributed(self) -> bool:
        return self.broker.url is not None

    def redacted(self) -> dict[str, Any]:
        """The effective configuration as plain data, secrets hidden."""
        data = self.model_dump(mode="json")
        data["registry"]["url"] = redact_url(self.registry_url)
        if self.broker.url is not None:
            data["broker"]["url"] = redact_url(self.broker.url.get_secret_value())
        if self.broker.result_backend is not None:
            data["broker"]["result_backend"] = redact_url(self.broker.result_backend.get_secret_value())
        data["vector_store"]["path"] = str(self.vector_path)
        toml_file = self.model_config.get("toml_file")
        data["config_file"] = str(toml_file) if toml_file else None
        return data


def load_settings(config_file: str | Path | None = None, *, strict: bool | None = None,
                  on_unknown: Callable[[str], None] | None = None, **overrides: Any) -> Settings:
    """Build the settings once, at process start.

    ``config_file`` (or ``FRESHINDEX_CONFIG``) names an optional TOML file with
    the same nesting as the environment variables (``[registry] url = ...``).
    A ``FRESHINDEX_`` variable or file key no setting takes is passed to
    ``on_unknown`` (default: a log warning) with the closest known name, or
    is a ConfigError when ``strict`` (None: ``FRESHINDEX_STRICT``); see
    :mod:`settings.keys`.
    """
    path = config_file or os.environ.get("FRESHINDEX_CONFIG")
    if path:
        path = Path(path).expanduser()
        if not path.is_file():
            raise ConfigError(f"config file {path} does not exist")
    cls: type[Settings] = Settings
    if path:
        # A subclass carries the file name in its model_config, which is
        # where pydantic-settings' TOML source looks for it.
        cls = type("Settings", (Settings,), {"model_config": {**Settings.model_config, "toml_file": path}})
    from freshindex.settings.keys import check_unknown

    check_unknown(Settings, config_file=Path(path) if path else None, strict=strict, report=on_unknown)
    try:
        return cls(**overrides)
    except ValueError as exc:  # pydantic.ValidationError derives from ValueError
        raise ConfigError(f"invalid configuration: {exc}") from exc
