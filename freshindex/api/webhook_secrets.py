"""Webhook secrets while ``serve`` runs: ``webhooks.secrets`` over ``webhooks.secrets_file``, the file followed.

Why: a source's webhook secret is added or revoked by editing one file, and
a restart of ``serve`` for that would drop requests in flight.  Used by
:class:`api.routes_webhooks.WebhookIntake`, one instance per app.

What it does not do: verify a signature (the intake does), watch the file
with inotify (it is looked at when a request needs a secret, at most every
``webhooks.secrets_file_check_s``), or change inline ``webhooks.secrets``
without a restart.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from freshindex.core.errors import ConfigError

if TYPE_CHECKING:
    from freshindex.settings import WebhookSettings

log = logging.getLogger("freshindex.webhooks")


class WebhookSecrets:
    """Source id -> secret: ``webhooks.secrets`` over ``webhooks.secrets_file``, the file followed while serving.

    The file is read here (a missing or malformed file at start is a
    :class:`ConfigError`, so ``serve`` does not start without its secrets).
    Afterwards, at most every ``secrets_file_check_s`` seconds of ``clock``,
    a request stats it and reads it again when its mtime, size or inode
    changed: a secret added to the file is accepted, and one removed is
    refused, within that interval, without a restart.  A file that has
    gone takes its secrets with it (fail closed); a file that cannot be
    parsed (written in place, half done) keeps the last good secrets and is
    read again at the next check.

    What it does not guarantee: that an edit keeping the file's size,
    inode and mtime (within the filesystem's timestamp granularity) is
    seen; replace the file (write a new one, rename it over the old) and
    the inode changes.  Inline ``webhooks.secrets`` change only with the
    settings, at a restart.
    """

    def __init__(self, settings: WebhookSettings, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._settings, self._clock = settings, clock
        self._lock = threading.Lock()
        self._stamp = self._file_stamp()
        self._secrets = settings.resolved_secrets()
        self._checked_at = clock()

    def _file_stamp(self) -> tuple[int, int, int] | None:
        path = self._settings.secrets_file
        try:
            st = path.expanduser().stat() if path is not None else None
        except OSError:
            return None
        return None if st is None else (st.st_mtime_ns, st.st_size, st.st_ino)

    def cached(self, source_id: str) -> str | None:
        """The source's secret as of the last check, when no check of the file is due now; else None.  Never
        touches the file: an event loop may call it (a due check is :meth:`get`'s, in a thread)."""
        if self._settings.secrets_file is not None and self._due(self._clock()):
            return None
        return self._secrets.get(source_id)

    def _due(self, now: float) -> bool:
        """Whether a check of the file is due at ``now`` (``secrets_file_check_s`` since the last)."""
        return now - self._checked_at >= self._settings.secrets_file_check_s

    def get(self, source_id: str) -> str | None:
        """The source's secret as of the last check (which this call may make), or None."""
        if self._settings.secrets_file is not None:
            self._refresh()
        return self._secrets.get(source_id)

    def _refresh(self) -> None:
        now = self._clock()
        with self._lock:
            if not self._due(now):
                return
            self._checked_at = now
            stamp = self._file_stamp()  # before the read: a change during it is seen at the next check
            if stamp == self._stamp:
                return
            if stamp is None:
                log.warning("webhooks.secrets_file is gone: its secrets are no longer accepted")
                fresh = {k: v.get_secret_value() for k, v in self._settings.secrets.items()}
            else:
                try:
                    fresh = self._settings.resolved_secrets()
                except ConfigError as exc:
                    log.error("%s; keeping the secrets read before", exc)
                    return
            log.info("webhooks.secrets_file changed: %d sources have a secret", len(fresh))
            self._secrets, self._stamp = fresh, stamp


__all__ = ["WebhookSecrets"]
