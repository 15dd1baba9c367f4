"""Configuration: one pydantic model per subsystem, composed into :class:`Settings`.

Build it once at process start with :func:`load_settings` and pass the pieces
down; nothing in freshindex reads the environment at import time.
"""

from freshindex.settings.model import (
    AclSettings,
    ApiSettings,
    AuthSettings,
    BrokerSettings,
    ContextSettings,
    EmbeddingSettings,
    RegistrySettings,
    S3Settings,
    Settings,
    SnapshotSettings,
    SourcesSettings,
    VectorStoreSettings,
    WebhookSettings,
    load_settings,
    redact_url,
)

__all__ = [
    "AclSettings",
    "ApiSettings",
    "AuthSettings",
    "BrokerSettings",
    "ContextSettings",
    "EmbeddingSettings",
    "RegistrySettings",
    "S3Settings",
    "Settings",
    "SnapshotSettings",
    "SourcesSettings",
    "VectorStoreSettings",
    "WebhookSettings",
    "load_settings",
    "redact_url",
]
