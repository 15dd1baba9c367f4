"""The HTTP service: the API, its authentication, webhooks, and the ACL sources it consults."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, SecretStr, field_validator

from freshindex.core.errors import ConfigError


class AclSettings(BaseModel):
    """ACL sources outside the registry: the HTTP permission service and its cache."""

    service_url: str | None = Field(
        default=None, description="HTTP permission service: POST {source, key} -> {groups, users, sensitivity}; "
        "POST <url>/members {principal} -> {groups}; unset = no service (a source with acl_sources=http fails closed)",
    )
    service_timeout_s: float = Field(default=2.0, gt=0, description="seconds per permission service request; "
                                     "a timeout fails closed")
    service_token: SecretStr | None = Field(default=None, description="bearer token sent to the permission service")
    cache_ttl_s: float = Field(default=60.0, ge=0, description="seconds a permission service answer (document ACL "
                               "or group membership) is cached in-process; 0 = no cache")
    cache_max_entries: int = Field(default=10000, ge=1, description="answers kept in the in-process cache")
    recheck_ttl_s: float = Field(default=5.0, ge=0, description="seconds the query path keeps a sensitive "
                                 "document's recheck answer, per principal scope (tenant, id, groups) and document")


class AuditSettings(BaseModel):
    """What the audit trails keep beyond the ACL denials: the refusal audit (``freshindex audit refusals``)."""

    record_refusals: bool = Field(default=True, description="record each insufficient-evidence answer (reason, "
                                  "the question's key terms, the sources searched) for `freshindex audit refusals`")
    store_questions: bool = Field(default=False, description="also keep the question text of a refused question "
                                  "(it may hold personal data); off: only its key terms and the sources searched")
    question_max_chars: int = Field(default=500, ge=1, le=4000, description="characters of a refused question kept "
                                    "when store_questions is on (the rest is cut)")
    refusals_retention_s: float = Field(default=30 * 86400, ge=3600, description="seconds a refusal record is "
                                        "kept; older ones of its knowledge base are deleted as new ones are written (at most hourly)")


class ApiSettings(BaseModel):
    """The HTTP API of `freshindex serve`: where it listens and what bounds a request."""

    host: str = Field(default="127.0.0.1", description="`freshindex serve` bind address (a non-loopback one "
                      "needs an auth mode other than none, or --insecure)")
    port: int = Field(default=8080, description="`freshindex serve` port")
    token: SecretStr | None = Field(
        default=None, description="legacy static bearer token accepted on /v1 endpoints (required when auth.mode is none); it identifies the anonymous principal and grants no groups",
    )
    metrics_token: SecretStr | None = Field(
        default=None, description="bearer token GET /metrics requires when set (Prometheus: authorization "
        "credentials_file); unset, /metrics answers anyone who reaches the port. It carries every knowledge "
        "base's figures, so on a deployment shared by tenants set it or keep the port off their network",
    )
    max_check_bytes: int = Field(default=1 << 20, ge=1024, description="largest body POST /v1/citations/check "
                                 "reads (an answer and its packet); larger is 413")
    # Body caps are applied to every route before authentication (api/limits.py); webhooks use
    # webhooks.max_body_bytes.
    max_query_bytes: int = Field(default=64 * 1024, ge=1024, description="largest body POST /v1/query reads; "
                                 "larger is 413, before the credential is checked")
    max_body_bytes: int = Field(default=64 * 1024, ge=1024, description="largest body any other route reads "
                                "(the operator API, GET routes); larger is 413")
    max_in_flight: int = Field(default=64, ge=0, description="requests this process serves at once (probes and "
                               "/metrics excepted); one more is 503 with Retry-After. 0 = no limit")
    rate_limit_burst: int = Field(default=60, ge=0, description="requests one credential (or, unauthenticated, one "
                                  "peer address) may make in a burst; past it 429 with Retry-After. 0 = no limit")
    rate_limit_per_s: float = Field(default=20.0, gt=0, description="sustained requests per second per credential: "
                                    "the burst is a moving window of rate_limit_burst requests over "
                                    "ceil(burst / rate) seconds")


class WebhookSettings(BaseModel):
    """Signed webhooks that trigger syncs (``/v1/webhooks/...``): secrets, limits, coalescing.

    Secrets are per source id; a source without one does not take webhooks
    (404).  ``secrets_file`` is read when ``serve`` starts (an unreadable one
    stops it) and again whenever its modification time, size or inode change,
    looked at every ``secrets_file_check_s`` (``api.routes_webhooks``), so a
    secret is added or revoked without a restart; its entries yield to
    ``secrets`` given here, which only a restart changes.  Secrets are never
    logged or shown.
    """

    secrets: dict[str, SecretStr] = Field(
        default_factory=dict, description="source id -> shared secret (HMAC key, or the GitLab token)",
    )
    secrets_file: Path | None = Field(
        default=None, description="TOML or JSON file mapping source id -> secret, read at start and re-read "
        "when it changes (see secrets_file_check_s); replace it atomically (write, then rename over it)",
    )
    secrets_file_check_s: float = Field(
        default=5.0, ge=0, description="seconds between checks of secrets_file for a change (mtime, size, inode): "
        "a secret added or removed there is in force within this, without a restart; 0 = checked on every request",
    )
    max_body_bytes: int = Field(default=1024 * 1024, ge=1, description="larger request bodies are refused (413)")
    max_skew_s: float = Field(
        default=300.0, gt=0, description="a signed timestamp further than this from now is refused (409)",
    )
    debounce_s: float = Field(
        default=2.0, ge=0, description="events of one source within this many seconds become one sync",
    )
    replay_window_s: float = Field(
        default=86400.0, gt=0, description="delivery ids are remembered this long to refuse replays (409)",
    )
    sqs_queue_url: str | None = Field(
        default=None, description="SQS queue receiving S3 event notifications; `serve` (or `freshindex sqs-poll`) "
        "reads it and feeds the webhook coalescer (endpoint and credentials: sources.s3)",
    )
    sqs_wait_s: int = Field(default=10, ge=0, le=20, description="SQS long-poll wait per receive, seconds")

    def resolved_secrets(self) -> dict[str, str]:
        """Source id -> secret from ``secrets_file`` and ``secrets`` (these win); reads the file now."""
        out: dict[str, str] = {}
        if self.secrets_file is not None:
            import json
            import tomllib

            path = self.secrets_file.expanduser()
            try:
                text = path.read_text()
                data = json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
            except (OSError, ValueError) as exc:  # tomllib.TOMLDecodeError is a ValueError
                raise ConfigError(f"webhooks.secrets_file {path}: {type(exc).__name__}") from exc
            if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
                raise ConfigError(f"webhooks.secrets_file {path}: expected a mapping of source id -> secret")
            out.update({str(k): v for k, v in data.items()})
        out.update({k: v.get_secret_value() for k, v in self.secrets.items()})
        return out


#: Signature algorithms a JWT may use: asymmetric only, so a public JWKS can never verify a token signed
#: with itself as an HMAC secret ("none" and HS* are refused, not merely left out of the default).
JWT_ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA")


class AuthSettings(BaseModel):
    """Who a caller of the ``/v1`` API is: from an API key, a JWT or a trusted gateway, never from the body.

    Checked for consistency when the API is built (``api.auth``), not here,
    so that ``freshindex config show`` still prints a half-written section.
    """

    mode: Literal["none", "keys", "jwt", "keys+jwt", "gateway"] = Field(
        default="none",
        description="none: no credential, every caller is anonymous (public sources only); keys: API keys "
        "(`freshindex keys create`); jwt: JWT bearer tokens; keys+jwt: either; gateway: identity headers from a "
        "trusted proxy",
    )
    jwt_issuer: str | None = Field(default=None, description="required `iss` of a JWT")
    jwt_audience: str | None = Field(default=None, description="required `aud` of a JWT")
    jwks_file: Path | None = Field(default=None, description="JWKS file with the issuer's public keys "
                                   "(re-read when it changes)")
    jwks_url: str | None = Field(default=None, description="JWKS URL of the issuer (fetched and cached)")
    jwt_algorithms: list[str] = Field(default_factory=lambda: ["RS256", "ES256"],
                                      description="signature algorithms accepted (asymmetric only)")
    groups_claim: str = Field(default="groups", description="claim holding the groups (a list or a "
                              "space/comma separated string; dots reach into objects, e.g. realm_access.roles)")
    tenant_claim: str = Field(default="tenant", description="claim holding the tenant")
    leeway_s: float = Field(default=30.0, ge=0, le=600, description="clock skew allowed on exp/nbf/iat, seconds")
    trusted_proxies: list[str] = Field(default_factory=list, description="CIDRs whose TCP peers may assert "
                                       "identity by headers (gateway mode)")
    gateway_user_header: str = Field(default="X-Forwarded-User", description="gateway: the principal id")
    gateway_groups_header: str = Field(default="X-Forwarded-Groups", description="gateway: comma-separated groups")
    gateway_tenant_header: str = Field(default="X-Forwarded-Tenant", description="gateway: the tenant")
    allow_insecure: bool = Field(default=False, description="let `freshindex serve` bind a non-loopback address "
                                 "with mode none (same as --insecure)")
    admin_group: str | None = Field(default=None, description="group whose members may operate sources over HTTP "
                                    "(/v1/sources); unset = the operator API is off (403)")

    @field_validator("jwt_algorithms")
    @classmethod
    def _asymmetric_only(cls, value: list[str]) -> list[str]:
        bad = [a for a in value if a not in JWT_ALGORITHMS]
        if bad or not value:
            raise ValueError(f"jwt_algorithms {bad or value} not allowed: choose from {', '.join(JWT_ALGORITHMS)} "
                             "(never none or HS*)")
        return value

    @field_validator("trusted_proxies")
    @classmethod
    def _cidrs(cls, value: list[str]) -> list[str]:
        import ipaddress

        for cidr in value:
            ipaddress.ip_network(cidr, strict=False)  # ValueError names the bad entry
        return value
