"""A counting HTTP origin on 127.0.0.1: serves files with Range support and counts bytes.

The swarm tests and the origin-policy benchmark use it as the web seed (BEP 19) in place
of S3 or a CDN: it answers ``GET`` and ``HEAD`` for the files of one directory, honours a
single ``Range: bytes=a-b`` (what libtorrent's web seed sends), and counts the payload
bytes it actually wrote to sockets, so a test can compare the agents' own accounting
with the origin's. It can also cap its send rate (a slow origin) and refuse requests
(an origin that is down). ``connection_rate_limit`` caps each connection on its own, like
S3, whose throughput per connection is bounded while the aggregate scales. A URL with an
``expires=<unix time>`` query parameter in the past is refused with 403 and counted in
``forbidden``, like an expired presigned URL.

It runs in a thread of the test process (``start()`` / ``stop()``, or as a context
manager); no process is started.
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

from tests.functional.processes import Service

_RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")
_CHUNK = 64 * 1024


class CountingOrigin(Service):
    """An HTTP server for the files under ``root``, counting the bytes it sends.

    ``rate_limit`` caps the payload send rate of the whole server in bytes per second,
    ``connection_rate_limit`` that of each connection (0: unlimited). ``bytes_sent`` is the
    payload (body) bytes written so far, over all requests; ``requests`` the number of GET
    requests answered.
    """

    def __init__(
        self, root: Path, *, host: str = "127.0.0.1", rate_limit: int = 0, connection_rate_limit: int = 0
    ) -> None:
        self.root = root.resolve()
        self.host = host
        self.rate_limit = rate_limit
        self.connection_rate_limit = connection_rate_limit
        self.available = True
        """False: every request gets 503 (the origin is "down")."""
        self._lock = threading.Lock()
        self._bytes_sent = 0
        self._requests = 0
        self._forbidden = 0
        self._budget_start = time.monotonic()
        self._budget_bytes = 0
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        """The listening port (only while running)."""
        if self._server is None:
            raise RuntimeError("CountingOrigin is not running")
        return int(self._server.server_address[1])

    def url(self, name: str) -> str:
        """The URL of file ``name`` under ``root``."""
        return f"http://{self.host}:{self.port}/{name}"

    @property
    def bytes_sent(self) -> int:
        """Payload bytes sent so far (bodies only, no headers)."""
        with self._lock:
            return self._bytes_sent

    @property
    def requests(self) -> int:
        """GET requests answered so far."""
        with self._lock:
            return self._requests

    @property
    def forbidden(self) -> int:
        """Requests refused because their URL had expired."""
        with self._lock:
            return self._forbidden

    def reset_counters(self) -> None:
        """Set ``bytes_sent``, ``requests`` and ``forbidden`` back to 0."""
        with self._lock:
            self._bytes_sent = 0
            self._requests = 0
            self._forbidden = 0

    def _count(self, sent: int) -> None:
        with self._lock:
            self._bytes_sent += sent

    def _throttle(self, nbytes: int) -> None:
        """Sleep so that the server's total send rate stays under ``rate_limit``."""
        if self.rate_limit <= 0:
            return
        with self._lock:
            now = time.monotonic()
            # A token bucket of one second: the bytes sent since the budget started must
            # not run ahead of rate_limit * elapsed.
            if now - self._budget_start > 1.0 and self._budget_bytes <= self.rate_limit * (
                now - self._budget_start
            ):
                self._budget_start, self._budget_bytes = now, 0
            self._budget_bytes += nbytes
            due = self._budget_start + self._budget_bytes / self.rate_limit
        delay = due - time.monotonic()
        if delay > 0:
            time.sleep(delay)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        origin = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            paced_since = 0.0
            paced_bytes = 0

            def log_message(self, format: str, *args: object) -> None:
                pass

            def handle(self) -> None:
                # A client that goes away mid-response (libtorrent dropping a web seed)
                # is normal here, not an error worth a traceback.
                with contextlib.suppress(ConnectionError, TimeoutError):
                    super().handle()

            def _pace(self, nbytes: int) -> None:
                """Keep this connection under ``connection_rate_limit``."""
                rate = origin.connection_rate_limit
                if rate <= 0:
                    return
                now = time.monotonic()
                if self.paced_bytes == 0 or now - self.paced_since > 1.0 + self.paced_bytes / rate:
                    self.paced_since, self.paced_bytes = now, 0
                self.paced_bytes += nbytes
                delay = self.paced_since + self.paced_bytes / rate - now
                if delay > 0:
                    time.sleep(delay)

            def do_HEAD(self) -> None:
                self._serve(body=False)

            def do_GET(self) -> None:
                self._serve(body=True)

            def _serve(self, *, body: bool) -> None:
                if not origin.available:
                    self._error(503, "origin unavailable")
                    return
                parts = urlsplit(self.path)
                expires = parse_qs(parts.query).get("expires")
                if expires and float(expires[0]) < time.time():
                    with origin._lock:
                        origin._forbidden += 1
                    self._error(403, "request has expired")
                    return
                name = unquote(parts.path).lstrip("/")
                path = (origin.root / name).resolve()
                if origin.root not in path.parents or not path.is_file():
                    self._error(404, "not found")
                    return
                size = path.stat().st_size
                start, end, status = 0, size - 1, 200
                header = self.headers.get("Range")
                if header:
                    match = _RANGE.match(header.strip())
                    if match is None or (not match.group(1) and not match.group(2)):
                        self._error(416, "bad range")
                        return
                    if match.group(1):
                        start = int(match.group(1))
                        end = min(int(match.group(2)), size - 1) if match.group(2) else size - 1
                    else:  # a suffix range: the last N bytes
                        start = max(0, size - int(match.group(2)))
                    if start > end or start >= size:
                        self._error(416, "range not satisfiable")
                        return
                    status = 206
                length = end - start + 1
                self.send_response(status)
                self.send_header("Content-Type", "application/octet-stream")
                self.send_header("Content-Length", str(length))
                self.send_header("Accept-Ranges", "bytes")
                if status == 206:
                    self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
                self.end_headers()
                if not body:
                    return
                with origin._lock:
                    origin._requests += 1
                self.wfile.flush()
                with path.open("rb") as file:
                    offset, left = start, length
                    while left > 0:
                        step = min(_CHUNK, left)
                        origin._throttle(step)
                        self._pace(step)
                        try:
                            sent = os.sendfile(self.connection.fileno(), file.fileno(), offset, step)
                        except OSError:
                            self.close_connection = True
                            return
                        if sent == 0:
                            self.close_connection = True
                            return
                        origin._count(sent)
                        offset += sent
                        left -= sent

            def _error(self, code: int, message: str) -> None:
                data = message.encode()
                self.send_response(code)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

        return Handler

    def start(self) -> str:
        """Start serving on a free port; return the base URL."""
        if self._server is None:
            server = ThreadingHTTPServer((self.host, 0), self._handler())
            server.daemon_threads = True
            self._server = server
            self._thread = threading.Thread(
                target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True
            )
            self._thread.start()
        return f"http://{self.host}:{self.port}"

    def stop(self) -> None:
        """Stop serving and close the listening socket."""
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._thread is not None:
            with contextlib.suppress(RuntimeError):
                self._thread.join(timeout=5.0)
            self._thread = None
