"""Every operation of the OpenAPI spec, fuzzed by schemathesis against a real ``freshindex serve``: no 5xx.

The server has a synced knowledge base, an API key made by ``freshindex keys create`` (in the operator
group, so ``/v1/sources`` is reached past its 403) and a webhook secret; each request carries the key.
Schemathesis generates valid and invalid input (negative mode: wrong types, missing fields, odd
strings such as lone surrogates); examples per operation are bounded so the suite stays short. Rate
limits are off on this server (their own tests are in test_limits.py) so every example reaches its route.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode

from tests.api.served import Served, cli, create_key, serve_env, serving
from tests.conftest import EXAMPLES

EXAMPLES_PER_OPERATION = 30


@pytest.fixture(scope="module")
def fuzz_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Served, dict[str, str]]]:
    import shutil

    tmp = tmp_path_factory.mktemp("fuzz")
    shutil.copytree(EXAMPLES / "kb", tmp / "kb")
    env = serve_env(tmp, FRESHINDEX_API__RATE_LIMIT_BURST="0", FRESHINDEX_AUTH__ADMIN_GROUP="ops",
                    FRESHINDEX_WEBHOOKS__SECRETS='{"docs": "s3cret"}')
    cli(env, "sources", "add", "docs", "--kind", "folder", "--location", str(tmp / "kb"))
    cli(env, "sync", "docs")
    key = create_key(env, "fuzzer", "ops", "eng")
    with serving(env, tmp) as served:
        yield served, {"Authorization": f"Bearer {key}"}


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_no_operation_answers_a_server_error(fuzz_server: tuple[Served, dict[str, str]], mode: GenerationMode) -> None:
    served, auth = fuzz_server
    schema = schemathesis.openapi.from_url(served.url + "/openapi.json")
    failures: list[str] = []
    fuzzed: set[str] = set()
    for result in schema.get_all_operations():
        operation = result.ok()

        @given(case=operation.as_strategy(generation_mode=mode))
        @settings(max_examples=EXAMPLES_PER_OPERATION, deadline=None, derandomize=True, database=None,
                  suppress_health_check=list(HealthCheck), phases=[Phase.explicit, Phase.generate])
        def call(case: Any) -> None:
            response = case.call(base_url=served.url, headers=auth, timeout=30)
            assert response.status_code < 500, (f"{case.method.upper()} {case.formatted_path} -> "
                                                f"{response.status_code}: {response.text[:300]}\n"
                                                f"{case.as_curl_command()}")

        try:
            call()
        except Unsatisfiable:  # negative mode: nothing to get wrong (no body, only free-form string parameters)
            assert mode == GenerationMode.NEGATIVE, operation.label
            continue
        except AssertionError as exc:
            failures.append(str(exc))
        fuzzed.add(operation.label)
    # Then no example of any operation was a server error, and the server is still up
    assert not failures, "\n\n".join(failures)
    assert served.proc.poll() is None
    # And every operation of the spec was fuzzed
    spec = schema.raw_schema["paths"]
    operations = {f"{method.upper()} {path}" for path, item in spec.items() for method in item
                  if method in ("get", "post", "put", "delete", "patch")}
    if mode == GenerationMode.POSITIVE:
        assert len(operations) >= 12 and operations == fuzzed, sorted(operations ^ fuzzed)
    else:  # at least every operation with a body or a typed parameter
        assert {"POST /v1/query", "PUT /v1/sources/{source_id}/policy", "GET /v1/sources/{source_id}/runs",
                "DELETE /v1/sources/{source_id}"} <= fuzzed, sorted(fuzzed)
