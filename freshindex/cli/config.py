"""``freshindex config show|reference`` and ``freshindex db upgrade``: the effective settings and the schema.

Registered into the ``freshindex`` group by :func:`register` (one line in
``freshindex/cli/__init__.py``); reaches only ``ctx.obj`` (``.settings``) and imports
nothing from the package ``__init__``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from freshindex.cli.context import CliState
from freshindex.cli.display import emit as _emit
from freshindex.cli.support import ConfigProblem, json_option


@click.group()
def config() -> None:
    """The effective configuration, and the reference of every setting."""


@config.command("show")
@json_option
@click.pass_obj
def config_show(state: CliState, as_json: bool) -> None:
    """Print the effective configuration, secrets redacted."""
    data = state.settings.redacted()

    def human(d: dict[str, Any], indent: str = "") -> str:
        lines = []
        for k, v in d.items():
            if isinstance(v, dict):
                lines.append(f"{indent}[{k}]")
                lines.append(human(v, indent + "  "))
            else:
                lines.append(f"{indent}{k} = {v}")
        return "\n".join(lines)

    _emit(data, as_json, human)


@config.command("reference")
@click.option("--write", "write", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the reference to this file (e.g. docs/configuration.md) instead of standard output.")
def config_reference(write: Path | None) -> None:
    """Print the configuration reference (every setting: variable, type, default, description) as Markdown."""
    from freshindex.settings.reference import render_reference

    text = render_reference()
    if write is None:
        click.echo(text, nl=False)
        return
    try:
        write.write_text(text)
    except OSError as exc:
        raise ConfigProblem(f"cannot write {write}: {exc.strerror or exc}") from exc
    click.echo(f"wrote {write} ({text.count(chr(10))} lines)", err=True)


@click.group()
def db() -> None:
    """Registry schema."""


@db.command("upgrade")
@json_option
@click.pass_obj
def db_upgrade(state: CliState, as_json: bool) -> None:
    """Upgrade the registry schema to this version's head."""
    from freshindex.registry import db as registry_db
    from freshindex.settings import redact_url

    engine = registry_db.make_engine(state.settings.registry_url)
    try:
        before, after = registry_db.upgrade(engine)
    finally:
        engine.dispose()
    data = {"registry": redact_url(state.settings.registry_url), "from": before, "to": after}
    _emit(data, as_json, lambda d: f"registry {d['registry']}: schema {d['from'] or 'empty'} -> {d['to']}")


def register(cli: click.Group) -> None:
    cli.add_command(config)
    cli.add_command(db)


__all__ = ["register"]
