"""``freshindex query`` and ``freshindex check-citations``: an operator's question, and the check of a finished answer.

Registered into the ``freshindex`` group by :func:`register` (one line in
``freshindex/cli/__init__.py``); reaches only ``ctx.obj`` (``.settings``,
``.services``) and imports nothing from the package ``__init__``.
"""

from __future__ import annotations

import json
from typing import Any

import click

from freshindex.cli import display
from freshindex.cli.context import CliState
from freshindex.cli.display import emit as _emit
from freshindex.cli.support import json_option, require
from freshindex.core.exit_codes import ExitCode


@click.command()
@click.argument("question")
@click.option("--kb", default=None)
@click.option("--principal", default="anonymous", show_default=True)
@click.option("--group", "groups", multiple=True, help="A group of the principal (repeatable).")
@click.option("--tenant", default=None, help="The principal's tenant (default: default).")
@click.option("--limit", default=5, show_default=True, type=click.IntRange(1, 50))
@json_option
@click.pass_obj
def query(state: CliState, question: str, kb: str | None, principal: str, groups: tuple[str, ...], tenant: str | None,
          limit: int, as_json: bool) -> None:
    """Answer QUESTION as a principal (an operator's tool: the HTTP API takes identity from credentials)."""
    from freshindex.acl import Principal

    kb = kb or state.settings.default_kb
    # An unknown kb is an error (exit 1), as HTTP's 404; a known one without a snapshot yet answers
    # "insufficient evidence (no_snapshot)".
    require(state, kb=kb)
    packet = state.services.client.retrieve(question, kb=kb, principal=Principal.of(principal, groups, tenant=tenant),
                                            limit=limit)
    if as_json:
        click.echo(json.dumps(packet.as_dict(), indent=2, ensure_ascii=False))
    else:
        click.echo(packet.rendered)
        if not packet.insufficient:
            click.echo("\nSources:")
            for e in packet.evidence:
                click.echo(f"  {display.printable(e.citation)}  score={e.score:.3f}")


@click.command("check-citations")
@click.argument("answer", type=click.File("r", encoding="utf-8"))
@click.option("--packet", "packet_file", required=True, type=click.File("r", encoding="utf-8"),
              help="The packet the answer was written from: `freshindex query --json` output (- for stdin).")
@json_option
def check_citations_command(answer: Any, packet_file: Any, as_json: bool) -> None:
    """Check the citations of a finished ANSWER (a file, - for stdin) against a packet's source list.

    Exit 0 when every citation is listed and supported, 3 when some is not,
    2 when the input is not an answer and a packet. Nothing is counted: a
    CLI process is never scraped (POST /v1/citations/check counts in
    freshindex_invalid_citations_total), and no registry or store is opened.
    """
    from freshindex.injection.citations import MAX_ANSWER_CHARS, CitationInputError, check_answer

    text = answer.read(MAX_ANSWER_CHARS + 1)
    try:
        packet = json.loads(packet_file.read())
        report = check_answer(text, packet)
    except RecursionError as exc:  # JSON nested deeper than the parser's recursion limit
        raise click.UsageError("cannot check citations: the packet is nested too deeply") from exc
    except (ValueError, CitationInputError) as exc:
        raise click.UsageError(f"cannot check citations: {exc}") from exc

    def human(d: dict[str, Any]) -> str:
        lines = [f"citations {'ok' if d['ok'] else 'INVALID'}: cited {d['cited'] or 'none'}, "
                 f"{d['sentences']} sentences ({d['uncited_sentences']} without a citation)"]
        if d["missing"]:
            lines.append(f"  not in the source list: {d['missing']}")
        if d["unsupported"]:
            lines.append(f"  no citing sentence supported by the source: {d['unsupported']}")
        for m in d.get("malformed", []):
            lines.append(f"  malformed citation {m['citation'][:40]} ({m['kind']})")
        return "\n".join(lines)

    _emit(report.as_dict(), as_json, human)
    if not report.ok:
        raise click.exceptions.Exit(ExitCode.VERIFICATION_HELD)


def register(cli: click.Group) -> None:
    cli.add_command(query)
    cli.add_command(check_citations_command)


__all__ = ["register"]
