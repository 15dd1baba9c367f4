"""The long-running processes and their descriptions: ``worker``, ``beat``, ``serve``, ``mcp``, ``api openapi``.

Each checks its dependencies before it starts (broker, registry, store, an
unsafe bind) and imports its server libraries (Celery, uvicorn, FastAPI, MCP)
only when it runs, so ``freshindex --help`` stays light.  Registered into the
``freshindex`` group by :func:`register` (one line in ``freshindex/cli/__init__.py``);
imports nothing from the package ``__init__``.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import click

from freshindex.cli.context import CliState
from freshindex.cli.support import ConfigProblem
from freshindex.core.errors import FreshIndexError
from freshindex.dispatch import start_dispatcher

log = logging.getLogger("freshindex.cli")


@click.command()
@click.option("--queues", default="sync,parse,ocr,embed,build", show_default=True,
              help="Queues to consume (comma-separated).")
@click.option("--concurrency", "-c", default=2, show_default=True, type=int)
@click.option("--pool", default="prefork", show_default=True, type=click.Choice(["prefork", "solo", "threads"]))
@click.option("--hostname", default=None, help="Worker node name (default: freshindex@<host>).")
@click.pass_obj
def worker(state: CliState, queues: str, concurrency: int, pool: str, hostname: str | None) -> None:
    """Start a Celery worker (needs a broker URL). Checks its dependencies first."""
    import os

    from freshindex.storage import check_data_dir
    from freshindex.workers import exporter

    settings = state.settings
    check_data_dir(settings, create=True, needed_for="the worker's heartbeat file")
    metrics_port = settings.broker.worker_metrics_port
    if metrics_port:
        # Before anything imports prometheus-client: its multiprocess mode is chosen at import.
        exporter.prepare(settings.data_dir / "worker-metrics" / str(os.getpid()))

    from freshindex.celery import build_app
    from freshindex.services import Services
    from freshindex.workers.names import Queue, queue_name

    app = build_app(settings)
    names = []
    for q in queues.split(","):
        try:
            names.append(queue_name(settings, Queue(q.strip())))
        except ValueError as exc:
            raise click.BadParameter(f"unknown queue {q!r}; known: {', '.join(x.value for x in Queue)}") from exc
    probe = Services(settings)
    try:
        info = probe.check()
    finally:
        probe.close()
    try:
        with app.connection_for_write() as conn:
            conn.ensure_connection(max_retries=3)
    except Exception as exc:
        raise FreshIndexError(f"broker unreachable: {exc}") from exc
    if metrics_port:
        from freshindex.workers.probe import heartbeat_path

        exporter.install(app, port=metrics_port, queues=[queue_name(settings, q) for q in Queue],
                         host=settings.broker.worker_metrics_bind, heartbeat=heartbeat_path(settings, "worker"),
                         disk={"data": settings.data_dir, "vectors": settings.vector_path})
    log.warning("worker starting", extra={"event": "worker_starting", "queues": names, **info})
    argv = ["worker", "-Q", ",".join(names), "-c", str(concurrency), "-P", pool,
            "--loglevel", settings.log_level, "-n", hostname or "freshindex@%h", "--without-gossip",
            "--without-mingle"]
    app.worker_main(argv)


@click.command()
@click.pass_obj
def beat(state: CliState) -> None:
    """Start Celery beat with freshindex's schedule (source polls)."""
    from freshindex.celery import build_app
    from freshindex.storage import check_data_dir

    check_data_dir(state.settings, create=True, needed_for="beat's schedule and heartbeat files")
    app = build_app(state.settings)  # the app factory installs beat's schedule
    state.settings.data_dir.mkdir(parents=True, exist_ok=True)  # beat's schedule file lives there
    app.Beat(loglevel=state.settings.log_level,
             schedule=str(state.settings.data_dir / "celerybeat-schedule")).run()


@click.command()
@click.option("--host", default=None)
@click.option("--port", default=None, type=int)
@click.option("--insecure", is_flag=True, help="Allow a non-loopback host with auth.mode=none (every caller "
              "anonymous); same as auth.allow_insecure.")
@click.pass_obj
def serve(state: CliState, host: str | None, port: int | None, insecure: bool) -> None:
    """Serve health, metrics and the query API over HTTP."""
    from freshindex.api.auth import insecure_bind_problem

    problem = insecure_bind_problem(state.settings.auth, host or state.settings.api.host, insecure_flag=insecure)
    if problem is not None:
        raise click.UsageError(problem)
    import uvicorn

    from freshindex.api.app import create_app

    svc = state.services
    svc.check()
    app = create_app(svc)
    dispatcher = start_dispatcher(svc)  # webhook tickets -> syncs
    from freshindex.api.sqs import start_poller

    sqs = start_poller(svc)  # S3 notifications from webhooks.sqs_queue_url -> tickets (None when unset)
    try:
        uvicorn.run(app, host=host or state.settings.api.host, port=port or state.settings.api.port,
                    log_level=state.settings.log_level.lower(), access_log=False,
                    proxy_headers=False)  # the TCP peer stays the client: gateway mode trusts it, not X-Forwarded-For
    finally:
        if sqs is not None:
            sqs.stop()
        dispatcher.stop()


@click.group("api")
def api_group() -> None:
    """The HTTP API's description."""


@api_group.command("openapi")
def api_openapi() -> None:
    """Print the OpenAPI document of `freshindex serve` (docs/openapi.json is this output)."""
    from freshindex.api.openapi import openapi_document

    click.echo(json.dumps(openapi_document(), indent=2, sort_keys=True, ensure_ascii=False))


@click.command("mcp")
@click.option("--url", envvar="FRESHINDEX_URL", default=None,
              help="The freshindex API to ask (default: http://api.host:api.port; env FRESHINDEX_URL).")
@click.option("--token-file", type=click.Path(exists=True, dir_okay=False), default=None,
              help="stdio: a file holding your own API key or JWT (else FRESHINDEX_TOKEN from your environment).")
@click.option("--http", "over_http", is_flag=True, help="Serve streamable HTTP at /mcp instead of stdio; each "
              "request's Authorization header is forwarded to the API (the server holds no credential).")
@click.option("--host", default="127.0.0.1", show_default=True, help="--http: address to bind.")
@click.option("--port", default=8765, show_default=True, type=int, help="--http: port to bind.")
@click.option("--kb", default=None, help="The tools' default knowledge base (default: settings default_kb).")
@click.pass_obj
def mcp_command(state: CliState, url: str | None, token_file: str | None, over_http: bool, host: str, port: int,
                kb: str | None) -> None:
    """Serve search_knowledge and check_citations to MCP clients (needs freshindex[mcp]).

    Thin over the HTTP API: run it next to a `freshindex serve`. The credential is always the caller's.
    """
    import os

    try:
        from freshindex.integrations import mcp_server
    except ModuleNotFoundError as exc:
        raise ConfigProblem(f"{exc.name or exc} is not installed: pip install 'freshindex[mcp]'") from exc
    base = url or f"http://{state.settings.api.host}:{state.settings.api.port}"
    default_kb = kb or state.settings.default_kb
    if over_http:
        if token_file or os.environ.get("FRESHINDEX_TOKEN"):
            raise click.UsageError("--http forwards each caller's own Authorization header: it takes no "
                                   "--token-file (unset FRESHINDEX_TOKEN)")
        mcp_server.run_http(base, host=host, port=port, default_kb=default_kb)
        return
    token = Path(token_file).read_text().strip() if token_file else os.environ.get("FRESHINDEX_TOKEN") or None
    mcp_server.run_stdio(base, token=token, default_kb=default_kb)



def register(cli: click.Group) -> None:
    for command in (worker, beat, serve, mcp_command, api_group):
        cli.add_command(command)


__all__ = ["register"]
