"""``freshindex keys``: issue, list and revoke the API keys of the query API.

Registered into the ``freshindex`` click group by :func:`register` (one line
at the end of ``freshindex/cli/__init__.py``). A key is bound to a principal (id,
groups, tenant) when it is created; the request that presents it can narrow
those groups, never widen them (``api.auth``). The full key is printed once,
by ``keys create``; the registry keeps only its hash, so a lost key is
revoked and replaced, not recovered. ``keys list`` never prints a secret.

Like :mod:`freshindex.cli.reports`, this reaches ``ctx.obj`` (the CLI's
state) and imports nothing from the package ``__init__``.
"""

from __future__ import annotations

import json

import click

from freshindex.cli.context import CliState
from freshindex.cli.display import printable, table
from freshindex.cli.support import json_option


@click.group("keys")
def keys() -> None:
    """API keys of the query API (auth.mode keys or keys+jwt)."""


@keys.command("create")
@click.argument("principal")
@click.option("--group", "groups", multiple=True, help="A group the key's principal belongs to (repeatable).")
@click.option("--tenant", default=None, help="The principal's tenant: its queries see only that tenant's documents (default: default).")
@click.option("--description", default=None, help="What the key is for (shown by `keys list`).")
@json_option
@click.pass_obj
def keys_create(state: CliState, principal: str, groups: tuple[str, ...], tenant: str | None, description: str | None,
                as_json: bool) -> None:
    """Issue a key for PRINCIPAL; the key is printed once and cannot be shown again."""
    new = state.services.registry.create_api_key(principal, groups, tenant=tenant, description=description)
    if as_json:
        click.echo(json.dumps({**new.info.as_dict(), "key": new.key}, indent=2, ensure_ascii=False))
        return
    click.echo(new.key)
    click.echo(f"key {new.info.key_id} for {printable(principal)} (groups: {printable(', '.join(new.info.groups)) or 'none'}); "
               "store it now: it is not shown again", err=True)


@keys.command("list")
@click.option("--active", is_flag=True, help="Leave revoked keys out.")
@json_option
@click.pass_obj
def keys_list(state: CliState, active: bool, as_json: bool) -> None:
    """Every key: id, principal, groups, tenant, created, last used, revoked (never the secret)."""
    rows = [k.as_dict() for k in state.services.registry.list_api_keys(include_revoked=not active)]
    if as_json:
        click.echo(json.dumps(rows, indent=2, ensure_ascii=False))
        return
    columns = ("key_id", "principal", "groups", "tenant", "created_at", "last_used_at", "revoked_at", "description")
    click.echo(table([{**r, "groups": ", ".join(r["groups"])} for r in rows], columns, "no API keys"))


@keys.command("revoke")
@click.argument("key_id")
@json_option
@click.pass_obj
def keys_revoke(state: CliState, key_id: str, as_json: bool) -> None:
    """Revoke KEY_ID: the next request that presents it is refused (401)."""
    info = state.services.registry.revoke_api_key(key_id)
    if as_json:
        click.echo(json.dumps(info.as_dict(), indent=2, ensure_ascii=False))
    else:
        when = info.revoked_at.isoformat() if info.revoked_at else "now"  # the registry sets it on revoke
        click.echo(f"revoked {info.key_id} ({printable(info.principal)}) at {when}")


def register(cli: click.Group) -> None:
    """Add the ``keys`` group to the ``freshindex`` group."""
    cli.add_command(keys)


__all__ = ["register"]
