"""The state every ``freshindex`` command is given (``ctx.obj``): :class:`CliState`, one typed record.

It holds the group's options (``--config``, ``-v``, ``--strict``), whether the
running command was given ``--json``, the settings (read on first use) and the
:class:`~freshindex.services.Services` (opened on first use, closed when the
command ends).  Whether a command may create the data dir and the registry is
:data:`CREATES_STATE`'s to say.  What it does not do: import the services (or
anything they pull in: parsers, the vector store, cloud SDKs) before a command
asks for them, so light commands such as ``config show`` stay light.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import click

from freshindex.settings import Settings, load_settings

if TYPE_CHECKING:
    from freshindex.services import Services

#: Commands that may create the data dir and the registry; every other command reads what exists and
#: fails (exit 2, naming where it looked) when the data dir or registry is missing.
CREATES_STATE = frozenset({"sources add", "sync", "serve", "worker", "beat", "db upgrade", "snapshots restore",
                           "keys create", "sqs-poll"})


def command_path() -> str:
    """``sources add`` for ``freshindex sources add ...`` (the running command, without the program name)."""
    ctx, names = click.get_current_context(silent=True), []
    while ctx is not None:
        names.append(ctx.info_name or "")
        ctx = ctx.parent
    return " ".join(reversed(names[:-1]))


@dataclass
class CliState:
    """The ``freshindex`` group's options and what a command reaches through them (``@click.pass_obj``)."""

    config: str | None = None  # --config (or FRESHINDEX_CONFIG): the TOML file read under the environment
    verbose: int = 0  # -v count
    strict: bool = False  # --strict: unknown settings are errors
    json: bool = False  # the running command was given --json (set by cli.support.json_option)
    _settings: Settings | None = field(default=None, init=False, repr=False)
    _services: Services | None = field(default=None, init=False, repr=False)

    @property
    def settings(self) -> Settings:
        """The settings, read once (a :class:`~freshindex.core.errors.ConfigError` when they are bad)."""
        if self._settings is None:
            self._settings = load_settings(self.config, strict=True if self.strict else None,
                                           on_unknown=lambda m: click.echo(f"warning: {m}", err=True))
        return self._settings

    @property
    def services(self) -> Services:
        """The registry, store, metrics...: opened on first use, creating storage only for :data:`CREATES_STATE`."""
        if self._services is None:
            from freshindex.services import Services

            self._services = Services(self.settings, create_storage=command_path() in CREATES_STATE)
        return self._services

    def close(self) -> None:
        """Close the services if a command opened them."""
        if self._services is not None:
            self._services.close()


__all__ = ["CREATES_STATE", "CliState", "command_path"]
