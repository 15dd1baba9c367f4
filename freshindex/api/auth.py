"""Who is calling: identity from the credential (API key, JWT, trusted gateway), never from the request body.

:class:`Authenticator` turns a request's headers and TCP peer address into an
:class:`Identity`, or raises :class:`AuthError` (a 401 or 403 with a reason
from :data:`REASONS`, which is also the ``reason`` label of
``freshindex_auth_failures_total``). :func:`narrow` then applies what the body
asks for: a caller may narrow its groups, never widen them.

Modes (``auth.mode``):

* ``none``: no credential; every caller is anonymous and reads public
  sources only. The legacy ``api.token``, when set, is required and also
  identifies the anonymous principal.
* ``keys``: ``Authorization: Bearer fik_<key_id>_<secret>``, checked against
  the registry on every request (a revoked key fails on the next one).
* ``jwt``: ``Authorization: Bearer <JWT>`` signed by a key of the configured
  JWKS; ``iss``, ``aud``, ``exp`` and ``sub`` are required.
* ``keys+jwt``: either, told apart by the ``fik_`` prefix.
* ``gateway``: identity headers, believed only from a TCP peer inside
  ``auth.trusted_proxies``.

What this does not guarantee: that a bearer credential is used by whom it was
issued to (the tenant it names is enforced: every query filters by it, see
:mod:`acl.principal`); protection of a gateway whose own
network lets others reach the service directly from a trusted address.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from freshindex.acl import PUBLIC, Principal
from freshindex.core.errors import ConfigError
from freshindex.registry.keys import PREFIX, ApiKeyInfo, ApiKeyRejected
from freshindex.settings.model import AuthSettings

log = logging.getLogger("freshindex.api.auth")

ANONYMOUS = "anonymous"

#: Every reason a request is refused (the metric's label values: a fixed set, never request input).
REASONS = (
    "missing_credential", "malformed_credential", "unsupported_credential", "wrong_token",
    "malformed_key", "unknown_key", "wrong_secret", "revoked_key",
    "expired", "bad_signature", "wrong_audience", "wrong_issuer", "unknown_signing_key", "invalid_token",
    "jwks_unavailable", "untrusted_peer", "missing_gateway_user", "principal_mismatch",
)

_FAMILY = {"RS": "RSA", "PS": "RSA", "ES": "EC", "Ed": "OKP"}


@dataclass(frozen=True)
class Identity:
    """An authenticated caller: its principal (id and groups), tenant, and how it proved who it is."""

    principal: Principal
    tenant: str | None = None
    method: str = "anonymous"  # anonymous | token | key | jwt | gateway
    key_id: str | None = None

    @property
    def anonymous(self) -> bool:
        return self.principal.id == ANONYMOUS and not self.principal.groups


class AuthError(Exception):
    """A refused request: ``status`` 401 (who are you?), 403 (not that) or 503 (cannot check now)."""

    def __init__(self, reason: str, *, status: int = 401, detail: str | None = None,
                 public: str | None = None) -> None:
        assert reason in REASONS, reason
        super().__init__(detail or reason)
        self.reason, self.status = reason, status
        # What the caller is told (body and challenge); ``reason`` stays in the metric and the log only.
        self.public = public or reason
        self.detail = detail or self.public.replace("_", " ")

    @property
    def www_authenticate(self) -> str:
        """RFC 6750 challenge; ``error`` only when a credential was presented and refused."""
        if self.reason == "missing_credential":
            return 'Bearer realm="freshindex"'
        return f'Bearer realm="freshindex", error="invalid_token", error_description="{self.public}"'


class ApiKeyVerifier(Protocol):
    """The registry's view the API needs for keys (:class:`registry.keys.KeyStore` satisfies it)."""

    def verify_api_key(self, key: str) -> ApiKeyInfo: ...


def anonymous() -> Identity:
    return Identity(Principal.of(ANONYMOUS))


def narrow(identity: Identity, body_principal: str | None, body_groups: Iterable[str]) -> Principal:
    """The principal a query runs as: the credential's, narrowed by what the body asks.

    Groups: the body's groups intersected with the credential's (no body
    groups = all of the credential's). Principal: a body principal naming
    someone else than the credential is refused (403); an absent one, or
    ``"anonymous"`` (what clients send by default), means "as the
    credential". An anonymous identity ignores the body's principal and
    groups entirely: body-only identity is public at most.
    """
    held = identity.principal.groups
    if identity.anonymous:
        return Principal.of(ANONYMOUS)
    if body_principal not in (None, "", ANONYMOUS, identity.principal.id):
        raise AuthError("principal_mismatch", status=403,
                        detail="the request names a principal other than its credential's")
    asked = {g for g in body_groups if g and g != PUBLIC}
    return Principal.of(identity.principal.id, sorted(asked & held) if asked else sorted(held),
                        tenant=identity.tenant)


class _JwksFile:
    """A JWKS file, parsed once and re-read when its mtime or size changes (key rotation without restart)."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._stamp: tuple[int, int] | None = None
        self._keys: Any = None
        self._lock = threading.Lock()

    def keys(self) -> Any:
        import jwt

        try:
            st = self._path.stat()
        except OSError as exc:
            raise AuthError("jwks_unavailable", status=503, detail=f"JWKS file unreadable: {exc.strerror}") from exc
        with self._lock:
            if self._stamp != (st.st_mtime_ns, st.st_size):
                try:
                    self._keys = jwt.PyJWKSet.from_dict(json.loads(self._path.read_text()))
                except (OSError, ValueError, jwt.PyJWTError) as exc:
                    raise AuthError("jwks_unavailable", status=503, detail="JWKS file unreadable") from exc
                self._stamp = (st.st_mtime_ns, st.st_size)
            return self._keys


class JwtVerifier:
    """Verify a JWT's signature (from a JWKS file or URL), issuer, audience and expiry; read its identity claims."""

    def __init__(self, cfg: AuthSettings) -> None:
        if not cfg.jwt_issuer or not cfg.jwt_audience:
            raise ConfigError("auth: JWT mode needs auth.jwt_issuer and auth.jwt_audience")
        if bool(cfg.jwks_file) == bool(cfg.jwks_url):
            raise ConfigError("auth: JWT mode needs exactly one of auth.jwks_file and auth.jwks_url")
        self._cfg = cfg
        self._file = _JwksFile(cfg.jwks_file) if cfg.jwks_file else None
        self._client: Any = None
        if cfg.jwks_url:
            import jwt

            self._client = jwt.PyJWKClient(cfg.jwks_url, cache_keys=True, lifespan=300, timeout=5)

    def _signing_key(self, token: str, header: Mapping[str, Any]) -> Any:
        import jwt

        if self._client is not None:
            try:
                return self._client.get_signing_key_from_jwt(token)
            except jwt.PyJWKClientConnectionError as exc:
                raise AuthError("jwks_unavailable", status=503, detail="JWKS URL unreachable") from exc
            except jwt.PyJWTError as exc:
                raise AuthError("unknown_signing_key") from exc
        assert self._file is not None
        keys = [k for k in self._file.keys().keys if getattr(k, "public_key_use", None) in (None, "sig")]
        kid = header.get("kid")
        found = [k for k in keys if k.key_id == kid] if kid else (keys if len(keys) == 1 else [])
        if not found:
            raise AuthError("unknown_signing_key")
        return found[0]

    def verify(self, token: str) -> Identity:
        import jwt

        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as exc:
            raise AuthError("malformed_credential") from exc
        alg = header.get("alg")
        if alg not in self._cfg.jwt_algorithms:
            raise AuthError("invalid_token", detail="token algorithm not allowed")
        key = self._signing_key(token, header)
        # The key decides the family: an RS256 header over an EC key, a symmetric ("oct") key, or an alg other
        # than the one the JWK pins, fails. PyJWK infers algorithm_name when the JWK has no "alg", so read the JWK.
        pinned = (getattr(key, "_jwk_data", None) or {}).get("alg")
        if _FAMILY.get(alg[:2]) != key.key_type or (pinned and pinned != alg):
            raise AuthError("invalid_token", detail="token algorithm does not match its key")
        try:
            claims = jwt.decode(token, key.key, algorithms=[alg], audience=self._cfg.jwt_audience,
                                issuer=self._cfg.jwt_issuer, leeway=self._cfg.leeway_s,
                                options={"require": ["exp", "iss", "aud", "sub"]})
        except jwt.ExpiredSignatureError as exc:
            raise AuthError("expired") from exc
        except jwt.InvalidSignatureError as exc:
            raise AuthError("bad_signature") from exc
        except jwt.InvalidAudienceError as exc:
            raise AuthError("wrong_audience") from exc
        except jwt.InvalidIssuerError as exc:
            raise AuthError("wrong_issuer") from exc
        except (jwt.PyJWTError, TypeError, ValueError) as exc:
            raise AuthError("invalid_token") from exc
        sub = claims.get("sub")
        if not isinstance(sub, str) or not sub:
            raise AuthError("invalid_token", detail="token has no usable sub")
        tenant = _claim(claims, self._cfg.tenant_claim)
        return Identity(Principal.of(sub, _groups(_claim(claims, self._cfg.groups_claim))),
                        tenant=str(tenant) if tenant not in (None, "") else None, method="jwt")


def _claim(claims: Mapping[str, Any], path: str) -> Any:
    """``claims[a][b]`` for ``path`` ``a.b`` (an exact top-level name wins over the dotted reading)."""
    if path in claims:
        return claims[path]
    value: Any = claims
    for part in path.split("."):
        if not isinstance(value, Mapping):
            return None
        value = value.get(part)
    return value


def _groups(value: Any) -> list[str]:
    if isinstance(value, str):
        return [g for g in value.replace(",", " ").split() if g]
    if isinstance(value, list | tuple):
        return [g for g in value if isinstance(g, str) and g]
    return []


def peer_trusted(peer: str | None, networks: Iterable[ipaddress.IPv4Network | ipaddress.IPv6Network]) -> bool:
    """Whether the TCP peer address ``peer`` lies in one of ``networks`` (a name, e.g. "testclient", never does)."""
    if not peer:
        return False
    try:
        addr = ipaddress.ip_address(peer)
    except ValueError:
        return False
    return any(addr in net for net in networks)


class Authenticator:
    """Decide a request's :class:`Identity` from its headers and TCP peer, per ``auth.mode``.

    Built once per app; holds no per-request state (API keys are read from
    the registry on every call, JWKS are cached as documented above).
    Raises :class:`core.errors.ConfigError` at construction for an
    inconsistent configuration, so ``freshindex serve`` fails at start.
    """

    def __init__(self, cfg: AuthSettings, keys: ApiKeyVerifier | None, *, static_token: str | None = None,
                 on_failure: Any = None) -> None:
        self._cfg, self._keys, self._token = cfg, keys, static_token
        self._on_failure = on_failure or (lambda reason: None)
        self._jwt = JwtVerifier(cfg) if cfg.mode in ("jwt", "keys+jwt") else None
        self._networks = [ipaddress.ip_network(c, strict=False) for c in cfg.trusted_proxies]
        if cfg.mode == "gateway" and not self._networks:
            raise ConfigError("auth: gateway mode needs auth.trusted_proxies (the gateway's addresses)")
        if cfg.mode in ("keys", "keys+jwt") and keys is None:
            raise ConfigError("auth: key mode needs the registry")

    def authenticate(self, headers: Mapping[str, str], peer: str | None) -> Identity:
        try:
            return self._authenticate(headers, peer)
        except AuthError as exc:
            self._on_failure(exc.reason)
            # Reason, method and peer only: never the credential itself.
            log.info("auth refused: %s", exc.reason,
                     extra={"event": "auth_refused", "reason": exc.reason, "mode": self._cfg.mode, "peer": peer})
            raise

    def refuse(self, exc: AuthError) -> AuthError:
        """Count and log a refusal decided after authentication (e.g. :func:`narrow`'s 403)."""
        self._on_failure(exc.reason)
        log.info("auth refused: %s", exc.reason, extra={"event": "auth_refused", "reason": exc.reason})
        return exc

    def _authenticate(self, headers: Mapping[str, str], peer: str | None) -> Identity:
        mode = self._cfg.mode
        if mode == "gateway":
            return self._gateway(headers, peer)
        bearer = _bearer(headers.get("authorization"))
        if bearer is not None and self._token is not None and _same(bearer, self._token):
            return Identity(Principal.of(ANONYMOUS), method="token")
        if mode == "none":
            if self._token is None:
                return anonymous()
            raise AuthError("missing_credential" if bearer is None else "wrong_token")
        if bearer is None:
            raise AuthError("missing_credential")
        if bearer.startswith(PREFIX):
            if mode not in ("keys", "keys+jwt"):
                raise AuthError("unsupported_credential")
            return self._key(bearer)
        if self._jwt is None:
            raise AuthError("unsupported_credential" if bearer.count(".") == 2 else "malformed_credential")
        return self._jwt.verify(bearer)

    def _key(self, key: str) -> Identity:
        assert self._keys is not None
        try:
            info = self._keys.verify_api_key(key)
        except ApiKeyRejected as exc:
            # One answer for every bad key (malformed, unknown id, wrong secret, revoked): telling them apart
            # would let a caller test whether a key id exists.
            raise AuthError(exc.reason, public="invalid_key") from None
        return Identity(Principal.of(info.principal, info.groups), tenant=info.tenant, method="key",
                        key_id=info.key_id)

    def _gateway(self, headers: Mapping[str, str], peer: str | None) -> Identity:
        if not peer_trusted(peer, self._networks):
            # The headers are not read at all: anyone can send them.
            raise AuthError("untrusted_peer")
        user = (headers.get(self._cfg.gateway_user_header.lower()) or "").strip()
        if not user:
            raise AuthError("missing_gateway_user")
        groups = (headers.get(self._cfg.gateway_groups_header.lower()) or "").split(",")
        tenant = (headers.get(self._cfg.gateway_tenant_header.lower()) or "").strip() or None
        return Identity(Principal.of(user, [g.strip() for g in groups]), tenant=tenant, method="gateway")


def _bearer(value: str | None) -> str | None:
    if not value:
        return None
    scheme, _, credential = value.strip().partition(" ")
    if scheme.lower() != "bearer" or not credential.strip():
        return None
    return credential.strip()


def _same(given: str, expected: str) -> bool:
    import hmac

    return hmac.compare_digest(given.encode(), expected.encode())


def insecure_bind_problem(cfg: AuthSettings, host: str, *, insecure_flag: bool) -> str | None:
    """Why ``freshindex serve`` must not bind ``host`` with this auth configuration (None: it may).

    Refuses a non-loopback address with mode ``none`` unless ``--insecure``
    or ``auth.allow_insecure``. A host name other than ``localhost`` counts
    as non-loopback (it may resolve anywhere).
    """
    if cfg.mode != "none" or insecure_flag or cfg.allow_insecure:
        return None
    try:
        loopback = ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        loopback = host == "localhost"
    if loopback:
        return None
    return (f"refusing to serve on {host} with auth.mode=none: anyone who can reach it is served as anonymous. "
            "Set FRESHINDEX_AUTH__MODE (keys, jwt, keys+jwt or gateway), bind 127.0.0.1, or pass --insecure "
            "(auth.allow_insecure) if a network policy already guards it")
