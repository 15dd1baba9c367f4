"""Where snapshot archives live: an S3 prefix (through boto3) or a local folder.

An archive is one tar file ``<kb>/<snapshot id>.tar`` holding the collection
export, the registry rows the snapshot needs, and a manifest; beside it,
``<snapshot id>.manifest.json`` repeats the manifest with the tar's sha256 so a
restore can check what it downloaded before it opens it.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit

from freshindex.core.errors import ConfigError, NotFoundError, StoreError
from freshindex.settings.model import S3Settings
from freshindex.settings.s3 import s3_client_from


class ArchiveTarget(Protocol):
    uri: str

    def put(self, local: Path, name: str) -> str:
        """Store ``local`` as ``name``; returns its URI."""

    def get(self, name: str, dest: Path) -> Path:
        """Fetch ``name`` into ``dest``."""

    def presign(self, name: str, seconds: int) -> str:
        """A URL a Qdrant server can download ``name`` from."""


class LocalTarget:
    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(str(folder).removeprefix("file://")).expanduser().resolve()
        self.uri = str(self.folder)

    def _path(self, name: str) -> Path:
        path = (self.folder / name).resolve()
        if not path.is_relative_to(self.folder):
            raise ConfigError(f"archive name {name!r} escapes {self.folder}")
        return path

    def put(self, local: Path, name: str) -> str:
        dest = self._path(name)
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(dest.name + ".part")
        shutil.copyfile(local, tmp)
        tmp.replace(dest)
        return str(dest)

    def get(self, name: str, dest: Path) -> Path:
        src = self._path(name)
        if not src.exists():
            raise NotFoundError(f"no archive {src}")
        shutil.copyfile(src, dest)
        return dest

    def presign(self, name: str, seconds: int) -> str:
        return self._path(name).as_uri()


class S3Target:
    def __init__(self, client: Any, uri: str) -> None:
        parts = urlsplit(uri)
        self.client, self.bucket = client, parts.netloc
        self.prefix = parts.path.strip("/")
        self.uri = uri

    def _key(self, name: str) -> str:
        if ".." in name.split("/"):
            raise ConfigError(f"archive name {name!r} is not allowed")
        return f"{self.prefix}/{name}" if self.prefix else name

    def put(self, local: Path, name: str) -> str:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            self.client.upload_file(str(local), self.bucket, self._key(name))
        except (BotoCoreError, ClientError) as exc:
            raise StoreError(f"cannot upload {name} to s3://{self.bucket}: {exc}") from exc
        return f"s3://{self.bucket}/{self._key(name)}"

    def get(self, name: str, dest: Path) -> Path:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            self.client.download_file(self.bucket, self._key(name), str(dest))
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey"):
                raise NotFoundError(f"no archive s3://{self.bucket}/{self._key(name)}") from exc
            raise StoreError(f"cannot download {name}: {exc}") from exc
        except BotoCoreError as exc:
            raise StoreError(f"cannot download {name}: {exc}") from exc
        return dest

    def presign(self, name: str, seconds: int) -> str:
        return self.client.generate_presigned_url(
            "get_object", Params={"Bucket": self.bucket, "Key": self._key(name)}, ExpiresIn=seconds
        )


def open_target(uri: str | None, s3: S3Settings | Callable[[], Any] | None = None) -> ArchiveTarget:
    """The archive target for ``uri`` (``s3://bucket/prefix`` or a folder).

    ``s3`` is the snapshots' S3 settings block (the client comes from
    :func:`settings.s3.s3_client_from`, the factory source connectors use
    too), or a function returning a ready client (tests).
    """
    if not uri:
        raise ConfigError("no archive location: set FRESHINDEX_SNAPSHOTS__ARCHIVE_URI (s3://bucket/prefix or a folder)")
    if uri.startswith("s3://"):
        if s3 is None:
            raise ConfigError("an s3:// archive location needs S3 settings")
        return S3Target(s3() if callable(s3) else s3_client_from(s3), uri)
    return LocalTarget(uri)
