"""What the command modules share: the one-line usage problem (exit 2) and the actor recorded with an action.

The command modules (``freshindex/*_commands.py``) import this, never
:mod:`freshindex.cli`, so each can be imported on its own.
"""

from __future__ import annotations

from typing import Any

import click

from freshindex import display
from freshindex.core.exit_codes import ExitCode


class ConfigProblem(click.ClickException):
    """A configuration or file-system problem: ``error: ...`` on one line, exit 2."""

    exit_code = ExitCode.USAGE

    def show(self, file: Any = None) -> None:
        click.echo(f"error: {display.printable(self.message)}", err=True)


def actor() -> str:
    """``cli:user@host``: who ran an operator action (recorded with swaps, restores, confirmations)."""
    import getpass
    import socket

    try:
        user = getpass.getuser()
    except Exception:  # no user name in some containers
        user = "unknown"
    return f"cli:{user}@{socket.gethostname()}"


__all__ = ["ConfigProblem", "actor"]
