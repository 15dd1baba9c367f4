"""The one boto3 S3 client factory: source connectors and snapshot archives both use it.

Secrets are unwrapped here and nowhere else (``SecretStr.get_secret_value``),
so a client built for a source and one built for the archive from the same
settings block are configured the same way.  boto3 is imported when a
client is built, not with this module: the thin client install has no boto3.

What it does not guarantee: that the credentials work or the endpoint
answers (the first call tells; connectors and archives convert its errors).
"""

from __future__ import annotations

from typing import Any

from pydantic import SecretStr

from freshindex.settings.model import S3Settings


def _secret(value: SecretStr | str | None) -> str | None:
    return value.get_secret_value() if isinstance(value, SecretStr) else value


def s3_client(*, endpoint_url: str | None, region: str, access_key_id: str | None, secret_access_key: str | None,
              path_style: bool = True) -> Any:
    """A boto3 S3 client; botocore retries each call up to 3 times (milliseconds apart)."""
    import boto3
    from botocore.config import Config

    return boto3.client(
        "s3",
        endpoint_url=endpoint_url,
        region_name=region,
        aws_access_key_id=access_key_id,
        aws_secret_access_key=secret_access_key,
        config=Config(s3={"addressing_style": "path" if path_style else "auto"},
                      retries={"max_attempts": 3, "mode": "standard"}),
    )


def s3_client_from(s3: S3Settings | None, *, endpoint_url: str | None = None, region: str | None = None) -> Any:
    """A client configured from an :class:`S3Settings` block (defaults when None).

    ``endpoint_url`` and ``region`` override the block's (a source's own
    options); credentials and addressing always come from the block.
    """
    s3 = s3 or S3Settings()
    return s3_client(
        endpoint_url=endpoint_url or s3.endpoint_url,
        region=region or s3.region,
        access_key_id=_secret(s3.access_key_id),
        secret_access_key=_secret(s3.secret_access_key),
        path_style=s3.path_style,
    )


__all__ = ["s3_client", "s3_client_from"]
