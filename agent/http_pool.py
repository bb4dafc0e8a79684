"""HTTP GETs on kept-alive connections: :class:`HttpPool`.

``urllib.request.urlopen`` opens a connection per request and asks the server to close
it, so every poll of the index and every small file fetched directly paid a TCP (and,
over HTTPS, a TLS) handshake on both sides. An :class:`HttpPool` keeps each finished
connection open for the next GET to the same scheme, host and port, and otherwise
behaves as ``urlopen`` does for its callers: redirects are followed, an answer other than
2xx raises ``urllib.error.HTTPError`` (304 included), a network failure raises
``urllib.error.URLError``, and the ``timeout`` applies to the connect and to each read.

A connection goes back to the pool only when its response was read to the end and the
server did not ask to close it. A kept connection the server has closed meanwhile fails
at once on its next request; that GET is sent again, once, on a new connection (a GET
changes nothing, so repeating it is safe). Where the environment names a proxy for the
URL (``http_proxy``, ``https_proxy``, ``no_proxy``, read when the pool is made, as
urllib's default opener reads them once), the GET goes through urllib as before, without
pooling.

Thread-safe: any number of threads may GET at once; each connection serves one of them
at a time.
"""

from __future__ import annotations

import contextlib
import http.client
import io
import ssl
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit

MAX_REDIRECTS = 10
"""Redirects followed per GET (urllib's own limit)."""
MAX_ERROR_BODY = 64 * 1024
"""An error answer's body is read (and its connection kept) up to this size."""
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_STALE = (ConnectionResetError, ConnectionAbortedError, BrokenPipeError, http.client.RemoteDisconnected)
"""What a kept connection the server closed meanwhile raises on its next request."""

_OriginKey = tuple[str, str, int]
"""(scheme, host, port)."""


@dataclass
class _Idle:
    connection: http.client.HTTPConnection
    since: float


class HttpPool:
    """Kept-alive connections for GETs, at most ``max_idle`` per (scheme, host, port), each
    closed after ``idle_timeout_s`` unused. :meth:`close` closes the idle ones; the pool
    stays usable (a later GET opens new connections)."""

    def __init__(self, *, max_idle: int = 8, idle_timeout_s: float = 30.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if max_idle < 0 or not idle_timeout_s > 0:
            raise ValueError("max_idle must be >= 0 and idle_timeout_s positive")
        self.max_idle = max_idle
        self.idle_timeout_s = idle_timeout_s
        self._clock = clock
        self._lock = threading.Lock()
        self._idle: dict[_OriginKey, list[_Idle]] = {}
        self._tls: ssl.SSLContext | None = None
        self._proxies = urllib.request.getproxies()
        """The environment's proxies, read once (as urllib's default opener does)."""
        self.connections_opened = 0
        """Connections opened so far (a kept one reused does not count)."""

    @contextlib.contextmanager
    def get(self, url: str, headers: Mapping[str, str] | None = None, *,
            timeout: float) -> Iterator[http.client.HTTPResponse]:
        """GET ``url``; yields the 2xx response (read it within the block). Raises as
        ``urllib.request.urlopen`` does (see the module's docstring)."""
        sent = dict(headers or {})
        if self._proxied(url):
            opener = urllib.request.build_opener(urllib.request.ProxyHandler(self._proxies))
            with opener.open(urllib.request.Request(url, headers=sent), timeout=timeout) as answer:
                yield answer
            return
        for _ in range(MAX_REDIRECTS + 1):
            key = _origin_key(url)
            connection, response = self._send(key, url, sent, timeout)
            location = response.getheader("Location")
            if response.status in _REDIRECTS and location:
                self._finish(key, connection, response, drain=True)
                url = urljoin(url, location)
                if urlsplit(url).scheme not in ("http", "https"):
                    raise urllib.error.URLError(f"redirected to a URL that is not http(s): {url}")
                continue
            if not 200 <= response.status < 300:
                body = self._finish(key, connection, response, drain=True)
                raise urllib.error.HTTPError(url, response.status, response.reason,
                                             response.headers, io.BytesIO(body))
            try:
                yield response
            finally:
                self._finish(key, connection, response, drain=False)
            return
        raise urllib.error.URLError(f"more than {MAX_REDIRECTS} redirects from {url}")

    def close(self) -> None:
        """Close every idle connection."""
        with self._lock:
            idle, self._idle = self._idle, {}
        for entries in idle.values():
            for entry in entries:
                entry.connection.close()

    def idle_connections(self) -> int:
        """Connections kept open for reuse now."""
        with self._lock:
            return sum(len(entries) for entries in self._idle.values())

    def _proxied(self, url: str) -> bool:
        """Whether the environment sends ``url`` through a proxy."""
        parts = urlsplit(url)
        return parts.scheme.lower() in self._proxies and not urllib.request.proxy_bypass(parts.hostname or "")

    def _send(self, key: _OriginKey, url: str, headers: dict[str, str],
              timeout: float) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        """Send the GET on a kept connection (once more on a new one if that one turns out
        closed) or a new one; the connection and its response's status and headers."""
        parts = urlsplit(url)
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        kept = self._take(key)
        while True:
            connection = kept if kept is not None else self._open(key, timeout)
            connection.timeout = timeout
            if connection.sock is not None:
                connection.sock.settimeout(timeout)
            try:
                connection.request("GET", target, headers=headers)
                return connection, connection.getresponse()
            except _STALE:
                connection.close()
                if kept is None:
                    raise urllib.error.URLError("the server closed the connection") from None
                kept = None  # the server closed it while idle: once more, on a new one
            except OSError as exc:
                connection.close()
                raise urllib.error.URLError(exc) from exc
            except BaseException:
                connection.close()
                raise

    def _finish(self, key: _OriginKey, connection: http.client.HTTPConnection,
                response: http.client.HTTPResponse, *, drain: bool) -> bytes:
        """Keep ``connection`` when its response is read to the end (``drain``: read what
        is left of a short body first; returns it) and may be reused; else close it."""
        body = b""
        if drain and not response.isclosed():
            with contextlib.suppress(OSError, http.client.HTTPException):
                length = response.length
                if length is None or length <= MAX_ERROR_BODY:
                    body = response.read(MAX_ERROR_BODY + 1)
        if response.isclosed() and not response.will_close and len(body) <= MAX_ERROR_BODY:
            self._keep(key, connection)
        else:
            response.close()
            connection.close()
        return body[:MAX_ERROR_BODY]

    def _take(self, key: _OriginKey) -> http.client.HTTPConnection | None:
        """The most recently kept connection to ``key``; None when there is none or it
        has been idle too long (then every one kept is: they are closed)."""
        stale: list[_Idle] = []
        with self._lock:
            entries = self._idle.get(key)
            if not entries:
                return None
            newest = entries.pop()
            if self._clock() - newest.since < self.idle_timeout_s:
                return newest.connection
            stale = [newest, *entries]
            entries.clear()
        for entry in stale:
            entry.connection.close()
        return None

    def _keep(self, key: _OriginKey, connection: http.client.HTTPConnection) -> None:
        with self._lock:
            entries = self._idle.setdefault(key, [])
            if len(entries) < self.max_idle:
                entries.append(_Idle(connection, self._clock()))
                return
        connection.close()

    def _open(self, key: _OriginKey, timeout: float) -> http.client.HTTPConnection:
        scheme, host, port = key
        with self._lock:
            self.connections_opened += 1
        if scheme == "https":
            if self._tls is None:
                self._tls = ssl.create_default_context()
            return http.client.HTTPSConnection(host, port, timeout=timeout, context=self._tls)
        return http.client.HTTPConnection(host, port, timeout=timeout)

    def __enter__(self) -> HttpPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _origin_key(url: str) -> _OriginKey:
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"not an http(s) URL: {url!r}")
    return scheme, parts.hostname, parts.port or (443 if scheme == "https" else 80)




__all__ = ["MAX_REDIRECTS", "HttpPool"]
