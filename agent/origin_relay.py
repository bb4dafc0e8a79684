"""A loopback relay between libtorrent and an HTTPS origin, for private versions.

libtorrent opens an ``https://`` web seed of an SSL torrent (a private version) with the
torrent's own TLS context: it trusts only the fleet CA and wants a certificate for ``*``
or the torrent's name, so the origin's real certificate (S3's, a CDN's) is refused and
the web seed never sends a byte (checked with libtorrent 2.1.1; ``connect_web_seed``).
HTTPS trackers are refused the same way (docs/private-swarm.md).

So a private version's HTTPS origin URL is given to libtorrent as
``http://127.0.0.1:PORT/TOKEN``: this relay answers it by fetching the same byte range
from the real URL, verified against the system's trust store like every other request
of the agent. Only loopback listens; a token is an unguessable name for one upstream URL
(a presigned URL with its signature; the same token each time that URL is asked for),
forgotten when that URL expires, or when :data:`MAX_TOKENS` URLs asked for more recently
are held (a CDN's URLs never expire). Plain ``http://`` origins are given to libtorrent
as they are.

The relay's server thread is started on first use and stopped by :meth:`OriginRelay.close`.
"""

from __future__ import annotations

import logging
import secrets
import shutil
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from .transfer import OriginURL, OriginURLFactory

log = logging.getLogger("bloomswarm.swarm")

CHUNK = 256 * 1024
"""Bytes copied at a time from the origin to libtorrent."""
MAX_TOKENS = 4096
"""Upstream URLs the relay holds a token for at most (the least recently asked for go)."""
_FORWARDED = ("Content-Length", "Content-Range", "Content-Type", "Accept-Ranges", "Last-Modified", "ETag")


class OriginRelay:
    """Loopback URLs for HTTPS origin URLs (see the module docstring). ``clock`` gives Unix
    seconds (URL expiry); ``timeout_s`` bounds a connection or a wait for a byte."""

    def __init__(self, *, timeout_s: float = 30.0, user_agent: str = "bloomswarm",
                 clock: Callable[[], float] = time.time) -> None:
        self._timeout_s = timeout_s
        self._user_agent = user_agent
        self._clock = clock
        self._lock = threading.Lock()
        self._upstream: dict[str, OriginURL] = {}
        """Token -> the upstream URL it stands for."""
        self._tokens: dict[str, str] = {}
        """Upstream URL -> its token, the least recently asked for first."""
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def wrap(self, factory: OriginURLFactory) -> OriginURLFactory:
        """``factory``, with each HTTPS URL it makes replaced by a relay URL."""

        def relayed() -> OriginURL:
            return self.url_for(factory())

        return relayed

    def url_for(self, origin: OriginURL) -> OriginURL:
        """A loopback URL that serves ``origin`` (the same expiry); an ``http://`` URL is
        returned as it is. Starts the relay on first use (OSError if it cannot listen)."""
        if not origin.url.lower().startswith("https://"):
            return origin
        server = self._start()
        with self._lock:
            now = self._clock()
            for old in [t for t, u in self._upstream.items() if (u.expires_at or now) < now]:
                self._forget(old)
            token = self._tokens.pop(origin.url, None) or secrets.token_urlsafe(18)
            self._tokens[origin.url] = token  # now the most recently asked for
            self._upstream[token] = origin
            while len(self._tokens) > MAX_TOKENS:
                self._forget(next(iter(self._tokens.values())))
        host, port = server.server_address[:2]
        return OriginURL(f"http://{host!s}:{port}/{token}", origin.expires_at)

    def upstream(self, token: str) -> OriginURL | None:
        """The origin URL a token stands for (None: unknown or forgotten)."""
        with self._lock:
            return self._upstream.get(token)

    def _forget(self, token: str) -> None:
        """Drop ``token`` and its URL (under the lock)."""
        origin = self._upstream.pop(token)
        del self._tokens[origin.url]

    def close(self) -> None:
        """Stop the relay (idempotent); its URLs stop working."""
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
            self._thread = None

    def _start(self) -> ThreadingHTTPServer:
        with self._lock:
            if self._server is None:
                server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
                server.daemon_threads = True
                self._thread = threading.Thread(target=server.serve_forever, name="bloomswarm-relay",
                                                kwargs={"poll_interval": 0.5}, daemon=True)
                self._thread.start()
                self._server = server
                log.info("origin relay for private versions on http://127.0.0.1:%d",
                         server.server_address[1])
            return self._server

    def _fetch(self, origin: OriginURL, range_header: str | None) -> Any:
        request = urllib.request.Request(origin.url, headers={"User-Agent": self._user_agent})
        if range_header:
            request.add_header("Range", range_header)
        return urllib.request.urlopen(request, timeout=self._timeout_s)


def _handler(relay: OriginRelay) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            token = self.path.lstrip("/").split("/", 1)[0].split("?", 1)[0]
            origin = relay.upstream(token)
            if origin is None:
                self._answer(404)
                return
            try:
                upstream = relay._fetch(origin, self.headers.get("Range"))
            except urllib.error.HTTPError as exc:  # the origin's answer, passed on
                self._answer(exc.code)
                return
            except (OSError, ValueError) as exc:
                log.warning("origin relay: %s", exc)
                self._answer(502)
                return
            with upstream:
                self.send_response(upstream.status)
                for name in _FORWARDED:
                    if upstream.headers.get(name) is not None:
                        self.send_header(name, upstream.headers[name])
                if upstream.headers.get("Content-Length") is None:  # no framing: end by closing
                    self.send_header("Connection", "close")
                    self.close_connection = True
                self.end_headers()
                try:
                    shutil.copyfileobj(upstream, self.wfile, CHUNK)
                except OSError:  # libtorrent closed the connection (the web seed went off)
                    self.close_connection = True

        def _answer(self, code: int) -> None:
            self.send_response(code)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("origin relay: " + format, *args)

    return Handler
