"""The connector registry: one :class:`ConnectorSpec` per source kind.

Everything that depends on a source's kind reads it from here: the CLI
(``sources add --kind``, its location check, the options a kind takes), the
composition root (``Services.connector_for`` builds connectors through
:func:`build_connector`) and provenance (the URI a citation of the canonical
location shows, :func:`workers.provenance.source_uri`).

A new kind is one module plus one line: the module defines
``SPEC = ConnectorSpec(kind="web", build=..., source_uri=...)`` and its
dotted name goes into :data:`BUILTIN`; or, from code that is not part of
freshindex (a plugin, a test), ``register(ConnectorSpec(kind="web", ...))``.
The built-in modules are imported on first use, never at import of this
module, so the CLI and ``serve`` do not load boto3 to list the kinds.

What it does not do: check that a connector keeps its protocol at run time
(the contract tests do, ``tests/workers/connectors``); options are checked
by the kind's ``options_model`` (:mod:`workers.connectors.options`) when a
source is registered, not at each sync.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from freshindex.core.errors import ConfigError
from freshindex.workers.connectors.options import check_options

if TYPE_CHECKING:
    from pydantic import BaseModel

    from freshindex.core.webhooks import WebhookProvider, WebhookProviders
    from freshindex.settings.model import SourcesSettings
    from freshindex.workers.connectors import Connector

#: Modules whose ``SPEC`` is registered on first use: one line per built-in kind.
BUILTIN: tuple[str, ...] = (
    "freshindex.workers.connectors.folder",
    "freshindex.workers.connectors.s3",
    "freshindex.workers.connectors.git",
    "freshindex.workers.connectors.web",
)


class SourceLike(Protocol):
    """What a factory reads of a registered source (``registry.SourceInfo`` has it)."""

    @property
    def id(self) -> str: ...

    @property
    def location(self) -> str: ...

    @property
    def options(self) -> Mapping[str, Any]: ...


class CursorStore(Protocol):
    """A source's sync cursor in the registry (a git source's last synced commit).

    ``get`` is the position of the last run that finished (succeeded or
    partial); ``set_pending`` records where this listing is, promoted to the
    cursor when the run finishes (see ``registry.sources``).
    """

    def get(self) -> dict[str, Any] | None: ...

    def set_pending(self, value: dict[str, Any]) -> None: ...

    def planned(self, run_id: int) -> dict[str, Any] | None:
        """What run ``run_id``'s listing recorded with :meth:`set_pending`, while that run is open; else None."""
        ...


class StateStore(Protocol):
    """A source's connector state in the registry (``registry.source_state``): a listing cursor, a crawl's
    page validators.

    ``get`` is what the last successful (or partial) run left; ``set_pending`` records, merged into what the
    open run recorded before, what this listing leaves (a key set to None is removed), promoted when the run
    succeeds and dropped when it fails, is held or is killed.
    """

    def get(self) -> dict[str, Any]: ...

    def set_pending(self, value: dict[str, Any]) -> None: ...

    def planned(self, run_id: int) -> dict[str, Any] | None:
        """What run ``run_id`` recorded with :meth:`set_pending`, while it is the pending one; else None."""
        ...


@dataclass(frozen=True)
class ConnectorEnv:
    """What a factory may use besides the source: settings, a folder of its own, its cursor and state."""

    sources: SourcesSettings
    #: A folder the connector may keep files in (a git clone), created by the factory when needed.
    data_dir: Path
    cursor: CursorStore | None = None
    #: State kept between listings, promoted with the run (:mod:`workers.connectors.listing`).
    state: StateStore | None = None

    @property
    def max_bytes(self) -> int:
        return self.sources.max_file_bytes


@dataclass(frozen=True)
class ConnectorOption:
    """One ``--option key=value`` a kind reads."""

    name: str
    help: str
    required: bool = False


@dataclass(frozen=True)
class ConnectorSpec:
    """A source kind: how to build its connector, name its objects and check its location.

    ``build(source, env)`` returns a :class:`~workers.connectors.Connector`;
    ``source_uri(location, key)`` names one object for citations;
    ``check_location(location, options)`` returns the location to store (a
    folder resolved, a URL without credentials) or raises
    :class:`~core.errors.ConfigError`.  ``hooks`` lists the optional
    protocols (:class:`~workers.connectors.AclTags`,
    :class:`~workers.connectors.Sidecars`, ...) its connectors implement, so
    a contract test can hold the connector to them.  ``options_model`` (a
    :class:`~workers.connectors.options.SourceOptions` subclass) is what its
    sources' options must read as: :meth:`validate` refuses any other key or
    an ill-typed value; None (a kind registered without one) checks only the
    required options.  ``webhook_providers`` are the signed webhook endpoints
    the kind brings (:class:`~core.webhooks.WebhookProvider`, served at
    ``/v1/webhooks/<name>/<source>``); ``ref_option`` names the option holding
    the one ref its sources follow (git: ``ref``), so a push to another ref
    syncs nothing.
    """

    kind: str
    build: Callable[[SourceLike, ConnectorEnv], Connector]
    source_uri: Callable[[str, str], str]
    location_help: str = ""
    check_location: Callable[[str, Mapping[str, Any]], str] | None = None
    options: tuple[ConnectorOption, ...] = ()
    hooks: tuple[type, ...] = field(default=())
    options_model: type[BaseModel] | None = None
    webhook_providers: tuple[WebhookProvider, ...] = ()
    ref_option: str | None = None

    def validate(self, location: str, options: Mapping[str, Any]) -> str:
        """The location to store for a new source of this kind; missing, unknown (when the kind declares an
        ``options_model``) or ill-typed options are an error."""
        if self.options_model is not None:
            check_options(self.kind, self.options_model, options)
        missing = [o.name for o in self.options if o.required and not options.get(o.name)]
        if missing:
            raise ConfigError(f"a {self.kind} source needs the option(s) {', '.join(missing)} (--option key=value)")
        return self.check_location(location, options) if self.check_location else location


_SPECS: dict[str, ConnectorSpec] = {}
_lock = threading.Lock()
_loaded = False


#: The webhook provider the API keeps for itself (any kind; api/routes_webhooks.GENERIC).
RESERVED_PROVIDER = "generic"


def register(spec: ConnectorSpec, *, replace: bool = False) -> ConnectorSpec:
    """Add ``spec``; a kind registered twice is an error unless ``replace`` (a test swapping one in)."""
    if not spec.kind or not spec.kind.replace("_", "").isalnum() or spec.kind != spec.kind.lower():
        raise ConfigError(f"source kind {spec.kind!r}: lower-case letters, digits and _ only")
    for p in spec.webhook_providers:  # the API's own provider: a kind must not answer /webhooks/generic/...
        if p.name == RESERVED_PROVIDER:
            raise ConfigError(f"source kind {spec.kind!r}: the webhook provider name {p.name!r} is the API's own")
    with _lock:
        current = _SPECS.get(spec.kind)
        if current is not None and current is not spec and not replace:
            raise ConfigError(f"source kind {spec.kind!r} is already registered")
        _SPECS[spec.kind] = spec
    return spec


def unregister(kind: str) -> None:
    """Remove ``kind`` (tests that registered a toy kind clean up with it)."""
    with _lock:
        _SPECS.pop(kind, None)


def _load_builtin() -> None:
    global _loaded
    if _loaded:
        return
    for name in BUILTIN:
        spec = importlib.import_module(name).SPEC
        if _SPECS.get(spec.kind) is not spec:
            register(spec)
    _loaded = True


def kinds() -> tuple[str, ...]:
    """Every registered kind, sorted."""
    _load_builtin()
    return tuple(sorted(_SPECS))


def spec_for(kind: str) -> ConnectorSpec:
    """The spec of ``kind``; an unknown kind is a :class:`ConfigError` naming the known ones."""
    _load_builtin()
    spec = _SPECS.get(kind)
    if spec is None:
        raise ConfigError(f"unknown source kind {kind!r}; known: {', '.join(sorted(_SPECS))}")
    return spec


def webhook_providers() -> WebhookProviders:
    """Every registered kind's webhook providers by name, and each kind's ``ref_option``.

    Two kinds may list the same provider; two different providers under one name are an error.
    """
    from freshindex.core.webhooks import WebhookProviders

    providers: dict[str, WebhookProvider] = {}
    refs: dict[str, str] = {}
    for kind in kinds():
        spec = spec_for(kind)
        for p in spec.webhook_providers:
            if providers.setdefault(p.name, p) is not p:
                raise ConfigError(f"webhook provider {p.name!r} is declared twice (kind {kind!r} and another)")
        if spec.ref_option:
            refs[kind] = spec.ref_option
    return WebhookProviders(providers, refs)


def build_connector(source: SourceLike, kind: str, env: ConnectorEnv) -> Connector:
    """The connector of ``source`` (of ``kind``), built by its spec's factory."""
    return spec_for(kind).build(source, env)


__all__ = ["BUILTIN", "ConnectorEnv", "ConnectorOption", "ConnectorSpec", "CursorStore", "SourceLike", "StateStore",
           "build_connector", "kinds", "register", "spec_for", "unregister", "webhook_providers"]
