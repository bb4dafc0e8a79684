"""The sandbox's one HTTP origin on loopback: what the agents download filter files from.

It serves either the files of a directory (``Origin(files=DIR)``: the swarm tests and the
origin-policy benchmark use it as the torrent's web seed) or an S3 server it stands in
front of (``Origin(upstream=URL)``: the fleet's view of the bucket; moto does not check
signatures, so presigned URLs made for the origin's address work through it). Either
way it

- counts the body bytes and GETs of the files it counts (every file of the directory;
  the filter files, ``.../filter.bsf``, of the bucket): the origin's egress, measured
  where it leaves the origin (read with :meth:`Origin.snapshot`, safe across threads);
- answers one ``Range`` the way S3 does (:mod:`.http_range`);
- caps its egress: ``rate_limit``, the total in bytes/s shared by all connections (one
  token bucket, e.g. an uplink or a CDN budget), and ``connection_rate``, each
  connection's own pace, like S3's bounded throughput per connection;
- fails ``fault_rate`` of the requests, half as a 503 and half as a stall of ``stall_s``
  followed by a dropped connection (a timeout for the client);
- refuses a URL whose ``expires=<unix time>`` query parameter is in the past with 403
  (counted in ``forbidden``), like an expired presigned URL.

Filter files are immutable once published, so in front of S3 the origin keeps each one
it has fetched in a file of its own (a CDN's cache; ``cache_files=False`` forwards every
request, for a test that changes an object in place) and serves GETs and ``Range`` GETs
of it from there. This keeps memory flat for files of gigabytes and many concurrent
downloads: moto's server reads a whole object into memory for every request, even a
range of it. Other requests are forwarded as they are.

It runs in threads of the calling process (``start()`` / ``stop()``, or as a context
manager); no process is started.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import random
import shutil
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

from bloomswarm.common.bucket_layout import DELTA_FILE_SUFFIX, FILTER_FILE_NAME
from bloomswarm.sandbox.http_range import RangeNotSatisfiable, parse_range
from bloomswarm.sandbox.processes import Service

_CHUNK = 64 * 1024
_FETCH_CHUNK = 1024 * 1024
FILTER_SUFFIX = "/" + FILTER_FILE_NAME
PAYLOAD_SUFFIXES = (FILTER_SUFFIX, DELTA_FILE_SUFFIX)
"""Object keys whose bytes are counted (and, in front of S3, served from a copy): filter files
and deltas, the origin's payload."""
"""The end of a filter file's object key: what the origin counts in front of S3."""
_KEPT_HEADERS = ("etag", "last-modified", "content-type", "x-amz-meta-sha256")
_HOP_HEADERS = ("connection", "keep-alive", "proxy-connection")
_NOT_FORWARDED = (*_HOP_HEADERS, "transfer-encoding", "content-length", "server", "date")
"""Headers of the S3 server's answers the origin does not pass on (it sets its own)."""


@dataclass(frozen=True)
class OriginCounts:
    """What the origin has served so far."""

    filter_bytes: int
    """Body bytes of the counted files sent: filter files and deltas (the origin's payload
    egress)."""
    filter_requests: int
    """GET requests for counted files."""
    requests: int
    """All requests."""
    faults: int
    """Requests failed on purpose (``fault_rate``)."""
    forbidden: int
    """Requests refused because their URL had expired."""


@dataclass(frozen=True)
class PayloadRequest:
    """One answered GET of a counted file: which bytes were asked for and how many went."""

    at: float
    """``time.monotonic()`` when the answer ended."""
    client: tuple[str, int]
    """The client's address and port (one web seed connection each)."""
    path: str
    """The request path, without its query."""
    first: int
    last: int
    """The byte range asked for (inclusive)."""
    sent: int
    """Body bytes sent: less than the range when the client went away."""


@dataclass(frozen=True)
class _File:
    """A file the origin serves from disk."""

    path: Path
    size: int
    headers: tuple[tuple[str, str], ...]
    """Response headers beside the length and range ones (ETag, type...)."""


class TokenBucket:
    """A shared byte budget of ``rate`` bytes/s with a burst of ``burst`` bytes;
    :meth:`take` blocks until the bytes may go (rate 0: never blocks)."""

    def __init__(self, rate: int, burst: int = _CHUNK) -> None:
        self.rate = rate
        self.burst = max(burst, _CHUNK)
        self._tokens = float(self.burst)
        self._stamp = time.monotonic()
        self._lock = threading.Lock()

    def take(self, size: int) -> None:
        if self.rate <= 0:
            return
        while True:
            with self._lock:
                now = time.monotonic()
                self._tokens = min(self.burst, self._tokens + (now - self._stamp) * self.rate)
                self._stamp = now
                if self._tokens >= size:
                    self._tokens -= size
                    return
                wait = (size - self._tokens) / self.rate
            time.sleep(wait)


class ConnectionPace:
    """One connection's pace of ``rate`` bytes/s (0: unpaced). Bytes due earlier than
    now may go at once after a short pause; after a pause of more than a second past
    what was due, the pace starts again from now."""

    def __init__(self, rate: int) -> None:
        self.rate = rate
        self._since = 0.0
        self._bytes = 0

    def delay(self, size: int, now: float) -> float:
        """Seconds to wait before sending ``size`` more bytes at ``now``."""
        if self.rate <= 0:
            return 0.0
        if self._bytes == 0 or now - self._since > 1.0 + self._bytes / self.rate:
            self._since, self._bytes = now, 0
        self._bytes += size
        return max(0.0, self._since + self._bytes / self.rate - now)


class _OriginServer(ThreadingHTTPServer):
    """The origin's HTTP server, with a listen backlog like a real origin's: socketserver's
    default of 5 makes the kernel drop the SYNs of a fleet's burst of GETs (16 agents ×
    100 small filters at once), and each dropped client waits out TCP's retransmission
    (1 s, 3 s, 7 s, 15 s ...): 20 s stalls that S3 or a CDN would not cause."""

    request_queue_size = 1024


class Origin(Service):
    """The origin; ``start()`` listens on a free port of ``host`` (a loopback address),
    ``stop()`` closes it. Exactly one of ``files`` and ``upstream`` is given."""

    def __init__(
        self,
        *,
        files: Path | None = None,
        upstream: str | None = None,
        host: str = "127.0.0.1",
        rate_limit: int = 0,
        connection_rate: int = 0,
        fault_rate: float = 0.0,
        stall_s: float = 5.0,
        seed: int | None = None,
        cache_files: bool = True,
    ) -> None:
        """``host``: another loopback address (127.0.0.2) gives the origin an address of
        its own, as in production, so that agents on 127.0.0.1 can tell its connections
        from their peers' (libtorrent peer classes go by address). The other arguments
        are described in the module docstring."""
        if (files is None) == (upstream is None):
            raise ValueError("an origin serves either files or an upstream S3 server")
        if not 0.0 <= fault_rate <= 1.0:
            raise ValueError("fault_rate must be within 0..1")
        if rate_limit < 0 or connection_rate < 0:
            raise ValueError("rate limits must be >= 0")
        self.root = files.resolve() if files is not None else None
        parts = urlsplit(upstream or "")
        self.upstream = (parts.hostname or "127.0.0.1", parts.port or 80) if upstream else None
        self.host = host
        self.connection_rate = connection_rate
        self.fault_rate = fault_rate
        self.stall_s = stall_s
        self.cache_files = cache_files
        self.bucket = TokenBucket(rate_limit)
        self._random = random.Random(seed)
        self._lock = threading.Lock()
        self._cache_dir: Path | None = None
        self._cache: dict[str, _File] = {}
        self._fetch_locks: dict[str, threading.Lock] = {}
        self._counts = OriginCounts(0, 0, 0, 0, 0)
        self._gets: Counter[str] = Counter()
        self._payload_log: list[PayloadRequest] = []
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # --- addresses and counters ---------------------------------------------------------------

    @property
    def endpoint(self) -> str:
        """The base URL (in front of S3: the agents' S3 ``endpoint_url``)."""
        if self._server is None:
            raise RuntimeError("the origin is not running")
        return f"http://{self.host}:{self._server.server_address[1]}"

    def url(self, name: str) -> str:
        """The URL of file ``name`` (a path below the directory, or an object's path)."""
        return f"{self.endpoint}/{name}"

    def snapshot(self) -> OriginCounts:
        """The counters, read together."""
        with self._lock:
            return self._counts

    @property
    def filter_bytes(self) -> int:
        """Body bytes of counted files sent so far."""
        return self.snapshot().filter_bytes

    @property
    def filter_requests(self) -> int:
        """GET requests for counted files so far."""
        return self.snapshot().filter_requests

    @property
    def forbidden(self) -> int:
        """Requests refused so far because their URL had expired."""
        return self.snapshot().forbidden

    def reset_counters(self) -> None:
        """Set every counter back to 0."""
        with self._lock:
            self._counts = OriginCounts(0, 0, 0, 0, 0)
            self._gets.clear()
            self._payload_log.clear()

    def gets(self, suffix: str) -> int:
        """GET requests so far (304s and errors included) for the paths, without query,
        that end with ``suffix`` (e.g. ``"/index.json"``): how often clients poll an object."""
        with self._lock:
            return sum(n for path, n in self._gets.items() if path.endswith(suffix))

    def payload_requests(self, since: float = 0.0) -> list[PayloadRequest]:
        """The answered GETs of counted files that ended at ``since`` (monotonic) or later,
        oldest first: which ranges the clients asked for, e.g. to find bytes sent twice."""
        with self._lock:
            return [r for r in self._payload_log if r.at >= since]

    def wait_for_payload_requests(self, count: int, timeout_s: float = 5.0) -> list[PayloadRequest]:
        """:meth:`payload_requests` once at least ``count`` are logged, or after
        ``timeout_s``. An answer is logged just after its last byte went out, so a client
        can hold every byte before the log has its request."""
        deadline = time.monotonic() + timeout_s
        while len(requests := self.payload_requests()) < count and time.monotonic() < deadline:
            time.sleep(0.01)
        return requests

    def _add_get(self, path: str) -> None:
        with self._lock:
            self._gets[urlsplit(path).path] += 1

    def _log_payload(self, request: PayloadRequest) -> None:
        with self._lock:
            self._payload_log.append(request)

    def _add(self, *, filter_bytes: int = 0, filter_requests: int = 0, requests: int = 0, faults: int = 0,
             forbidden: int = 0) -> None:
        with self._lock:
            c = self._counts
            self._counts = OriginCounts(c.filter_bytes + filter_bytes, c.filter_requests + filter_requests,
                                        c.requests + requests, c.faults + faults, c.forbidden + forbidden)

    # --- decisions ----------------------------------------------------------------------------

    def counts(self, path: str) -> bool:
        """Whether the bytes of ``path`` (a request path) are counted."""
        return self.root is not None or urlsplit(path).path.endswith(PAYLOAD_SUFFIXES)

    def _fault(self) -> str | None:
        """None, "error" or "stall" for the next request (counted as a request)."""
        with self._lock:
            faulty = self.fault_rate > 0 and self._random.random() < self.fault_rate
            kind = ("error" if self._random.random() < 0.5 else "stall") if faulty else None
        self._add(requests=1, faults=1 if faulty else 0)
        return kind

    def _local(self, method: str, path: str, headers: dict[str, str]) -> _File | None:
        """The file to serve from disk for ``method`` (GET or HEAD) of ``path``; None: not
        found in the directory, or (in front of S3, where only GETs of filter files are
        served from a copy) forward the request."""
        if method not in ("GET", "HEAD"):
            return None
        if self.root is not None:
            name = unquote(urlsplit(path).path).lstrip("/")
            local = (self.root / name).resolve()
            if self.root not in local.parents or not local.is_file():
                return None
            return _File(local, local.stat().st_size, (("Content-Type", "application/octet-stream"),))
        if method != "GET" or not urlsplit(path).path.endswith(PAYLOAD_SUFFIXES):
            return None
        return self._cached(path, headers)

    def _cached(self, path: str, headers: dict[str, str]) -> _File | None:
        """The origin's copy of the filter file at ``path``, fetched whole from the S3
        server on first use (one fetch per file, whatever the concurrency); None when the
        S3 server does not answer 200 or copies are off (the request is then forwarded)."""
        key = urlsplit(path).path
        with self._lock:
            if key in self._cache:
                return self._cache[key]
            fetch_lock = self._fetch_locks.setdefault(key, threading.Lock())
        with fetch_lock:
            with self._lock:
                if key in self._cache:
                    return self._cache[key]
                cache_dir = self._cache_dir
            if cache_dir is None or self.upstream is None:
                return None
            fetched = _fetch(self.upstream, path, headers, cache_dir)
            if fetched is not None:
                with self._lock:
                    self._cache[key] = fetched
            return fetched

    # --- life cycle ---------------------------------------------------------------------------

    def start(self) -> Origin:
        if self._server is not None:
            return self
        if self.cache_files and self.upstream is not None:
            self._cache_dir = Path(tempfile.mkdtemp(prefix="bloomswarm-origin-cache-"))
        server = _OriginServer((self.host, 0), _handler(self))
        server.daemon_threads = True
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1},
                                        name="sandbox-origin", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._thread is not None:
            with contextlib.suppress(RuntimeError):
                self._thread.join(5)
            self._thread = None
        with self._lock:
            cache_dir, self._cache_dir = self._cache_dir, None
            self._cache.clear()
        if cache_dir is not None:
            shutil.rmtree(cache_dir, ignore_errors=True)


def _expired(path: str) -> bool:
    """Whether the URL carries an ``expires`` time in the past."""
    expires = parse_qs(urlsplit(path).query).get("expires")
    return expires is not None and float(expires[0]) < time.time()


def _handler(origin: Origin) -> type[BaseHTTPRequestHandler]:
    """The request handler class of ``origin`` (one instance per connection)."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def setup(self) -> None:
            super().setup()
            self.pace = ConnectionPace(origin.connection_rate)
            self._range_sent = 0

        def log_message(self, format: str, *args: object) -> None:
            pass

        def handle(self) -> None:
            with contextlib.suppress(ConnectionError, TimeoutError):  # clients drop web seeds
                super().handle()

        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else None
            counted = origin.counts(self.path)
            if self.command == "GET":
                origin._add_get(self.path)
            if self.command == "GET" and counted:
                origin._add(filter_requests=1)
            fault = origin._fault()
            if fault == "stall":
                time.sleep(origin.stall_s)
                self.close_connection = True
                return
            if fault == "error":
                self._error(503, b"<Error><Code>SlowDown</Code><Message>injected fault</Message></Error>",
                            "application/xml")
                return
            if _expired(self.path):
                origin._add(forbidden=1)
                self._error(403, b"request has expired")
                return
            headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_HEADERS}
            local = origin._local(self.command, self.path, headers)
            if local is not None:
                self._send_file(local, counted)
            elif origin.upstream is not None:
                self._forward(origin.upstream, body, headers, counted)
            else:
                self._error(404 if self.command in ("GET", "HEAD") else 405, b"not found")

        do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _answer  # noqa: N815

        def _error(self, code: int, payload: bytes, content_type: str = "text/plain") -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(payload)

        def _paced(self, size: int, counted: bool) -> None:
            """Wait until ``size`` more bytes may go: the shared budget (counted bytes
            only), then the connection's pace."""
            if counted:
                origin.bucket.take(size)
            delay = self.pace.delay(size, time.monotonic())
            if delay > 0:
                time.sleep(delay)

        def _send_file(self, local: _File, counted: bool) -> None:
            """Answer a GET or HEAD (a single-range one, like S3) from a file on disk."""
            try:
                wanted = parse_range(self.headers.get("Range"), local.size)
            except RangeNotSatisfiable:
                self.send_response_only(416, "Requested Range Not Satisfiable")
                self.send_header("Content-Range", f"bytes */{local.size}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            first, last = wanted if wanted is not None else (0, local.size - 1)
            self.send_response(206 if wanted is not None else 200)
            for name, value in local.headers:
                self.send_header(name, value)
            self.send_header("Accept-Ranges", "bytes")
            if wanted is not None:
                self.send_header("Content-Range", f"bytes {first}-{last}/{local.size}")
            self.send_header("Content-Length", str(last - first + 1))
            self.end_headers()
            if self.command == "HEAD":
                return
            self.wfile.flush()
            try:
                self._send_range(local, first, last, counted)
            finally:
                if counted:
                    origin._log_payload(PayloadRequest(time.monotonic(), self.client_address[:2],
                                                       urlsplit(self.path).path, first, last,
                                                       self._range_sent))

        def _send_range(self, local: _File, first: int, last: int, counted: bool) -> None:
            """Send bytes ``first..last`` of ``local``, paced; stops when the client goes
            away (``_range_sent``: the bytes sent)."""
            self._range_sent = 0
            with local.path.open("rb") as file:
                offset, left = first, last - first + 1
                while left > 0:
                    step = min(_CHUNK, left)
                    self._paced(step, counted)
                    try:
                        sent = os.sendfile(self.connection.fileno(), file.fileno(), offset, step)
                    except OSError:  # the client went away
                        sent = 0
                    if sent == 0:
                        self.close_connection = True
                        return
                    if counted:
                        origin._add(filter_bytes=sent)
                    self._range_sent += sent
                    offset += sent
                    left -= sent

        def _forward(self, upstream: tuple[str, int], body: bytes | None, headers: dict[str, str],
                     counted: bool) -> None:
            """Pass the request to the S3 server and its answer back, paced."""
            conn = http.client.HTTPConnection(*upstream, timeout=60)
            try:
                conn.request(self.command, self.path, body=body, headers=headers)
                response = conn.getresponse()
                data = response.read()
            finally:
                conn.close()
            self.send_response_only(response.status, response.reason)
            for name, value in response.getheaders():
                if name.lower() not in _NOT_FORWARDED:
                    self.send_header(name, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command == "HEAD":
                return
            counted = counted and self.command == "GET" and 200 <= response.status < 300
            for offset in range(0, len(data), _CHUNK):
                chunk = data[offset: offset + _CHUNK]
                self._paced(len(chunk), counted)
                self.wfile.write(chunk)
                if counted:
                    origin._add(filter_bytes=len(chunk))

    return Handler


def _fetch(upstream: tuple[str, int], path: str, headers: dict[str, str], cache_dir: Path) -> _File | None:
    """GET the whole object at ``path`` from the S3 server into a new file of ``cache_dir``."""
    plain = {k: v for k, v in headers.items() if k.lower() not in ("range", "if-range")}
    conn = http.client.HTTPConnection(*upstream, timeout=300)
    try:
        conn.request("GET", path, headers=plain)
        response = conn.getresponse()
        if response.status != 200:
            response.read()
            return None
        kept = tuple((name, value) for name, value in response.getheaders() if name.lower() in _KEPT_HEADERS)
        handle, name = tempfile.mkstemp(dir=cache_dir, suffix=".bsf")
        size = 0
        with os.fdopen(handle, "wb") as out:
            while chunk := response.read(_FETCH_CHUNK):
                out.write(chunk)
                size += len(chunk)
        return _File(Path(name), size, kept)
    finally:
        conn.close()


__all__ = ["FILTER_SUFFIX", "PAYLOAD_SUFFIXES", "ConnectionPace", "Origin", "OriginCounts", "TokenBucket"]
