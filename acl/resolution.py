"""Where a document's ACL comes from, and how the layers combine.

Resolution order, each layer overriding the ones before it:

1. the source's default (``sources.acl``, tenant, sensitivity);
2. static rules (``sources.acl_rules``): every rule whose glob matches the
   document key (:func:`fnmatch.fnmatchcase`) contributes; the matching
   rules' groups and users are unioned, and the sensitivity of the most
   specific matching rule (most literal characters in its glob; a tie goes
   to the stricter) wins;
3. folder sidecars ``.freshindex-acl.json``, from the source root down to the
   document's own folder;
4. the document's sidecar ``<name>.acl.json`` beside it;
5. S3 object tags ``acl-groups``/``acl-users``/``acl-sensitivity`` (or the
   metadata ``x-amz-meta-acl-*``; tags win), comma-separated;
6. the HTTP permission service (:class:`PermissionService`).

A sidecar is ``{"groups": [...], "users": [...], "sensitivity": "...",
"inherit": false}``.  A layer that names groups or users replaces the tokens
so far (``"inherit": true``: adds to them); one that only names a
sensitivity changes only that.  Layers 3-6 apply when the source's option
``acl_sources`` lists them (``sidecar``, ``s3``, ``http``; default
``sidecar``; ``none``: the default and static rules only).

Failing closed: a sidecar that cannot be parsed, a tag that names an invalid
group, a permission service that errs or times out raise
:class:`AclSourceError`; the caller keeps the document's previous ACL (or
does not index it) and never serves it wider.

This module reads through callables it is given (``read``, ``tags``) and
imports no connector: the workers pass their connector's methods in.
"""

from __future__ import annotations

import fnmatch
import json
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from freshindex.acl.model import (
    DOCUMENT_SIDECAR_SUFFIX,
    FOLDER_SIDECAR,
    AclError,
    DocumentAcl,
    Sensitivity,
    normalise_acl,
    sensitivity,
    split_names,
)
from freshindex.core.errors import SourceError

#: ACL source kinds a source may enable with its ``acl_sources`` option.
ACL_SOURCE_KINDS = ("sidecar", "s3", "http")
DEFAULT_ACL_SOURCES = ("sidecar",)

#: A sidecar larger than this is invalid (a permission file is a few lines).
MAX_SIDECAR_BYTES = 64 * 1024
#: A permission service answer larger than this is refused.
MAX_SERVICE_BYTES = 1024 * 1024


class AclSourceError(Exception):
    """An ACL source could not say who may read a document; the document must not be served wider.

    ``reason`` is ``acl_invalid`` (malformed sidecar, invalid names) or
    ``acl_unavailable`` (the source or the service could not be reached).
    """

    INVALID = "acl_invalid"
    UNAVAILABLE = "acl_unavailable"

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason, self.detail = reason, detail


@dataclass(frozen=True)
class AclRule:
    """A static rule: documents whose key matches ``glob`` may be read by ``groups`` and ``users``."""

    glob: str
    groups: tuple[str, ...] = ()
    users: tuple[str, ...] = ()
    sensitivity: str | None = None

    @classmethod
    def of(cls, glob: str, groups: Iterable[str] = (), users: Iterable[str] = (),
           sensitivity_: str | None = None) -> AclRule:
        """A validated rule (:class:`acl.model.AclError` when a name or the sensitivity is bad)."""
        if not isinstance(glob, str) or not glob.strip() or len(glob) > 1024:
            raise AclError(f"invalid rule glob {glob!r}")
        groups, users = split_names(groups), split_names(users)
        normalise_acl(groups, users)  # validates
        sens = sensitivity(sensitivity_).value if sensitivity_ else None
        return cls(glob.strip(), tuple(sorted(set(groups))), tuple(sorted(set(users))), sens)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> AclRule:
        if not isinstance(d, Mapping) or "glob" not in d:
            raise AclError(f"a rule needs a glob: {d!r}")
        return cls.of(d["glob"], d.get("groups") or (), d.get("users") or (), d.get("sensitivity"))

    @classmethod
    def parse(cls, text: str) -> AclRule:
        """``'GLOB=GROUPS'`` as the CLI takes it (``'hr/**=hr,legal'``; ``user:ana`` adds a user)."""
        if "=" not in text:
            raise AclError(f"{text!r} is not GLOB=GROUPS")
        glob, names = text.rsplit("=", 1)
        groups, users = [], []
        for name in split_names(names):
            if name.startswith("user:"):
                users.append(name[len("user:"):])
            else:
                groups.append(name)
        return cls.of(glob, groups, users)

    def as_dict(self) -> dict[str, Any]:
        return {"glob": self.glob, "groups": list(self.groups), "users": list(self.users),
                "sensitivity": self.sensitivity}

    @property
    def tokens(self) -> tuple[str, ...]:
        return normalise_acl(self.groups, self.users)

    @property
    def specificity(self) -> int:
        return sum(1 for c in self.glob if c not in "*?[]")

    def matches(self, key: str) -> bool:
        return fnmatch.fnmatchcase(key, self.glob)


@dataclass(frozen=True)
class Layer:
    """One ACL source's say about a document: tokens (None: no say), sensitivity (None: no say)."""

    origin: str
    tokens: tuple[str, ...] | None = None
    sensitivity: str | None = None
    inherit: bool = False


def parse_sidecar(data: bytes, *, where: str) -> Layer:
    """A sidecar's JSON as a :class:`Layer`, or :class:`AclSourceError` (``acl_invalid``) saying what is wrong."""
    if len(data) > MAX_SIDECAR_BYTES:
        raise AclSourceError(AclSourceError.INVALID, f"{where}: larger than {MAX_SIDECAR_BYTES} bytes")
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise AclSourceError(AclSourceError.INVALID, f"{where}: not JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise AclSourceError(AclSourceError.INVALID, f"{where}: expected an object")
    unknown = set(doc) - {"groups", "users", "sensitivity", "inherit"}
    if unknown:
        raise AclSourceError(AclSourceError.INVALID, f"{where}: unknown field(s) {sorted(unknown)}")
    inherit = doc.get("inherit", False)
    if not isinstance(inherit, bool):
        raise AclSourceError(AclSourceError.INVALID, f"{where}: inherit must be true or false")
    try:
        tokens = None
        if "groups" in doc or "users" in doc:
            for name in ("groups", "users"):
                if not isinstance(doc.get(name, []), list):
                    raise AclError(f"{name} must be a list")
            tokens = normalise_acl(split_names(doc.get("groups") or []), split_names(doc.get("users") or []))
        sens = sensitivity(doc["sensitivity"]).value if doc.get("sensitivity") is not None else None
    except AclError as exc:
        raise AclSourceError(AclSourceError.INVALID, f"{where}: {exc}") from None
    return Layer("sidecar", tokens, sens, inherit)


def tag_layer(tags: Mapping[str, str], *, where: str) -> Layer | None:
    """S3 tags/metadata (``acl-groups``, ``acl-users``, ``acl-sensitivity``) as a layer; None when none is set."""
    lowered = {str(k).lower(): str(v) for k, v in tags.items()}
    groups, users, sens = lowered.get("acl-groups"), lowered.get("acl-users"), lowered.get("acl-sensitivity")
    if groups is None and users is None and sens is None:
        return None
    try:
        tokens = None
        if groups is not None or users is not None:
            tokens = normalise_acl(split_names(groups), split_names(users))
        return Layer("s3", tokens, sensitivity(sens).value if sens else None)
    except AclError as exc:
        raise AclSourceError(AclSourceError.INVALID, f"{where}: {exc}") from None


@dataclass(frozen=True)
class SourceAcl:
    """What resolution needs of a registered source (``registry.SourceInfo`` has it all)."""

    source_id: str
    tokens: tuple[str, ...]
    tenant: str = "default"
    sensitivity: str = Sensitivity.INTERNAL
    rules: tuple[AclRule, ...] = ()
    kinds: frozenset[str] = frozenset(DEFAULT_ACL_SOURCES)

    @classmethod
    def of(cls, source: Any) -> SourceAcl:
        """From a ``SourceInfo``: its acl, tenant, sensitivity, rules and ``options["acl_sources"]``."""
        options = dict(getattr(source, "options", None) or {})
        value = str(options.get("acl_sources") or ",".join(DEFAULT_ACL_SOURCES))
        kinds = frozenset() if value.strip().lower() == "none" else frozenset(k.lower() for k in split_names(value))
        unknown = kinds - set(ACL_SOURCE_KINDS)
        if unknown:
            raise AclError(f"source {source.id}: unknown acl_sources {sorted(unknown)}; known: {ACL_SOURCE_KINDS}")
        return cls(
            source_id=source.id, tokens=tuple(sorted(getattr(source, "acl", ()) or ())),
            tenant=getattr(source, "tenant", "default") or "default",
            sensitivity=getattr(source, "sensitivity", Sensitivity.INTERNAL) or Sensitivity.INTERNAL,
            rules=tuple(AclRule.from_dict(r) for r in (getattr(source, "acl_rules", ()) or ())), kinds=kinds,
        )

    @property
    def static_only(self) -> bool:
        """Whether the source default and rules decide every document (no file, tag or service)."""
        return not self.kinds


def _apply(acl: DocumentAcl, layer: Layer | None) -> DocumentAcl:
    if layer is None:
        return acl
    tokens, origin = acl.tokens, acl.origin
    if layer.tokens is not None:
        tokens = tuple(sorted(set(tokens) | set(layer.tokens))) if layer.inherit else layer.tokens
        origin = layer.origin
    sens = acl.sensitivity
    if layer.sensitivity is not None:
        sens, origin = layer.sensitivity, layer.origin
    return DocumentAcl(tokens, acl.tenant, sens, origin)


def rules_layer(rules: Iterable[AclRule], key: str) -> Layer | None:
    """The static rules matching ``key``, combined (None when none matches)."""
    matching = [r for r in rules if r.matches(key)]
    if not matching:
        return None
    named = [r for r in matching if r.groups or r.users]
    tokens = tuple(sorted({t for r in named for t in r.tokens})) if named else None
    with_sens = [(r, Sensitivity(r.sensitivity)) for r in matching if r.sensitivity]
    sens = None
    if with_sens:
        best, _ = max(with_sens, key=lambda rs: (rs[0].specificity, rs[1].rank))
        sens = best.sensitivity
    return Layer("rule", tokens, sens)


def folder_sidecar_keys(key: str) -> list[str]:
    """Folder sidecar keys governing ``key``, from the source root down to its own folder."""
    parts = key.split("/")[:-1]
    return [("/".join(parts[:i]) + "/" if i else "") + FOLDER_SIDECAR for i in range(len(parts) + 1)]


def document_sidecar_key(key: str) -> str:
    return key + DOCUMENT_SIDECAR_SUFFIX


#: Reads of a sidecar that failed as unavailable (an outage) in a row before a resolver stops asking for it for
#: UNAVAILABLE_PAUSE_S seconds (then it reads it again): a passing failure fails a few documents, not a run's rest,
#: and an outage costs a read per pause, not one per document.
UNAVAILABLE_READS = 3
UNAVAILABLE_PAUSE_S = 10.0


class AclResolver:
    """Resolve the effective :class:`acl.model.DocumentAcl` of a source's documents.

    ``read(key)`` returns a sidecar's bytes or None when it does not exist
    (any other failure should raise); with ``sidecar_keys`` (the sidecars a
    listing saw) only those are read.  Parsed sidecars are cached for the
    resolver's life: make one per sync (or per document task), not per
    process.  ``tags(key)`` returns an object's S3 tags and ``acl-*``
    metadata.  What it does not guarantee: that a sidecar did not change
    between the listing and the read.
    """

    def __init__(
        self,
        source: SourceAcl,
        *,
        read: Callable[[str], bytes | None] | None = None,
        sidecar_keys: Iterable[str] | None = None,
        tags: Callable[[str], Mapping[str, str]] | None = None,
        service: PermissionService | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.source = source
        self._clock = clock
        self._read = read
        self._known = set(sidecar_keys) if sidecar_keys is not None else None
        self._tags = tags
        self._service = service
        self._sidecars: dict[str, Layer | AclSourceError | None] = {}
        self._failed: dict[str, int] = {}  # unavailable reads of a sidecar in a row
        self._paused: dict[str, float] = {}  # a sidecar kept unavailable until then (clock seconds)

    def default(self) -> DocumentAcl:
        s = self.source
        return DocumentAcl(s.tokens, s.tenant, str(s.sensitivity), "source")

    def resolve_static(self, key: str) -> DocumentAcl:
        """Source default and static rules only (what ``sources update`` can recompute without the source)."""
        return _apply(self.default(), rules_layer(self.source.rules, key))

    def resolve(self, key: str) -> DocumentAcl:
        """Every enabled layer, in order; :class:`AclSourceError` when one cannot be trusted."""
        acl = self.resolve_static(key)
        kinds = self.source.kinds
        if "sidecar" in kinds and self._read is not None:
            for sidecar in [*folder_sidecar_keys(key), document_sidecar_key(key)]:
                acl = _apply(acl, self._sidecar(sidecar))
        if "s3" in kinds and self._tags is not None:
            try:
                tags = self._tags(key)
            except AclSourceError:
                raise
            except Exception as exc:  # the connector's error, whatever it is: fail closed
                raise AclSourceError(AclSourceError.UNAVAILABLE, f"cannot read the tags of {key}: {exc}") from exc
            acl = _apply(acl, tag_layer(tags or {}, where=f"tags of {key}"))
        if "http" in kinds:
            if self._service is None:
                raise AclSourceError(AclSourceError.UNAVAILABLE, "acl_sources has http but acl.service_url is unset")
            answer = self._service.check(self.source.source_id, key)
            if answer is not None:
                acl = _apply(acl, Layer("http", answer.tokens, answer.sensitivity))
        return acl

    def _sidecar(self, key: str) -> Layer | None:
        if key in self._sidecars:
            found = self._sidecars[key]
        elif key in self._paused and self._clock() < self._paused[key]:
            found = AclSourceError(AclSourceError.UNAVAILABLE, f"cannot read {key}: it failed "
                                   f"{UNAVAILABLE_READS} times in a row; read again in at most {UNAVAILABLE_PAUSE_S:g} s")
        else:
            found = self._load(key)
            unavailable = isinstance(found, AclSourceError) and found.reason == AclSourceError.UNAVAILABLE
            if not unavailable:  # a layer, none, or a malformed sidecar: kept for the resolver's life
                self._sidecars[key] = found
                self._failed.pop(key, None)
            # An outage is read again by the next documents, UNAVAILABLE_READS in a row, then paused a while.
            elif (failed := self._failed.get(key, 0) + 1) >= UNAVAILABLE_READS:
                self._paused[key], self._failed[key] = self._clock() + UNAVAILABLE_PAUSE_S, 0
            else:
                self._failed[key] = failed
        if isinstance(found, AclSourceError):
            # A new error each time: one kept and raised again and again would grow a traceback holding every
            # document's frames (their bytes and parses) for the resolver's life.
            raise AclSourceError(found.reason, found.detail)
        return found

    def _load(self, key: str) -> Layer | AclSourceError | None:
        if self._known is not None and key not in self._known:
            return None
        assert self._read is not None
        try:
            data = self._read(key)
        except AclSourceError as exc:
            return exc
        except SourceError as exc:  # the endpoint, not the file: fail closed, retried next sync
            return AclSourceError(AclSourceError.UNAVAILABLE, f"cannot read {key}: {exc}")
        except Exception as exc:  # unreadable, a link outside the root: fail closed
            return AclSourceError(AclSourceError.INVALID, f"cannot read {key}: {exc}")
        if data is None:
            return None
        try:
            return parse_sidecar(data, where=key)
        except AclSourceError as exc:
            return exc


class _TtlCache:
    """A bounded, thread-safe in-process cache with a time to live (oldest entries evicted first)."""

    def __init__(self, ttl_s: float, max_entries: int, clock: Callable[[], float]) -> None:
        self.ttl_s, self.max_entries, self._clock = ttl_s, max_entries, clock
        self._data: OrderedDict[Any, tuple[float, Any]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Any) -> tuple[bool, Any]:
        with self._lock:
            hit = self._data.get(key)
            if hit is None:
                return False, None
            if hit[0] <= self._clock():
                del self._data[key]
                return False, None
            self._data.move_to_end(key)
            return True, hit[1]

    def put(self, key: Any, value: Any) -> None:
        if self.ttl_s <= 0:
            return
        with self._lock:
            self._data[key] = (self._clock() + self.ttl_s, value)
            self._data.move_to_end(key)
            while len(self._data) > self.max_entries:
                self._data.popitem(last=False)


@dataclass
class ServiceStats:
    """Counters of a :class:`PermissionService` (the caller exports them as metrics)."""

    requests: int = 0
    cache_hits: int = 0
    errors: dict[str, int] = field(default_factory=dict)


class PermissionService:
    """An HTTP permission service: who may read a document, which groups a principal has.

    * ``check(source_id, key)``: ``POST <url>`` ``{"source", "key"}`` ->
      ``{"groups": [...], "users": [...], "sensitivity": ...}`` as a
      :class:`acl.model.DocumentAcl` (origin ``http``); 404 means "no opinion"
      (None); anything else that is not a valid answer, a timeout or a
      connection error raises :class:`AclSourceError`.
    * ``groups_of(principal_id)``: ``POST <url>/members`` ``{"principal"}`` ->
      ``{"groups": [...]}``; on any failure it returns no groups (fail
      closed: a principal never gains a group because the service was down)
      and counts the error.

    Answers are cached for ``cache_ttl_s`` (keyed by the request; at most
    ``max_entries``); failures are never cached.  ``on_error(kind, reason)``
    is called for every failure (the workers count it as a metric).  Pass
    ``http`` (an ``httpx.Client``) to share a pool or to test with a mock
    transport.  What it does not guarantee: that a cached answer is still the
    service's answer (at most ``cache_ttl_s`` old).
    """

    def __init__(
        self,
        url: str,
        *,
        timeout_s: float = 2.0,
        cache_ttl_s: float = 60.0,
        token: str | None = None,
        max_entries: int = 10_000,
        http: Any = None,
        clock: Callable[[], float] = time.monotonic,
        on_error: Callable[[str, str], None] | None = None,
    ) -> None:
        import httpx

        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = http or httpx.Client(timeout=timeout_s, headers=headers, follow_redirects=False)
        self._headers = headers if http is not None else {}
        self._cache = _TtlCache(cache_ttl_s, max_entries, clock)
        self._on_error = on_error
        self.stats = ServiceStats()

    def close(self) -> None:
        self._http.close()

    def _fail(self, kind: str, reason: str, detail: str) -> AclSourceError:
        self.stats.errors[reason] = self.stats.errors.get(reason, 0) + 1
        if self._on_error is not None:
            self._on_error(kind, reason)
        return AclSourceError(AclSourceError.UNAVAILABLE if reason != "invalid" else AclSourceError.INVALID,
                              f"permission service {kind}: {detail}")

    def _post(self, kind: str, url: str, body: dict[str, str]) -> tuple[int, Any]:
        import httpx

        self.stats.requests += 1
        try:
            resp = self._http.post(url, json=body, headers=self._headers, timeout=self.timeout_s)
        except httpx.TimeoutException as exc:
            raise self._fail(kind, "timeout", f"no answer within {self.timeout_s} s ({exc})") from exc
        except httpx.HTTPError as exc:
            raise self._fail(kind, "unreachable", str(exc)) from exc
        if resp.status_code == 404:
            return 404, None
        if resp.status_code != 200:
            raise self._fail(kind, "status", f"HTTP {resp.status_code}")
        if len(resp.content) > MAX_SERVICE_BYTES:
            raise self._fail(kind, "invalid", f"answer larger than {MAX_SERVICE_BYTES} bytes")
        try:
            return 200, resp.json()
        except ValueError as exc:
            raise self._fail(kind, "invalid", f"answer is not JSON ({exc})") from None

    def check(self, source_id: str, key: str) -> DocumentAcl | None:
        cache_key = ("check", source_id, key)
        hit, value = self._cache.get(cache_key)
        if hit:
            self.stats.cache_hits += 1
            return value
        status, doc = self._post("check", self.url, {"source": source_id, "key": key})
        if status == 404:
            result = None
        else:
            if not isinstance(doc, dict):
                raise self._fail("check", "invalid", "answer is not an object")
            try:
                groups, users = doc.get("groups") or [], doc.get("users") or []
                if not isinstance(groups, list) or not isinstance(users, list):
                    raise AclError("groups and users must be lists")
                tokens = normalise_acl(split_names(groups), split_names(users))
                sens = sensitivity(doc.get("sensitivity")).value
            except AclError as exc:
                raise self._fail("check", "invalid", str(exc)) from None
            result = DocumentAcl(tokens, "default", sens, "http")
        self._cache.put(cache_key, result)
        return result

    def groups_of(self, principal_id: str) -> frozenset[str]:
        cache_key = ("members", principal_id)
        hit, value = self._cache.get(cache_key)
        if hit:
            self.stats.cache_hits += 1
            return value
        try:
            status, doc = self._post("members", self.url + "/members", {"principal": principal_id})
            groups = [] if status == 404 else doc.get("groups") if isinstance(doc, dict) else None
            if not isinstance(groups, list):
                raise self._fail("members", "invalid", "answer has no groups list")
            try:
                result = frozenset(normalise_acl(split_names(groups)))
            except AclError as exc:
                raise self._fail("members", "invalid", str(exc)) from None
        except AclSourceError:
            return frozenset()  # fail closed: no group is granted while the service cannot say
        self._cache.put(cache_key, result)
        return result


def service_from(settings: Any, *, on_error: Callable[[str, str], None] | None = None) -> PermissionService | None:
    """A :class:`PermissionService` from the ``acl`` settings block, or None when no URL is set."""
    if settings is None or not getattr(settings, "service_url", None):
        return None
    token = settings.service_token.get_secret_value() if getattr(settings, "service_token", None) else None
    return PermissionService(settings.service_url, timeout_s=settings.service_timeout_s,
                             cache_ttl_s=settings.cache_ttl_s, token=token,
                             max_entries=getattr(settings, "cache_max_entries", 10_000), on_error=on_error)


__all__ = [
    "ACL_SOURCE_KINDS", "DEFAULT_ACL_SOURCES", "AclResolver", "AclRule", "AclSourceError", "Layer",
    "PermissionService", "ServiceStats", "SourceAcl", "document_sidecar_key", "folder_sidecar_keys",
    "parse_sidecar", "rules_layer", "service_from", "tag_layer",
]
