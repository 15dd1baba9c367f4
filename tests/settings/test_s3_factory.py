"""One S3 client factory for sources and archives: secrets unwrapped once, overrides applied."""

from __future__ import annotations

from freshindex.settings import S3Settings
from freshindex.settings.s3 import s3_client_from


def test_the_factory_unwraps_secrets_and_applies_a_sources_overrides() -> None:
    s3 = S3Settings(endpoint_url="http://127.0.0.1:9", region="eu-west-1", access_key_id="AKIDEXAMPLE",
                    secret_access_key="s3cr3t")
    client = s3_client_from(s3)
    creds = client._request_signer._credentials
    assert (creds.access_key, creds.secret_key) == ("AKIDEXAMPLE", "s3cr3t")
    assert client.meta.endpoint_url == "http://127.0.0.1:9" and client.meta.region_name == "eu-west-1"
    other = s3_client_from(s3, endpoint_url="http://127.0.0.1:10", region="us-west-2")
    assert other.meta.endpoint_url == "http://127.0.0.1:10" and other.meta.region_name == "us-west-2"


def test_no_settings_means_the_defaults() -> None:
    assert s3_client_from(None, endpoint_url="http://127.0.0.1:9").meta.region_name == "us-east-1"
