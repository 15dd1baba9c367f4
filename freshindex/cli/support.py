"""What the command modules share: the ``--json`` option, the check of the names a command is given, and how a
failure is reported (one line on standard error; under ``--json`` also one JSON object on standard output).

The command modules (``freshindex/cli/*.py``) import this, never
the package ``__init__`` (:mod:`freshindex.cli`), so each can be imported on its own.  What it does not
do: report as JSON a failure found before the command line was read (an
unknown option, a bad configuration file): those stay one line on standard
error, with nothing on standard output.
"""

from __future__ import annotations

import json
from typing import Any

import click

from freshindex.cli import display
from freshindex.cli.context import CliState
from freshindex.core.errors import ConfigError, FreshIndexError, NotFoundError
from freshindex.core.exit_codes import ExitCode

#: ``ctx.meta`` key set by :data:`json_option` when the running command was given ``--json``.
JSON_REQUESTED = "freshindex.json"


class OneLineError(click.ClickException):
    """A failure shown as ``error: ...`` on one line of standard error (click's own says ``Error:``)."""

    def show(self, file: Any = None) -> None:
        click.echo(f"error: {display.printable(self.message)}", err=True)


class ConfigProblem(OneLineError):
    """A configuration or file-system problem: ``error: ...`` on one line, exit 2."""

    exit_code = ExitCode.USAGE


def _record_json(ctx: click.Context, _param: click.Parameter, value: bool) -> bool:
    if value:
        ctx.meta[JSON_REQUESTED] = True
        state = ctx.find_object(CliState)
        if state is not None:
            state.json = True
    return value


#: Every command's ``--json``: machine-readable output, and a failure as one JSON object on standard output.
json_option = click.option("--json", "as_json", is_flag=True, callback=_record_json,
                           help="Machine-readable output (a failure: one JSON error object on standard output).")


class UnknownName(NotFoundError, OneLineError):
    """A source, knowledge base, snapshot or run named on the command line that the registry does not know.

    A :class:`NotFoundError` (what HTTP answers 404 for) that click also
    shows as one line with exit 1 when the group runs in standalone mode
    (``CliRunner``, ``cli()``), not only under :func:`freshindex.cli.main`.
    """

    exit_code = ExitCode.FAILED

    def __init__(self, kind: str, name: str | int, hint: str) -> None:
        self.kind, self.name = kind, name
        shown = repr(name) if isinstance(name, str) else str(name)
        OneLineError.__init__(self, f"no {kind} {shown} (see `freshindex {hint}`)")


def require(state: CliState, *, source: str | None = None, kb: str | None = None, snapshot: str | None = None,
            run: int | None = None) -> None:
    """Raise :class:`UnknownName` (exit 1) for the first given name the registry does not know; None is not checked.

    The one check of every command that takes a source, knowledge base,
    snapshot or sync run.  A knowledge base exists when a source or a snapshot
    names it (the rule of the HTTP API's 404, ``api.known_kbs``): one that
    exists but has no snapshot yet passes.  A removed source still exists
    (its runs and errors stay readable).  What it does not do: lock anything,
    so a name removed right after the check fails later, in the command.
    """
    registry = state.services.registry
    if source is not None:
        try:
            registry.get_source(source)
        except NotFoundError:
            raise UnknownName("source", source, "sources list") from None
    if kb is not None and kb not in registry.knowledge_bases():
        raise UnknownName("knowledge base", kb, "kbs list")
    if snapshot is not None:
        try:
            registry.get_snapshot(snapshot)
        except NotFoundError:
            raise UnknownName("snapshot", snapshot, "snapshots list") from None
    if run is not None:
        try:
            registry.get_sync_run(run)
        except NotFoundError:
            raise UnknownName("sync run", run, "runs list") from None


def failure(exc: BaseException) -> tuple[int, str] | None:
    """(exit code, message) of an error the CLI reports in one line; None for anything else (a bug: traceback)."""
    if isinstance(exc, click.ClickException):
        return exc.exit_code, exc.format_message()
    if isinstance(exc, click.exceptions.Abort):
        return ExitCode.FAILED, "aborted"
    if isinstance(exc, ConfigError):
        return ExitCode.USAGE, str(exc)
    if isinstance(exc, FreshIndexError):
        return ExitCode.FAILED, str(exc)
    if isinstance(exc, ModuleNotFoundError):
        # The base install is the thin HTTP client; every service command imports the
        # server dependencies when it runs, so a missing one means the wrong install.
        return ExitCode.USAGE, (f"this command needs the freshindex service ({exc.name or exc} is not installed): "
                                "pip install 'freshindex[server]'")
    return None


def json_error(exc: BaseException) -> dict[str, Any] | None:
    """The JSON object a ``--json`` command writes on standard output when it fails with ``exc``, or None.

    ``{"error", "detail", "exit_code"}``, as the HTTP API's error body
    (``error`` is ``NotFoundError`` for an unknown name, as HTTP's 404 says),
    plus ``kind`` and ``name`` for an unknown name.
    """
    found = failure(exc)
    if found is None:
        return None
    code, message = found
    out: dict[str, Any] = {"error": "NotFoundError" if isinstance(exc, NotFoundError) else type(exc).__name__,
                           "detail": message, "exit_code": int(code)}
    if isinstance(exc, UnknownName):
        out.update(kind=exc.kind, name=exc.name)
    return out


def echo_json_error(exc: BaseException) -> None:
    """Write :func:`json_error` of ``exc`` on standard output (nothing for an error it does not describe)."""
    body = json_error(exc)
    if body is not None:
        click.echo(json.dumps(body, indent=2, ensure_ascii=False))


def actor() -> str:
    """``cli:user@host``: who ran an operator action (recorded with swaps, restores, confirmations)."""
    import getpass
    import socket

    try:
        user = getpass.getuser()
    except Exception:  # no user name in some containers
        user = "unknown"
    return f"cli:{user}@{socket.gethostname()}"


__all__ = ["JSON_REQUESTED", "ConfigProblem", "OneLineError", "UnknownName", "actor", "echo_json_error", "failure", "json_error",
           "json_option", "require"]
