"""One writer per knowledge base: a lease in the registry with a fencing token.

The lease expires (``ttl``) unless renewed, so a builder killed with
``kill -9`` blocks others for at most ``ttl`` seconds.  While held, a
background thread renews it.  The fencing token grows with every
acquisition; the final registry write of a build checks it, so a builder
that lost its lease (paused past expiry) cannot overwrite a newer build.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from types import TracebackType

from freshindex.core.errors import LockHeldError
from freshindex.registry.protocols import Locks

log = logging.getLogger("freshindex.lock")


def default_owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{threading.get_ident()}"


class WriterLock:
    def __init__(self, registry: Locks, name: str, *, ttl: float = 120.0, wait: float = 0.0,
                 owner: str | None = None) -> None:
        self.registry, self.name, self.ttl, self.wait = registry, name, ttl, wait
        self.owner = owner or default_owner()
        self.token: int | None = None
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None

    def __enter__(self) -> WriterLock:
        deadline = time.monotonic() + self.wait
        while True:
            token = self.registry.acquire_lock(self.name, self.owner, self.ttl)
            if token is not None:
                self.token = token
                break
            if time.monotonic() >= deadline:
                holder, expires, _ = self.registry.lock_holder(self.name)
                raise LockHeldError(
                    f"{self.name} is held by {holder} for another {max(0.0, expires - time.time()):.0f}s; "
                    "another build is running (it expires on its own if that builder died)"
                )
            time.sleep(min(1.0, max(0.05, deadline - time.monotonic())))
        self._renewer = threading.Thread(target=self._renew, name=f"renew {self.name}", daemon=True)
        self._renewer.start()
        return self

    def _renew(self) -> None:
        while not self._stop.wait(self.ttl / 3):
            try:
                if not self.registry.renew_lock(self.name, self.token or 0, self.ttl):
                    log.error("lost lock %s", self.name)
                    return
            except Exception:  # a registry blip: try again next period
                log.warning("could not renew lock %s", self.name, exc_info=True)

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop.set()
        if self._renewer is not None:
            self._renewer.join(timeout=5)
        if self.token is not None:
            self.registry.release_lock(self.name, self.token)
