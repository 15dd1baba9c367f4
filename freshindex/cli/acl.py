"""``freshindex sources update``: change who may read a source without re-embedding anything.

The change lands in the registry at once: the source's ``acl_version``
moves, and every document whose ACL the source default and static rules
decide is re-resolved now (``acl_version`` bumped, a re-tag of its live
chunks staged for the next build), so the query path denies the old points
by ACL version on the very next query.  Documents whose ACL came from a
sidecar, S3 tags or the permission service need a fetch: they are withheld
(denied) until the next sync re-resolves them.  Nothing is embedded.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import click

from freshindex.acl.model import AclError, normalise_acl, sensitivity, split_names, validate_group
from freshindex.acl.resolution import AclResolver, AclRule, SourceAcl
from freshindex.cli.context import CliState
from freshindex.cli.display import escaped
from freshindex.cli.grouped import grouped
from freshindex.cli.support import json_option, require

#: Origins the registry can recompute without reading the source.
STATIC_ORIGINS = (None, "source", "rule")


def parse_rules(texts: Sequence[str]) -> list[dict[str, Any]]:
    """``GLOB=GROUPS`` rules as stored dicts (:class:`click.BadParameter` when one is bad)."""
    try:
        return [AclRule.parse(t).as_dict() for t in texts]
    except AclError as exc:
        raise click.BadParameter(str(exc), param_hint="--acl-rule") from None


def split_tokens(groups: str | None, users: str | None, current: Sequence[str] = ()) -> list[str] | None:
    """The source's new default tokens: ``--acl`` replaces its groups, ``--acl-user`` its users; None: unchanged."""
    if groups is None and users is None:
        return None
    old_users = [t[len("user:"):] for t in current if t.startswith("user:")]
    old_groups = [t for t in current if not t.startswith("user:")]
    try:
        new_groups = [validate_group(g) for g in split_names(groups)] if groups is not None else old_groups
        new_users = split_names(users) if users is not None else old_users
        return list(normalise_acl(new_groups, new_users))
    except AclError as exc:
        raise click.BadParameter(str(exc), param_hint="--acl/--acl-user") from None


def check_tenant(tenant: str) -> str:
    try:
        validate_group(tenant)
    except AclError as exc:
        raise click.BadParameter(str(exc).replace("group name", "tenant"), param_hint="--tenant") from None
    if len(tenant) > 63:
        raise click.BadParameter(f"tenant {tenant!r} is longer than 63 characters", param_hint="--tenant")
    return tenant


def recompute_documents(registry: Any, source_id: str) -> dict[str, Any]:
    """Re-resolve what the registry can of a source's documents' ACLs, now (see the module docstring)."""
    source = registry.get_source(source_id)
    try:
        resolver = AclResolver(SourceAcl.of(source))
    except AclError as exc:
        raise click.UsageError(str(exc)) from None
    acls, withhold = {}, []
    for key, doc in registry.document_acls(source_id).items():
        if doc["origin"] in STATIC_ORIGINS:
            acls[doc["document_id"]] = resolver.resolve_static(key)
        else:
            withhold.append(doc["document_id"])
    applied = registry.apply_document_acls(source_id, acls, withhold=withhold)
    return {"documents_bumped": len(applied.bumped), "documents_withheld": len(applied.withheld),
            "chunks_retagged": applied.retagged_chunks, "changeset_id": applied.changeset_id}


def update_source(registry: Any, source_id: str, *, groups: str | None = None, users: str | None = None,
                  rules: Sequence[str] | None = None, clear_rules: bool = False, tenant: str | None = None,
                  sensitivity_: str | None = None) -> dict[str, Any]:
    """Apply a permission change to a source and its documents; what changed, as a dict."""
    current = registry.get_source(source_id)
    tokens = split_tokens(groups, users, current.acl)
    new_rules = [] if clear_rules else (parse_rules(rules) if rules else None)
    try:
        sens = sensitivity(sensitivity_).value if sensitivity_ is not None else None
    except AclError as exc:
        raise click.BadParameter(str(exc), param_hint="--sensitivity") from None
    if tenant is not None:
        check_tenant(tenant)
    source, changed = registry.update_source_acl(source_id, acl=tokens, rules=new_rules, tenant=tenant,
                                                 sensitivity=sens)
    out: dict[str, Any] = {"source": source_id, "changed": changed, "acl_version": source.acl_version,
                           "acl": list(source.acl), "tenant": source.tenant, "sensitivity": source.sensitivity,
                           "acl_rules": list(source.acl_rules)}
    counts = recompute_documents(registry, source_id) if changed else {
        "documents_bumped": 0, "documents_withheld": 0, "chunks_retagged": 0, "changeset_id": None}
    out.update(counts)
    return out


def _human(d: dict[str, Any]) -> str:
    if not d["changed"]:
        return f"source {d['source']}: nothing changed (acl_version {d['acl_version']})"
    lines = [f"source {d['source']}: acl_version {d['acl_version']}"]
    lines += [f"  {name}: {old} -> {new}" for name, (old, new) in d["changed"].items()]
    lines.append(f"  {d['documents_bumped']} documents' ACL versions bumped now, {d['chunks_retagged']} chunks "
                 "staged for a re-tag (0 embeds; the next sync or `freshindex snapshots build` rewrites them)")
    if d["documents_withheld"]:
        lines.append(f"  {d['documents_withheld']} documents take their ACL from sidecars, tags or the permission "
                     "service: withheld until the next sync re-resolves them")
    return "\n".join(lines)


@dataclass(frozen=True)
class AclChange:
    """The options of ``sources update``, as click parsed them (None: that part of the permissions stays)."""

    groups: str | None
    users: str | None
    rules: tuple[str, ...]
    clear_rules: bool
    tenant: str | None
    sensitivity_: str | None


def register(cli: click.Group) -> None:
    """Add ``update`` to the ``sources`` group of ``cli``."""
    sources = cli.commands["sources"]
    assert isinstance(sources, click.Group)

    @sources.command("update")
    @click.argument("source_id")
    @click.option("--acl", "groups", default=None, help="Comma-separated groups that may read it (replaces its groups).")
    @click.option("--acl-user", "users", default=None, help="Comma-separated user ids that may read it (replaces its users).")
    @click.option("--acl-rule", "rules", multiple=True,
                  help="Static rule 'GLOB=GROUPS' (repeatable; replaces the rules; user:ID names a user).")
    @click.option("--no-rules", "clear_rules", is_flag=True, help="Remove every static rule.")
    @click.option("--tenant", default=None, help="Tenant of its documents.")
    @click.option("--sensitivity", "sensitivity_", default=None,
                  type=click.Choice(["public", "internal", "confidential", "restricted"]))
    @json_option
    @click.pass_obj
    @grouped(AclChange, "change")
    def sources_update(state: CliState, source_id: str, change: AclChange, as_json: bool) -> None:
        """Change who may read SOURCE_ID, without re-embedding; takes effect on the next query."""
        import json

        require(state, source=source_id)
        data = update_source(state.services.registry, source_id, groups=change.groups, users=change.users,
                             rules=change.rules, clear_rules=change.clear_rules, tenant=change.tenant,
                             sensitivity_=change.sensitivity_)
        click.echo(json.dumps(data, indent=2, default=str) if as_json else _human(escaped(data)))


__all__ = ["AclChange", "check_tenant", "parse_rules", "recompute_documents", "register", "split_tokens", "update_source"]
