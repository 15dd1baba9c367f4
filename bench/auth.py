"""The cost of authentication per request, by mode, beside the cost of the query it guards.

Times :meth:`api.auth.Authenticator.authenticate` (what every query request
runs before anything else) for each credential kind: none, an API key (hash
and registry lookup: SQLite here, PostgreSQL with ``--registry``), a JWT
signed RS256 and ES256 (signature, issuer, audience and expiry checked
against a JWKS file), and trusted-gateway headers. Then one whole
``POST /v1/query`` through the ASGI app (hashing embedder, a small built
knowledge base), so the authentication share of a request can be read off
one run.

    python -m bench.auth [--repeat 2000] [--registry postgresql://...]

Writes bench/results/auth.json and bench/results/auth.md.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.report import table, write

ISS, AUD = "https://idp.bench", "freshindex"


def _b64(n: int) -> str:
    raw = n.to_bytes((n.bit_length() + 7) // 8, "big")
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _jwks(rsa_key: Any, ec_key: Any) -> dict[str, Any]:
    rn = rsa_key.public_key().public_numbers()
    en = ec_key.public_key().public_numbers()
    return {"keys": [
        {"kty": "RSA", "kid": "r1", "alg": "RS256", "use": "sig", "n": _b64(rn.n), "e": _b64(rn.e)},
        {"kty": "EC", "kid": "e1", "alg": "ES256", "use": "sig", "crv": "P-256",
         "x": _b64(en.x).rjust(43, "A"), "y": _b64(en.y).rjust(43, "A")},
    ]}


def _timed(fn: Any, repeat: int) -> dict[str, float]:
    for _ in range(min(50, repeat)):
        fn()
    samples = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t) * 1e6)
    samples.sort()
    return {"p50_us": round(statistics.median(samples), 1), "p95_us": round(samples[int(len(samples) * 0.95) - 1], 1),
            "n": repeat}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=2000)
    ap.add_argument("--registry", default=None, help="Registry URL (default: SQLite in a temp dir).")
    args = ap.parse_args()

    import jwt
    from cryptography.hazmat.primitives.asymmetric import ec, rsa
    from fastapi.testclient import TestClient

    from freshindex.api.app import create_app
    from freshindex.api.auth import Authenticator
    from freshindex.services import Services
    from freshindex.settings import load_settings
    from freshindex.workers.runner import sync_inline

    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ec_key = ec.generate_private_key(ec.SECP256R1())
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "jwks.json").write_text(json.dumps(_jwks(rsa_key, ec_key)))
        docs = root / "docs"
        docs.mkdir()
        for i in range(20):
            (docs / f"page{i}.md").write_text(f"# Page {i}\n\nRelease {i} is cut every Tuesday from branch {i}.\n")
        extra: dict[str, Any] = {"registry_url": args.registry} if args.registry else {}
        settings = load_settings(data_dir=root / "data", embedding={"provider": "hashing"},
                                 auth={"mode": "keys+jwt", "jwt_issuer": ISS, "jwt_audience": AUD,
                                       "jwks_file": str(root / "jwks.json")}, **extra)
        svc = Services(settings)
        try:
            svc.registry.add_source("docs", kind="folder", location=str(docs), owner="bench", kb="default",
                                    replace=True)
            sync_inline(svc, "docs")
            key = svc.registry.create_api_key("bench", ["staff"], description="bench").key
            now = int(time.time())
            claims = {"iss": ISS, "aud": AUD, "sub": "carol", "iat": now, "exp": now + 3600, "groups": ["staff"]}
            rs = jwt.encode(claims, rsa_key, algorithm="RS256", headers={"kid": "r1"})
            es = jwt.encode(claims, ec_key, algorithm="ES256", headers={"kid": "e1"})
            keys_auth = Authenticator(settings.auth, svc.registry)
            gw_settings = settings.auth.model_copy(update={"mode": "gateway", "trusted_proxies": ["127.0.0.1/32"]})
            gateway = Authenticator(gw_settings, svc.registry)
            none = Authenticator(settings.auth.model_copy(update={"mode": "none"}), svc.registry)
            cases = {
                "none": lambda: none.authenticate({}, "127.0.0.1"),
                "api key": lambda: keys_auth.authenticate({"authorization": f"Bearer {key}"}, "127.0.0.1"),
                "jwt RS256": lambda: keys_auth.authenticate({"authorization": f"Bearer {rs}"}, "127.0.0.1"),
                "jwt ES256": lambda: keys_auth.authenticate({"authorization": f"Bearer {es}"}, "127.0.0.1"),
                "gateway": lambda: gateway.authenticate(
                    {gw_settings.gateway_user_header.lower(): "carol",
                     gw_settings.gateway_groups_header.lower(): "staff"}, "127.0.0.1"),
            }
            results = {name: _timed(fn, args.repeat) for name, fn in cases.items()}
            with TestClient(create_app(svc)) as http:
                body = {"question": "When is a release cut?"}
                headers = {"Authorization": f"Bearer {key}"}
                assert http.post("/v1/query", json=body, headers=headers).status_code == 200
                query = _timed(lambda: http.post("/v1/query", json=body, headers=headers),
                               max(50, args.repeat // 10))
        finally:
            svc.close()
    registry = "postgresql" if args.registry and args.registry.startswith("postgres") else "sqlite"
    data = {"machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "load": os.getloadavg()},
            "registry": registry, "authenticate": results, "query_with_api_key": query}
    md = [f"# Authentication cost per request ({registry} registry, {args.repeat} calls each)", "",
          f"Machine: {platform.platform()}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}.", ""]
    md += table(["credential", "p50 µs", "p95 µs", "share of a query's p50"], ["l", "r", "r", "r"],
                [[name, r["p50_us"], r["p95_us"], f"{r['p50_us'] / query['p50_us']:.1%}"]
                 for name, r in results.items()])
    md += ["", f"A whole `POST /v1/query` (API key, hashing embedder, 20 pages): p50 {query['p50_us'] / 1000:.2f} ms, "
           f"p95 {query['p95_us'] / 1000:.2f} ms."]
    write("auth", data, md)


if __name__ == "__main__":
    main()
