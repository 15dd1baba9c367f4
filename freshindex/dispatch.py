"""How a process runs the syncs it did not start from the command line: ``serve``'s webhook dispatcher, the broker check.

The composition-root half of :class:`freshindex.api.dispatcher.Dispatcher`
(the API part may not import the workers or Celery).  :func:`webhook_runner`
turns a ticket into a sync: embedded, it runs inline in a thread of ``serve``
(the one process that holds the embedded vector store); distributed,
``sync_source`` is enqueued through the Celery app of
:func:`freshindex.celery.build_app` and followed in the registry.  Either way
the run's trigger is ``webhook:<ticket>``.  A ticket's paths are recorded but
the sync lists the whole source: the etag diff makes an unchanged document
cost one comparison.  :func:`start_dispatcher` starts the dispatcher ``serve``
runs; :func:`check_broker` is the quick broker check of a distributed
``freshindex sync``.

What it does not do: import the API, the workers, Celery or kombu before a
function needs them (the CLI imports this module for every command), or
print anything: the CLI and ``serve`` report what it raises.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from freshindex.core.errors import FreshIndexError

if TYPE_CHECKING:  # the API needs the server extra; a light command must import this without it
    from celery import Celery

    from freshindex.api.dispatcher import Dispatcher, RunSync
    from freshindex.services import Services


def webhook_runner(svc: Services) -> RunSync:
    """(source id, ticket id) -> (run id, joined) for ``svc``'s mode; Celery is imported only when distributed."""
    settings = svc.settings
    if settings.distributed:
        app_box: list[Celery] = []

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


def start_dispatcher(svc: Services, run_sync: RunSync | None = None) -> Dispatcher:
    """Start the webhook dispatcher of ``serve`` (stop it with ``.stop()``)."""
    from freshindex.api.dispatcher import Dispatcher

    wh = svc.settings.webhooks
    stuck = max(svc.settings.broker.sync_timeout, svc.settings.sync.run_lease_s) + 60.0
    return Dispatcher(svc.registry, run_sync or webhook_runner(svc), svc.metrics, debounce_s=wh.debounce_s,
                      replay_window_s=wh.replay_window_s, stuck_after_s=stuck).start()


#: Seconds `sync` gives the broker (and a Redis result backend) to answer before it gives up.
BROKER_CHECK_S = 3.0


def check_broker(app: Celery, timeout: float = BROKER_CHECK_S) -> None:
    """Connect once to the broker and to a Redis result backend, within ``timeout`` each, or raise.

    Without it a sync with the broker down spends about 20 s in Celery's
    reconnection retries (twenty log lines) before it fails; this fails in a
    few seconds with one line.  What it does not do: keep a later publish or
    result read from retrying if the broker goes down mid-sync.
    """
    from kombu import Connection

    from freshindex.settings import redact_url

    targets = [("broker", str(app.conf.broker_url), "broker.url (FRESHINDEX_BROKER__URL)")]
    backend = str(app.conf.result_backend or "")
    if backend.startswith(("redis://", "rediss://")) and backend != targets[0][1]:
        targets.append(("result backend", backend, "broker.result_backend (FRESHINDEX_BROKER__RESULT_BACKEND)"))
    for what, url, setting in targets:
        try:
            with Connection(url, connect_timeout=timeout) as conn:
                # kombu takes float seconds; celery-types' stub says int
                conn.ensure_connection(max_retries=1, interval_start=0.2,  # type: ignore[arg-type]
                                       interval_step=0, timeout=timeout)  # type: ignore[arg-type]
        except Exception as exc:
            reason = " ".join(str(exc).split()) or type(exc).__name__
            raise FreshIndexError(f"{what} {redact_url(url)} is unreachable ({reason}); start it or fix "
                                  f"{setting}, or run `freshindex sync --inline`") from exc


__all__ = ["BROKER_CHECK_S", "check_broker", "start_dispatcher", "webhook_runner"]
