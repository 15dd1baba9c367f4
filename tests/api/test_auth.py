"""Identity from the credential, never from the body: API keys, JWTs, a trusted gateway, and `serve`'s refusal.

Real HTTP through FastAPI's TestClient over a real synced knowledge base
(a public source and an ``hr``-only source), real keys in the registry, and
real RSA/EC keys (``cryptography``) published in a JWKS file.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from fastapi.testclient import TestClient

from freshindex.acl import Principal
from freshindex.api.app import create_app
from freshindex.api.auth import Identity, insecure_bind_problem, narrow
from freshindex.registry.records import SourceSetup
from freshindex.services import Services
from freshindex.settings import load_settings
from freshindex.settings.model import AuthSettings
from freshindex.workers.runner import sync_inline
from tests.conftest import ROOT

ISS, AUD = "https://idp.test", "freshindex"
HR_TEXT = "Salary bands for every engineering level are reviewed each March by the compensation committee."
HR_QUESTION = "When are salary bands reviewed?"


def _jwk(public_key: Any, kid: str, alg: str) -> dict[str, Any]:
    algo = jwt.algorithms.RSAAlgorithm if alg.startswith("RS") else jwt.algorithms.ECAlgorithm
    return {**json.loads(algo.to_jwk(public_key)), "kid": kid, "use": "sig", "alg": alg}


@pytest.fixture(scope="module")
def signing_keys() -> dict[str, Any]:
    return {"rsa": rsa.generate_private_key(public_exponent=65537, key_size=2048),
            "ec": ec.generate_private_key(ec.SECP256R1()),
            "stranger": rsa.generate_private_key(public_exponent=65537, key_size=2048)}


@pytest.fixture(scope="module")
def kb(tmp_path_factory: pytest.TempPathFactory, signing_keys: dict[str, Any]) -> dict[str, Path]:
    """A data dir with one built snapshot of kb ``default``: a public source and an hr-only one; and a JWKS file."""
    root = tmp_path_factory.mktemp("auth")
    pub, hr = root / "pub", root / "hr"
    pub.mkdir()
    hr.mkdir()
    (pub / "release.md").write_text("# Releases\n\nReleases are cut every Tuesday from the main branch.\n")
    (hr / "salaries.md").write_text(f"# Compensation\n\n{HR_TEXT}\n")
    svc = Services(load_settings(data_dir=root / "data", embedding={"provider": "hashing"}))
    try:
        svc.registry.add_source("pub", kind="folder", location=str(pub), owner="t", kb="default")
        svc.registry.add_source("hr", kind="folder", location=str(hr), owner="t", kb="default",
                                setup=SourceSetup(acl=["hr"]))
        sync_inline(svc, "pub")
        assert sync_inline(svc, "hr").build_status == "built"
    finally:
        svc.close()
    jwks = root / "jwks.json"
    jwks.write_text(json.dumps({"keys": [_jwk(signing_keys["rsa"].public_key(), "r1", "RS256"),
                                         _jwk(signing_keys["ec"].public_key(), "e1", "ES256")]}))
    return {"data": root / "data", "jwks": jwks}


def _app(kb: dict[str, Path], client: tuple[str, int] = ("testclient", 50000), **auth: Any) -> Iterator[Any]:
    settings = load_settings(data_dir=kb["data"], embedding={"provider": "hashing"},
                             auth={"jwt_issuer": ISS, "jwt_audience": AUD, "jwks_file": str(kb["jwks"]), **auth})
    svc = Services(settings)
    try:
        with TestClient(create_app(svc), client=client) as http:
            yield http, svc
    finally:
        svc.close()


@pytest.fixture
def keys_api(kb: dict[str, Path]) -> Iterator[Any]:
    yield from _app(kb, mode="keys+jwt")


def _keys_of(http: Any) -> list[str]:
    return [e["key"] for e in http.json()["evidence"]]


def _ask(http: Any, token: str | None, **body: Any) -> Any:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return http.post("/v1/query", json={"question": HR_QUESTION, **body}, headers=headers)


def _token(key: Any, kid: str, alg: str = "RS256", **claims: Any) -> str:
    now = int(time.time())
    payload = {"iss": ISS, "aud": AUD, "sub": "carol", "iat": now, "exp": now + 300, "groups": ["hr"], **claims}
    return jwt.encode(payload, key, algorithm=alg, headers={"kid": kid})


def test_a_forged_body_gains_nothing_and_a_key_bound_to_hr_reads_hr(keys_api: Any) -> None:
    http, svc = keys_api
    # Given a key bound to eng and one bound to hr
    eng = svc.registry.create_api_key("bob", ["eng"], description="test").key
    hr = svc.registry.create_api_key("hana", ["hr"]).key
    # When the eng key's request claims hr in its body
    forged = _ask(http, eng, groups=["hr"])
    # Then the hr document is not served (the body narrows, never widens)
    assert forged.status_code == 200 and "salaries.md" not in _keys_of(forged)
    # and the hr key is served it
    granted = _ask(http, hr)
    assert granted.status_code == 200 and _keys_of(granted)[0] == "salaries.md"
    # and the hr key narrowing itself to eng loses it
    assert "salaries.md" not in _keys_of(_ask(http, hr, groups=["eng"]))
    # and a body principal other than the key's is refused
    assert _ask(http, hr, principal="bob").status_code == 403
    assert _ask(http, hr, principal="hana").status_code == 200
    assert svc.metrics.value("freshindex_auth_failures_total", reason="principal_mismatch") == 1


def test_no_credential_or_an_unknown_key_is_401_with_a_challenge(keys_api: Any) -> None:
    http, svc = keys_api
    missing = _ask(http, None, principal="hana", groups=["hr"])
    assert missing.status_code == 401 and missing.headers["WWW-Authenticate"].startswith("Bearer")
    real = svc.registry.create_api_key("hana", ["hr"]).key
    wrong_secret = real[: real.rindex("_") + 1] + "x" * 43
    assert _ask(http, wrong_secret).status_code == 401
    assert _ask(http, "fik_0123456789abcdef_nope").status_code == 401
    assert 'error="invalid_token"' in _ask(http, "fik_garbage").headers["WWW-Authenticate"]
    for reason in ("missing_credential", "wrong_secret", "unknown_key", "malformed_key"):
        assert svc.metrics.value("freshindex_auth_failures_total", reason=reason) == 1, reason
    # the health and snapshot endpoints take the same credential
    assert http.get("/v1/snapshots").status_code == 401
    assert http.get("/v1/snapshots", headers={"Authorization": f"Bearer {real}"}).status_code == 200


def test_a_revoked_key_is_401_on_the_next_request(keys_api: Any) -> None:
    http, svc = keys_api
    new = svc.registry.create_api_key("hana", ["hr"])
    assert _ask(http, new.key).status_code == 200
    assert svc.registry.list_api_keys()[-1].last_used_at is not None
    svc.registry.revoke_api_key(new.info.key_id)
    refused = _ask(http, new.key)
    # the reason is in the metric only: the answer is the one every bad key gets (test_limits.py)
    assert refused.status_code == 401 and "invalid_key" in refused.headers["WWW-Authenticate"]
    assert svc.metrics.value("freshindex_auth_failures_total", reason="revoked_key") == 1


def test_a_valid_jwt_grants_its_groups_claim(keys_api: Any, signing_keys: dict[str, Any]) -> None:
    http, _ = keys_api
    rsa_hr = _ask(http, _token(signing_keys["rsa"], "r1"))
    assert rsa_hr.status_code == 200 and _keys_of(rsa_hr)[0] == "salaries.md"
    ec_hr = _ask(http, _token(signing_keys["ec"], "e1", alg="ES256", groups="hr ops"))
    assert ec_hr.status_code == 200 and _keys_of(ec_hr)[0] == "salaries.md"
    eng = _ask(http, _token(signing_keys["rsa"], "r1", groups=["eng"]), groups=["hr"])
    assert eng.status_code == 200 and "salaries.md" not in _keys_of(eng)


@pytest.mark.parametrize(("reason", "make"), [
    ("expired", lambda k: _token(k["rsa"], "r1", exp=int(time.time()) - 3600, iat=int(time.time()) - 7200)),
    ("bad_signature", lambda k: _token(k["stranger"], "r1")),
    ("wrong_audience", lambda k: _token(k["rsa"], "r1", aud="someone-else")),
    ("wrong_issuer", lambda k: _token(k["rsa"], "r1", iss="https://evil.test")),
    ("unknown_signing_key", lambda k: _token(k["stranger"], "nope")),
    ("invalid_token", lambda k: _token(k["rsa"], "e1")),  # an RS256 token naming the EC key
    ("invalid_token", lambda k: jwt.encode({"iss": ISS, "aud": AUD, "sub": "x", "exp": int(time.time()) + 60,
                                            "groups": ["hr"]}, "secret-secret-secret-secret-32b!", algorithm="HS256",
                                           headers={"kid": "r1"})),
])
def test_a_bad_jwt_is_401(keys_api: Any, signing_keys: dict[str, Any], reason: str, make: Any) -> None:
    http, svc = keys_api
    r = _ask(http, make(signing_keys))
    assert r.status_code == 401 and f'error_description="{reason}"' in r.headers["WWW-Authenticate"]
    assert svc.metrics.value("freshindex_auth_failures_total", reason=reason) == 1
    assert "salaries" not in r.text


def test_gateway_headers_count_only_from_a_trusted_peer(kb: dict[str, Path]) -> None:
    headers = {"X-Forwarded-User": "hana", "X-Forwarded-Groups": "hr, ops"}
    body = {"question": HR_QUESTION}
    for http, _svc in _app(kb, client=("10.0.0.5", 123), mode="gateway", trusted_proxies=["10.0.0.0/24"]):
        trusted = http.post("/v1/query", json=body, headers=headers)
        assert trusted.status_code == 200 and _keys_of(trusted)[0] == "salaries.md"
        # The gateway's tenant header is believed too: tenant acme has no documents here
        other = http.post("/v1/query", json=body, headers={**headers, "X-Forwarded-Tenant": "acme"})
        assert other.status_code == 200 and other.json()["insufficient_evidence"]
        assert http.post("/v1/query", json=body).status_code == 401  # trusted peer, no user header
    for http, svc in _app(kb, client=("10.9.0.5", 123), mode="gateway", trusted_proxies=["10.0.0.0/24"]):
        r = http.post("/v1/query", json=body, headers=headers)
        assert r.status_code == 401 and "untrusted_peer" in r.headers["WWW-Authenticate"]
        assert svc.metrics.value("freshindex_auth_failures_total", reason="untrusted_peer") == 1


def test_mode_none_is_anonymous_and_a_legacy_token_claims_no_groups(kb: dict[str, Path]) -> None:
    for http, _ in _app(kb):
        r = http.post("/v1/query", json={"question": HR_QUESTION, "principal": "hana", "groups": ["hr"]})
        assert r.status_code == 200 and "salaries.md" not in _keys_of(r)
    settings = load_settings(data_dir=kb["data"], embedding={"provider": "hashing"}, api={"token": "t0ken"})
    svc = Services(settings)
    try:
        with TestClient(create_app(svc)) as http:
            assert http.post("/v1/query", json={"question": HR_QUESTION}).status_code == 401
            r = http.post("/v1/query", json={"question": HR_QUESTION, "groups": ["hr"]},
                          headers={"Authorization": "Bearer t0ken"})
            assert r.status_code == 200 and "salaries.md" not in _keys_of(r)
    finally:
        svc.close()


def test_narrow_intersects_and_anonymous_ignores_the_body() -> None:
    bob = Identity(Principal.of("bob", ["eng", "ops"]), method="key")
    assert narrow(bob, None, ["ops", "hr"]) == Principal.of("bob", ["ops"])
    assert narrow(bob, "anonymous", []) == Principal.of("bob", ["eng", "ops"])
    assert narrow(Identity(Principal.of("anonymous")), "bob", ["hr"]) == Principal.of("anonymous")


def test_insecure_bind_is_refused_only_for_mode_none_off_loopback() -> None:
    none = AuthSettings()
    assert insecure_bind_problem(none, "127.0.0.1", insecure_flag=False) is None
    assert insecure_bind_problem(none, "::1", insecure_flag=False) is None
    assert insecure_bind_problem(none, "0.0.0.0", insecure_flag=False)
    assert insecure_bind_problem(none, "0.0.0.0", insecure_flag=True) is None
    assert insecure_bind_problem(AuthSettings(allow_insecure=True), "0.0.0.0", insecure_flag=False) is None
    assert insecure_bind_problem(AuthSettings(mode="keys"), "0.0.0.0", insecure_flag=False) is None


def test_serve_on_all_interfaces_without_auth_exits_with_the_reason(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FRESHINDEX_")}
    env["FRESHINDEX_DATA_DIR"] = str(tmp_path / "data")
    out = subprocess.run([sys.executable, "-m", "freshindex", "serve", "--host", "0.0.0.0", "--port", "1"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2, out.stderr
    assert "refusing to serve on 0.0.0.0 with auth.mode=none" in out.stderr and "--insecure" in out.stderr


def test_keys_cli_prints_the_key_once_and_never_lists_it(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FRESHINDEX_")}
    env["FRESHINDEX_DATA_DIR"] = str(tmp_path / "data")

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "freshindex", "keys", *args], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=60, check=True)

    created = json.loads(cli("create", "hana", "--group", "hr", "--group", "ops", "--tenant", "acme",
                             "--json").stdout)
    assert created["key"].startswith(f"fik_{created['key_id']}_") and created["groups"] == ["hr", "ops"]
    secret = created["key"][len(f"fik_{created['key_id']}_"):]
    listed = cli("list", "--json").stdout
    assert json.loads(listed)[0]["key_id"] == created["key_id"] and secret not in listed
    assert "revoked" in cli("revoke", created["key_id"]).stdout
    assert json.loads(cli("list", "--json").stdout)[0]["revoked_at"] is not None
    assert json.loads(cli("list", "--active", "--json").stdout) == []
