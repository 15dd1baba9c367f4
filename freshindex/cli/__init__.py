"""``freshindex``: register sources, sync them, inspect snapshots, query, run services.

Every command that a script may read takes ``--json``.  Exit codes (:class:`core.exit_codes.ExitCode`): 0 done
(a sync with some failed documents is still 0), 1 nothing could be indexed,
a command failed, or it names a source, kb, snapshot or run the registry
does not know (``cli.support.require``), 2 bad usage or configuration, 3 a build was held by
verification (the previous snapshot keeps serving), 4 the deletion guard held
a sync's deletions (``freshindex sources confirm-deletions SOURCE``).  A
command given ``--json`` that fails writes one JSON error object on standard
output (:class:`_Group`); a failure before its command line is read does not.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import click

from freshindex import __version__, logs
from freshindex.cli import (
    acl,
    audit,
    config,
    display,
    evaluate,
    golden_sets,
    keys,
    ocr,
    query,
    reports,
    serve,
    snapshots,
    sources,
    sync,
)
from freshindex.cli.context import CREATES_STATE, CliState
from freshindex.cli.support import JSON_REQUESTED, ConfigProblem, echo_json_error, failure
from freshindex.core.errors import ConfigError, NotFoundError

progress_log = logging.getLogger("freshindex.progress")


class _Group(click.Group):
    """The ``freshindex`` group: a command given ``--json`` that fails writes its error as JSON on standard output.

    The one place that does it, so no command has its own copy; the line on
    standard error and the exit code are :func:`main`'s.
    """

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except Exception as exc:
            if ctx.meta.get(JSON_REQUESTED):
                echo_json_error(exc)
            raise


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--config", "config", type=click.Path(dir_okay=False), envvar="FRESHINDEX_CONFIG",
              help="TOML config file (same keys as the FRESHINDEX_ environment variables).")
@click.option("-v", "--verbose", count=True, help="More log output (-v info, -vv debug).")
@click.option("--strict", is_flag=True, help="Unknown FRESHINDEX_* variables and config keys are errors (exit 2), "
              "not warnings; same as FRESHINDEX_STRICT=1.")
@click.version_option(__version__, prog_name="freshindex")
@click.pass_context
def cli(ctx: click.Context, config: str | None, verbose: int, strict: bool) -> None:
    """freshindex: keep a RAG knowledge base correct, fresh and cited."""
    state = CliState(config, verbose, strict)
    ctx.obj = state
    ctx.call_on_close(state.close)
    try:
        settings = state.settings
    except ConfigError as exc:
        raise ConfigProblem(str(exc)) from exc
    level = {0: "WARNING", 1: "INFO"}.get(verbose, "DEBUG")
    if ctx.invoked_subcommand in ("worker", "serve", "beat"):
        level = settings.log_level if not verbose else level
    logs.configure(level, settings.log_format)
    if not sys.stderr.isatty():
        progress_log.setLevel(logging.INFO)


def main() -> None:
    try:
        # Outside standalone mode click *returns* the code of a ``click.exceptions.Exit`` raised by a
        # command (check-citations' 3) instead of exiting with it: pass it on.
        code = cli.main(standalone_mode=False, prog_name="freshindex")
        if isinstance(code, int) and code:
            sys.exit(code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except Exception as exc:
        found = failure(exc)  # (exit code, message) of every error reported in one line (cli/support.py)
        if found is None:
            raise
        if isinstance(exc, click.ClickException):
            exc.show()
        else:
            click.echo(f"error: {display.printable(found[1])}", err=True)
        sys.exit(found[0])


# Each group lives in its own module, which imports nothing from this one; ``sources`` and ``snapshots``
# come first because later modules add commands to them.
config.register(cli)  # config show/reference, db upgrade (freshindex/cli/config.py)
sources.register(cli)  # sources add/list/show/pause/.../kinds, sqs-poll (freshindex/cli/sources.py)
snapshots.register(cli)  # snapshots list/build/.../restore, canaries (freshindex/cli/snapshots.py)
sync.register(cli)  # sync, syncs show (freshindex/cli/sync.py)
query.register(cli)  # query, check-citations (freshindex/cli/query.py)
evaluate.register(cli)  # eval GOLDEN (freshindex/cli/evaluate.py)
golden_sets.register(cli)  # golden-sets register/list/remove/run (freshindex/cli/golden_sets.py)
serve.register(cli)  # worker, beat, serve, mcp, api openapi (freshindex/cli/serve.py)
reports.register(cli)  # errors, runs, documents, kbs, locks, probe, ... (freshindex/cli/reports.py)
keys.register(cli)  # keys create/list/revoke (freshindex/cli/keys.py)
acl.register(cli)  # sources update (freshindex/cli/acl.py)
audit.register(cli)  # audit denials (freshindex/cli/audit.py)
ocr.register(cli)  # ocr report (freshindex/cli/ocr.py)

__all__ = ["CREATES_STATE", "CliState", "NotFoundError", "cli", "main"]
