"""A reverse proxy on loopback in front of the S3 server: the origin as the fleet sees it.

It counts the body bytes of filter files (``.../filter.bsf``) it sends — the origin's
egress, measured where it leaves the origin — and can shape the origin like a real one:

- ``rate_limit``: the origin's total egress in bytes/s, shared by all connections (one
  token bucket), e.g. an uplink or a CDN budget;
- ``connection_rate``: each response's own pace in bytes/s, like S3's bounded throughput
  per connection;
- ``fault_rate``: the fraction of requests that fail, half as a 503 and half as a stall
  of ``stall_s`` followed by a dropped connection (a timeout for the client).

Filter files are immutable once published, so the proxy keeps each one it has fetched
from the S3 server in a file of its own (a CDN's cache in front of the bucket) and serves
GETs and ``Range`` GETs of it from there, streamed in chunks. This keeps memory flat for
files of gigabytes and many concurrent downloads: moto's server reads a whole object into
memory for every request, even a range of it. The first request of a file waits for the
fetch; every later one starts at once.

moto does not check signatures, so presigned URLs made for the proxy's address work
through it. Counters are read with :meth:`snapshot` and are safe across threads.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import random
import re
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

from bloomswarm.sandbox.processes import Service

_CHUNK = 16 * 1024
_FETCH_CHUNK = 1024 * 1024
FILTER_SUFFIX = "/filter.bsf"
_RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")


def parse_range(header: str | None, size: int) -> tuple[int, int] | None:
    """The inclusive byte range ``(first, last)`` a single-range ``Range`` header asks of
    a ``size``-byte file; None for the whole file (no header, or one S3 would ignore).
    ValueError when the range starts beyond the end (S3 answers 416)."""
    match = _RANGE.match((header or "").strip())
    if match is None or match.group(1) == match.group(2) == "":
        return None
    first_text, last_text = match.groups()
    if first_text == "":  # a suffix: the last N bytes
        count = int(last_text)
        if count == 0:
            raise ValueError("empty suffix range")
        return max(size - count, 0), size - 1
    first = int(first_text)
    last = size - 1 if last_text == "" else min(int(last_text), size - 1)
    if first >= size:
        raise ValueError(f"range starts at {first}, the file has {size} bytes")
    if first > last:
        return None
    return first, last


@dataclass(frozen=True)
class _Cached:
    """A filter file kept by the proxy."""

    path: Path
    size: int
    headers: tuple[tuple[str, str], ...]
    """The S3 server's response headers worth repeating (ETag, Last-Modified, type)."""


_KEPT_HEADERS = ("etag", "last-modified", "content-type", "x-amz-meta-sha256")


@dataclass(frozen=True)
class OriginCounts:
    """What the proxy has served so far."""

    filter_bytes: int
    """Body bytes of filter-file GETs sent (the origin's payload egress)."""
    filter_requests: int
    """GET requests for filter files."""
    requests: int
    """All requests."""
    faults: int
    """Requests failed on purpose (``fault_rate``)."""


class TokenBucket:
    """A shared byte budget of ``rate`` bytes/s with a burst of ``burst`` bytes;
    :meth:`take` blocks until the bytes may go (rate 0: never blocks)."""

    def __init__(self, rate: int, burst: int = 64 * 1024) -> None:
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


class OriginProxy(Service):
    """The proxy; ``start()`` listens on a free port of ``host`` (a loopback address),
    ``stop()`` closes it."""

    def __init__(
        self,
        upstream: str,
        *,
        rate_limit: int = 0,
        connection_rate: int = 0,
        fault_rate: float = 0.0,
        stall_s: float = 5.0,
        seed: int | None = None,
        cache_files: bool = True,
        host: str = "127.0.0.1",
    ) -> None:
        """``cache_files``: keep a copy of each filter file (they are immutable once
        published); False forwards every request, for a test that changes an object in
        place. ``host``: another loopback address (127.0.0.2) gives the origin an address
        of its own, as in production, so that agents on 127.0.0.1 can tell its connections
        from their peers' (libtorrent peer classes go by address). The other arguments are
        described in the module docstring."""
        if not 0.0 <= fault_rate <= 1.0:
            raise ValueError("fault_rate must be within 0..1")
        if rate_limit < 0 or connection_rate < 0:
            raise ValueError("rate limits must be >= 0")
        parts = urlsplit(upstream)
        self.upstream = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.connection_rate = connection_rate
        self.fault_rate = fault_rate
        self.stall_s = stall_s
        self.cache_files = cache_files
        self.host = host
        self.bucket = TokenBucket(rate_limit)
        self._random = random.Random(seed)
        self._lock = threading.Lock()
        self._cache_dir: Path | None = None
        self._cache: dict[str, _Cached] = {}
        self._fetch_locks: dict[str, threading.Lock] = {}
        self._filter_bytes = self._filter_requests = self._requests = self._faults = 0
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def endpoint(self) -> str:
        """The proxy's base URL (use it as the agents' S3 ``endpoint_url``)."""
        if self._server is None:
            raise RuntimeError("OriginProxy is not running")
        return f"http://{self.host}:{self._server.server_address[1]}"

    @property
    def filter_bytes(self) -> int:
        """Body bytes of filter files sent so far."""
        return self.snapshot().filter_bytes

    @property
    def filter_requests(self) -> int:
        """GET requests for filter files so far."""
        return self.snapshot().filter_requests

    def snapshot(self) -> OriginCounts:
        """The counters, read together."""
        with self._lock:
            return OriginCounts(self._filter_bytes, self._filter_requests, self._requests, self._faults)

    def _fault(self) -> str | None:
        """None, "error" or "stall" for the next request."""
        with self._lock:
            self._requests += 1
            if self.fault_rate <= 0 or self._random.random() >= self.fault_rate:
                return None
            self._faults += 1
            return "error" if self._random.random() < 0.5 else "stall"

    def _sent(self, path: str, size: int) -> None:
        if _is_filter(path):
            with self._lock:
                self._filter_bytes += size

    def _cached(self, path: str, headers: dict[str, str]) -> _Cached | None:
        """The proxy's copy of the filter file at ``path``, fetched whole from the S3 server
        on first use (one fetch per file, whatever the concurrency); None when the S3
        server does not answer 200 (the request is then forwarded as it is)."""
        key = path.split("?", 1)[0]
        with self._lock:
            if key in self._cache:
                return self._cache[key]
            fetch_lock = self._fetch_locks.setdefault(key, threading.Lock())
        with fetch_lock:
            with self._lock:
                if key in self._cache:
                    return self._cache[key]
                cache_dir = self._cache_dir
            if cache_dir is None:
                return None
            fetched = _fetch(self.upstream, path, headers, cache_dir)
            if fetched is not None:
                with self._lock:
                    self._cache[key] = fetched
            return fetched

    def start(self) -> OriginProxy:
        proxy = self
        if self.cache_files:
            self._cache_dir = Path(tempfile.mkdtemp(prefix="bloomswarm-origin-cache-"))

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                pass

            def handle(self) -> None:
                with contextlib.suppress(ConnectionError, TimeoutError):  # clients drop web seeds
                    super().handle()

            def _forward(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                fault = proxy._fault()
                if fault == "stall":
                    time.sleep(proxy.stall_s)
                    self.close_connection = True
                    return
                if fault == "error":
                    payload = b"<Error><Code>SlowDown</Code><Message>injected fault</Message></Error>"
                    self.send_response(503)
                    self.send_header("Content-Type", "application/xml")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                    return
                headers = {k: v for k, v in self.headers.items()
                           if k.lower() not in ("connection", "keep-alive", "proxy-connection")}
                if self.command == "GET" and _is_filter(self.path):
                    cached = proxy._cached(self.path, headers)
                    if cached is not None:
                        self._send_cached(cached)
                        return
                conn = http.client.HTTPConnection(*proxy.upstream, timeout=60)
                try:
                    conn.request(self.command, self.path, body=body, headers=headers)
                    response = conn.getresponse()
                    data = response.read()
                finally:
                    conn.close()
                self.send_response_only(response.status, response.reason)
                for name, value in response.getheaders():
                    if name.lower() not in ("connection", "keep-alive", "transfer-encoding",
                                            "content-length", "server", "date"):
                        self.send_header(name, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command == "HEAD":
                    return
                counted = self.command == "GET" and 200 <= response.status < 300
                started = time.monotonic()
                for offset in range(0, len(data), _CHUNK):
                    self._send_chunk(data[offset: offset + _CHUNK], offset, started, counted)

            def _send_chunk(self, chunk: bytes, offset: int, started: float, counted: bool) -> None:
                """Write one chunk under the shared budget and the connection's pace."""
                if counted:
                    proxy.bucket.take(len(chunk))
                if proxy.connection_rate:
                    delay = started + offset / proxy.connection_rate - time.monotonic()
                    if delay > 0:
                        time.sleep(delay)
                self.wfile.write(chunk)
                if counted:
                    proxy._sent(self.path, len(chunk))

            def _send_cached(self, cached: _Cached) -> None:
                """Answer a GET (or a single-range GET, like S3) from the proxy's copy."""
                try:
                    wanted = parse_range(self.headers.get("Range"), cached.size)
                except ValueError:
                    self.send_response_only(416, "Requested Range Not Satisfiable")
                    self.send_header("Content-Range", f"bytes */{cached.size}")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                first, last = wanted if wanted is not None else (0, cached.size - 1)
                self.send_response_only(206 if wanted is not None else 200)
                for name, value in cached.headers:
                    self.send_header(name, value)
                self.send_header("Accept-Ranges", "bytes")
                if wanted is not None:
                    self.send_header("Content-Range", f"bytes {first}-{last}/{cached.size}")
                self.send_header("Content-Length", str(last - first + 1))
                self.end_headers()
                started = time.monotonic()
                with open(cached.path, "rb") as source:
                    source.seek(first)
                    sent = 0
                    while sent <= last - first:
                        chunk = source.read(min(_CHUNK, last - first + 1 - sent))
                        if not chunk:
                            raise ConnectionError("the cached file is shorter than recorded")
                        self._send_chunk(chunk, sent, started, True)
                        sent += len(chunk)

            def do_GET(self) -> None:
                if _is_filter(self.path):
                    with proxy._lock:
                        proxy._filter_requests += 1
                self._forward()

            do_HEAD = do_PUT = do_POST = do_DELETE = _forward  # noqa: N815

        self._server = ThreadingHTTPServer((self.host, 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="origin-proxy", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None
        with self._lock:
            cache_dir, self._cache_dir = self._cache_dir, None
            self._cache.clear()
        if cache_dir is not None:
            shutil.rmtree(cache_dir, ignore_errors=True)


def _is_filter(path: str) -> bool:
    return path.split("?", 1)[0].endswith(FILTER_SUFFIX)


def _fetch(upstream: tuple[str, int], path: str, headers: dict[str, str], cache_dir: Path) -> _Cached | None:
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
        return _Cached(Path(name), size, kept)
    finally:
        conn.close()
