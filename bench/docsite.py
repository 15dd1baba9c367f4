"""A real HTTP server for crawler tests and bench.crawl: a folder of HTML served like a static documentation host.

It answers as nginx does for a static site: ``ETag`` and ``Last-Modified`` on
every file, ``304`` to a matching ``If-None-Match`` (or, without it, to an
``If-Modified-Since`` not older than the file), ``301`` from ``/dir`` to
``/dir/``, ``dir/index.html`` for ``/dir/``.  On top of that, ``robots``
is served as ``/robots.txt``, ``routes`` maps a path to a fixed answer
``(status, headers, body)``, and ``rewrite`` replaces bytes in served HTML
(a site's own base URL in place of the one a local build wrote).  Every
request is recorded as ``(path, headers)``.
"""

from __future__ import annotations

import email.utils
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


@dataclass
class DocSite:
    root: Path | None = None
    mount: str = "/"
    robots: str | None = None
    routes: dict[str, tuple[int, dict[str, str], bytes]] = field(default_factory=dict)
    rewrite: dict[bytes, bytes] = field(default_factory=dict)
    requests: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    base: str = ""

    def paths(self) -> list[str]:
        return [p for p, _ in self.requests]


def _handler(site: DocSite) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:  # quiet
            pass

        def _send(self, status: int, headers: dict[str, str], body: bytes = b"") -> None:
            self.send_response(status)
            for k, v in headers.items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            site.requests.append((path, {k.lower(): v for k, v in self.headers.items()}))
            if path in site.routes:
                self._send(*site.routes[path])
                return
            if path == "/robots.txt" and site.robots is not None:
                self._send(200, {"Content-Type": "text/plain"}, site.robots.encode())
                return
            if site.root is None or not path.startswith(site.mount):
                self._send(404, {"Content-Type": "text/plain"}, b"not found")
                return
            rel = path[len(site.mount):]
            target = (site.root / rel).resolve()
            if not target.is_relative_to(site.root.resolve()) or not target.exists():
                self._send(404, {"Content-Type": "text/plain"}, b"not found")
                return
            if target.is_dir():
                if not path.endswith("/"):
                    self._send(301, {"Location": path + "/"})
                    return
                target = target / "index.html"
                if not target.is_file():
                    self._send(404, {"Content-Type": "text/plain"}, b"not found")
                    return
            st = target.stat()
            etag = f'"{st.st_mtime_ns:x}-{st.st_size:x}"'
            modified = email.utils.formatdate(st.st_mtime, usegmt=True)
            inm, ims = self.headers.get("If-None-Match"), self.headers.get("If-Modified-Since")
            fresh = (inm == etag) if inm is not None else (
                ims is not None and email.utils.parsedate_to_datetime(ims).timestamp() >= int(st.st_mtime))
            headers = {"ETag": etag, "Last-Modified": modified}
            if fresh:
                self._send(304, headers)
                return
            body = target.read_bytes()
            ctype = "text/html; charset=utf-8" if target.suffix in (".html", ".htm") else "application/octet-stream"
            for old, new in site.rewrite.items():
                body = body.replace(old, new)
            self._send(200, {**headers, "Content-Type": ctype}, body)

    return Handler


@contextmanager
def serve(site: DocSite, host: str = "127.0.0.1") -> Iterator[DocSite]:
    """``site`` served on ``host`` at a free port (``site.base`` is ``http://host:port``) until the block ends."""
    server = ThreadingHTTPServer((host, 0), _handler(site))
    server.daemon_threads = True
    site.base = f"http://{host}:{server.server_address[1]}"
    site.rewrite = {k: v.replace(b"{base}", site.base.encode()) for k, v in site.rewrite.items()}
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), name="docserver", daemon=True)
    thread.start()
    try:
        yield site
    finally:
        server.shutdown()
        server.server_close()
