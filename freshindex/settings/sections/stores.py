"""Where state lives: the registry, the vector store (and its cluster layout), snapshots and their archives;
the S3 connection block archives and S3 sources share."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, SecretStr

from freshindex.core.errors import ConfigError


class RegistrySettings(BaseModel):
    """Where the registry (sources, documents, chunks, snapshots) lives."""

    url: SecretStr | None = Field(
        default=None,
        description="SQLAlchemy URL, e.g. postgresql+psycopg://user:pw@host/db; "
        "default: SQLite file registry.db in data_dir",
    )
    auto_migrate: bool = Field(
        default=True,
        description="upgrade the schema on open when it is behind (SQLite only; "
        "PostgreSQL always needs `freshindex db upgrade`)",
    )
    pool_size: int = Field(default=5, ge=1, description="connection pool size per process (PostgreSQL)")


#: Qdrant cluster layout per deployment size (chunks across all knowledge bases), the documented defaults of
#: :class:`QdrantClusterSettings` (docs/operations.md "The layout from settings"); a field set explicitly wins over its preset.
CLUSTER_PRESETS: dict[str, dict[str, Any]] = {
    "1m": dict(shard_number=1, replication_factor=1, write_consistency_factor=1, on_disk_vectors=False,
               on_disk_payload=True, quantization="none", quantization_always_ram=True, rescore=True,
               oversampling=1.0),
    "10m": dict(shard_number=6, replication_factor=2, write_consistency_factor=2, on_disk_vectors=True,
                on_disk_payload=True, quantization="int8", quantization_always_ram=True, rescore=True,
                oversampling=1.5),
    "100m": dict(shard_number=12, replication_factor=2, write_consistency_factor=2, on_disk_vectors=True,
                 on_disk_payload=True, quantization="int8", quantization_always_ram=True, rescore=True,
                 oversampling=2.0),
}


class QdrantClusterSettings(BaseModel):
    """How each collection is laid out on a Qdrant server or cluster (``vector_store.kind=server`` only).

    ``size`` picks a preset from :data:`CLUSTER_PRESETS`; every other field
    left unset takes the preset's value.  Read when a collection is created:
    changing them affects the next full build, not live collections.
    """

    size: Literal["1m", "10m", "100m"] = Field(
        default="1m", description="deployment size the defaults are for: 1m, 10m or 100m chunks")
    shard_number: int | None = Field(default=None, ge=1, description="shards per collection (a multiple of the "
                                     "node count spreads them evenly)")
    replication_factor: int | None = Field(default=None, ge=1, description="copies of each shard")
    write_consistency_factor: int | None = Field(
        default=None, ge=1, description="replicas that must acknowledge a write; equal to replication_factor so "
        "the builder's verification, read right after its writes, sees them on any replica")
    on_disk_vectors: bool | None = Field(default=None, description="original (float) vectors memory-mapped from "
                                         "disk instead of held in RAM")
    on_disk_payload: bool | None = Field(default=None, description="payload on disk (its indexes stay in RAM)")
    quantization: Literal["none", "int8"] | None = Field(default=None, description="scalar quantization of the "
                                                         "dense vector (int8: 4x less RAM)")
    quantization_always_ram: bool | None = Field(default=None, description="keep the quantized vectors in RAM")
    rescore: bool | None = Field(default=None, description="re-score quantized candidates with the original "
                                 "vectors at search time")
    oversampling: float | None = Field(default=None, ge=1.0, description="candidates fetched per result before "
                                       "rescoring (quantized search)")

    def resolved(self) -> dict[str, Any]:
        """The effective layout: the preset of ``size`` with every explicitly set field on top."""
        out = dict(CLUSTER_PRESETS[self.size])
        out.update({k: v for k, v in self.model_dump(exclude={"size"}).items() if v is not None})
        if out["write_consistency_factor"] > out["replication_factor"]:
            raise ConfigError(f"vector_store.cluster.write_consistency_factor {out['write_consistency_factor']} "
                              f"exceeds replication_factor {out['replication_factor']}")
        return out


class VectorStoreSettings(BaseModel):
    """The vector store holding collection versions."""

    kind: Literal["edge", "local", "server"] = Field(
        default="edge",
        description="edge: qdrant-edge-py in-process; local: qdrant-client local mode (tests); server: Qdrant by URL",
    )
    path: Path | None = Field(default=None, description="data folder for edge/local; default data_dir/vectors")
    url: str | None = Field(default=None, description="Qdrant server URL for kind=server")
    api_key: SecretStr | None = Field(default=None, description="Qdrant API key (kind=server)")
    collection_prefix: str = Field(default="fi_", description="prefix of collection and alias names")
    open_timeout: float = Field(default=30.0, description="seconds to wait for an embedded shard held by another process")
    cluster: QdrantClusterSettings = QdrantClusterSettings()
    server_renames: bool = Field(
        default=False,
        description="kind=server/local: each version name is an alias over a neutral physical collection, so "
                    "blue/green builds rename the standby (one alias update) instead of copying the active version",
    )


class S3Settings(BaseModel):
    """An S3 endpoint and its credentials: sources.s3 for S3 sources and SQS, snapshots.s3 for archives."""

    endpoint_url: str | None = Field(default=None, description="e.g. http://127.0.0.1:5000 for a local S3")
    region: str = Field(default="us-east-1", description="S3 region")
    access_key_id: SecretStr | None = Field(default=None, description="S3 access key id; unset = boto3's "
                                            "credential chain")
    secret_access_key: SecretStr | None = Field(default=None, description="S3 secret access key")
    path_style: bool = Field(default=True, description="path-style addressing (bucket in the path, not the host)")


class SnapshotSettings(BaseModel):
    """Collection versions: retention, the writer lock, verification, archives."""

    keep_versions: int = Field(default=3, ge=2, description="built versions kept (never the active one or its parent)")
    lock_ttl: float = Field(default=120.0, gt=0, description="seconds a builder's lease lasts unless renewed")
    lock_wait: float = Field(default=0.0, ge=0, description="seconds a second builder waits for the lock before giving up")
    verify_sample: int = Field(default=64, ge=1, description="points whose payload is compared with the registry")
    strategy: Literal["copy", "bluegreen"] = Field(
        default="bluegreen", description="incremental builds: copy = clone the active version and apply the change; "
        "bluegreen = recycle the oldest retained version and replay the changesets it has not seen (cost follows "
        "the change; see snapshots/bluegreen.py)",
    )
    reader_grace: float = Field(default=5.0, ge=0, description="bluegreen: seconds a build waits for readers to "
                                "close the standby (they do on their next query) before it copies instead")
    archive_uri: str | None = Field(default=None, description="where archives go: s3://bucket/prefix or a local folder")
    presign_seconds: int = Field(default=3600, ge=60, description="lifetime of presigned URLs for server restores")
    s3: S3Settings = S3Settings()
