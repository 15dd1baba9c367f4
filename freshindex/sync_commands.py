"""Webhook sync tickets: the ``freshindex syncs`` commands, and how ``serve`` runs a ticket's sync.

:func:`webhook_runner` is the composition-root half of :class:`api.webhooks.Dispatcher`
(the API part may not import the workers or Celery): embedded, a ticket's
sync runs inline in a thread of ``serve`` (the one process that holds the
embedded vector store); distributed, ``sync_source`` is enqueued through the
Celery app of :func:`freshindex.celery.build_app` and followed in the
registry.  Either way the run's trigger is ``webhook:<ticket>``.  A ticket's
paths are recorded but the sync lists the whole source: the etag diff makes
an unchanged document cost one comparison.

Registered into the ``freshindex`` group by :func:`register` (one line in
``freshindex/cli.py``); imports nothing from ``freshindex.cli``.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import click

from freshindex.display import escaped

if TYPE_CHECKING:  # the API needs the server extra; the CLI module must import without it
    from freshindex.api.webhooks import Dispatcher, RunSync


def webhook_runner(svc: Any) -> RunSync:
    """(source id, ticket id) -> (run id, joined) for ``svc``'s mode; Celery is imported only when distributed."""
    settings = svc.settings
    if settings.distributed:
        app_box: list[Any] = []

        def run_distributed(source_id: str, ticket_id: int) -> tuple[int, bool]:
            from freshindex.celery import build_app
            from freshindex.workers.runner import sync_distributed

            if not app_box:
                app_box.append(build_app(settings))
            report = sync_distributed(svc, app_box[0], source_id, trigger=f"webhook:{ticket_id}",
                                      timeout=settings.broker.sync_timeout)
            return report.run.id, report.joined

        return run_distributed

    def run_inline(source_id: str, ticket_id: int) -> tuple[int, bool]:
        from freshindex.workers.runner import sync_inline

        report = sync_inline(svc, source_id, trigger=f"webhook:{ticket_id}")
        return report.run.id, report.joined

    return run_inline


def start_dispatcher(svc: Any, run_sync: RunSync | None = None) -> Dispatcher:
    """Start the webhook dispatcher of ``serve`` (stop it with ``.stop()``)."""
    from freshindex.api.webhooks import Dispatcher

    wh = svc.settings.webhooks
    stuck = max(svc.settings.broker.sync_timeout, svc.settings.sync.run_lease_s) + 60.0
    return Dispatcher(svc.registry, run_sync or webhook_runner(svc), svc.metrics, debounce_s=wh.debounce_s,
                      replay_window_s=wh.replay_window_s, stuck_after_s=stuck).start()


@click.group()
def syncs() -> None:
    """Sync tickets opened by webhooks (coalesced events)."""


@syncs.command("show")
@click.argument("ticket_id", type=int)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_obj
def syncs_show(state: Any, ticket_id: int, as_json: bool) -> None:
    """The state of TICKET_ID: queued, running (run N), coalesced into run N, done or failed."""
    from freshindex.api.webhooks import ticket_state

    data = ticket_state(state.services.registry, ticket_id)
    if as_json:
        click.echo(json.dumps(data, indent=2, default=str))
        return
    data = escaped(data)
    run = f", run {data['run_id']}: {data['run_status']} (build {data['build_status']})" if data["run_id"] else ""
    paths = "all" if data["paths"] is None else str(len(data["paths"]))
    click.echo(f"ticket {data['ticket']} ({data['source']}): {data['state']}{run}; {data['events']} event(s), "
               f"paths: {paths}" + (f"; {data['detail']}" if data["detail"] else ""))


def register(cli: click.Group) -> None:
    cli.add_command(syncs)


__all__ = ["register", "start_dispatcher", "webhook_runner"]
