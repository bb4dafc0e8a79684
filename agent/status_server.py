"""The agent's HTTP endpoint: ``/healthz``, ``/readyz``, ``/metrics`` and ``/status``.

:class:`StatusServer` (127.0.0.1 by default; an IPv6 host gets an IPv6 socket) serves
``/healthz`` (200 while the process runs), ``/readyz`` (200 once a verified version is
installed, else 503), ``/metrics`` (Prometheus text format, of an
:class:`~.metrics.AgentMetrics` or a
:class:`~.filter_set.FilterSet`) and ``/status`` (JSON, what ``bloomswarm agent status``
prints). A connection has :data:`REQUEST_TIMEOUT_S` to send its request and take the
answer, and at most :data:`MAX_CONNECTIONS` are served at once, so a slow, silent or
flooding client cannot starve the agent or its health checks; a client that hangs up
mid-answer is not an error.
"""

from __future__ import annotations

import contextlib
import errno
import ipaddress
import json
import logging
import socket
import sys
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol, cast

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry
from prometheus_client.exposition import generate_latest

log = logging.getLogger("bloomswarm.agent.status")


SERVE_POLL_S = 0.5
"""How often the idle server thread wakes to check for :meth:`StatusServer.stop` (requests
are answered at once whatever it is; it bounds how long ``stop`` waits)."""

StatusProvider = Callable[[], dict[str, Any]]
"""Returns the JSON object /status serves."""


class MetricsSource(Protocol):
    """What the endpoint serves: a registry for /metrics and readiness for /readyz
    (an :class:`AgentMetrics`, or a :class:`~.filter_set.FilterSet` of many filters)."""

    @property
    def registry(self) -> CollectorRegistry: ...

    @property
    def is_ready(self) -> bool: ...


REQUEST_TIMEOUT_S = 10.0
"""Seconds a connection has, from its accept, to send its whole request and take the
answer; then it is closed (also the timeout of each socket operation). A silent client,
or one dripping its request a byte at a time, holds a slot no longer than this."""

MAX_CONNECTIONS = 64
"""Connections the endpoint serves at once. Past it, the oldest connection that has not
sent its request yet is closed to make room (a flood of idle connections cannot keep
/healthz from answering); when every one is being answered, the new one is closed at once."""

_HUNG_UP_ERRNOS = frozenset({errno.EPIPE, errno.ECONNRESET, errno.ECONNABORTED, errno.ENOTCONN,
                             errno.ESHUTDOWN, errno.ETIMEDOUT, errno.EBADF})
"""OSError numbers of a client that went away (or was closed by the timeout)."""


class StatusServer:
    """The HTTP endpoint, in a daemon thread. ``start`` binds; ``stop`` closes the socket."""

    def __init__(
        self, metrics: MetricsSource, status: StatusProvider, host: str = "127.0.0.1", port: int = 0
    ) -> None:
        self.metrics = metrics
        self.status = status
        self.host = host
        self.port = port
        self._server: _BoundedHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """The base URL, e.g. "http://127.0.0.1:9731" (the bound port), an IPv6 host in
        brackets: "http://[::1]:9731"."""
        return f"http://{self.address}"

    @property
    def address(self) -> str:
        """``host:port`` as written in a URL or a log line (``[::1]:9731`` for IPv6)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    def start(self) -> str:
        """Bind and serve; return the base URL. The socket's family follows the host
        (:func:`address_family`): IPv6 for an IPv6 address (``::`` takes IPv4 connections
        too where the system allows), IPv4 otherwise. OSError when the address is taken or
        the host does not resolve."""
        handler = _make_handler(self.metrics, self.status)
        family = address_family(self.host, self.port)
        self._server = _BoundedHTTPServer((self.host, self.port), handler, family)
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(SERVE_POLL_S,), name="agent-status", daemon=True
        )
        self._thread.start()
        return self.url

    def stop(self) -> None:
        """Stop serving, close the listening socket and hang up the open connections."""
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._thread is not None:
            self._thread.join(5.0)
            self._thread = None


def address_family(host: str, port: int = 0) -> socket.AddressFamily:
    """The socket family to listen on ``host`` with: AF_INET6 for an IPv6 address (it has
    a ``:``); for anything else AF_INET, unless ``host`` is a name that resolves to IPv6
    addresses only. A name that does not resolve gets AF_INET (the bind then fails,
    naming the resolver's reason)."""
    if ":" in host:
        return socket.AF_INET6
    try:
        infos = socket.getaddrinfo(host, port, socket.AF_UNSPEC, socket.SOCK_STREAM, 0, socket.AI_PASSIVE)
    except (OSError, UnicodeError):
        return socket.AF_INET
    families = {info[0] for info in infos}
    return socket.AF_INET6 if families == {socket.AF_INET6} else socket.AF_INET


class _Slot:
    """An open connection: when it must be done by, and whether its request is in."""

    __slots__ = ("answering", "deadline")

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.answering = False


def _hang_up(connection: socket.socket) -> None:
    """End ``connection`` under its handler thread: its reads see EOF, its writes fail."""
    with contextlib.suppress(OSError):  # already gone
        connection.shutdown(socket.SHUT_RDWR)


class _BoundedHTTPServer(ThreadingHTTPServer):
    """One thread a connection, at most :data:`MAX_CONNECTIONS` of them, each closed after
    :data:`REQUEST_TIMEOUT_S`; a client's hang-up is logged at DEBUG, a handler's bug once
    at ERROR with its traceback (socketserver would print a traceback to stderr for each)."""

    daemon_threads = True
    request_queue_size = 128  # the listen backlog: a burst of connections waits, not SYN retries

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler],
                 family: socket.AddressFamily = socket.AF_INET) -> None:
        self._lock = threading.Lock()
        self._open: dict[socket.socket, _Slot] = {}  # insertion order: oldest first
        self.address_family = family  # read by TCPServer.__init__ to make the socket
        super().__init__(address, handler)

    def server_bind(self) -> None:
        """Bind; an IPv6 wildcard listener takes IPv4 connections too (dual stack), so
        that ``agent status`` and probes reach ``::`` on 127.0.0.1."""
        if self.address_family == socket.AF_INET6 and _is_unspecified(str(self.server_address[0])):
            with contextlib.suppress(OSError, AttributeError):  # an IPv6-only system
                self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        super().server_bind()

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._lock:
            admitted = len(self._open) < MAX_CONNECTIONS or self._evict_idle()
            if admitted:
                self._open[request] = _Slot(time.monotonic() + REQUEST_TIMEOUT_S)
        if not admitted:
            log.debug("status endpoint: %d connections being answered, closing %s",
                      MAX_CONNECTIONS, client_address)
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def _evict_idle(self) -> bool:
        """Close the oldest connection still waiting for its request (with the lock held);
        False when every one is being answered."""
        for connection, slot in self._open.items():
            if not slot.answering:
                del self._open[connection]
                _hang_up(connection)
                return True
        return False

    def request_read(self, connection: socket.socket) -> None:
        """The handler of ``connection`` has its request: no longer one to evict."""
        with self._lock:
            slot = self._open.get(connection)
            if slot is not None:
                slot.answering = True

    def service_actions(self) -> None:
        """Close the connections past their deadline (serve_forever calls this at least
        every poll interval)."""
        now = time.monotonic()
        with self._lock:
            expired = [connection for connection, slot in self._open.items() if slot.deadline <= now]
            for connection in expired:
                del self._open[connection]
                _hang_up(connection)

    def shutdown_request(self, request: Any) -> None:
        with self._lock:  # forgotten before it closes: never shut down once its descriptor is reused
            self._open.pop(request, None)
        super().shutdown_request(request)

    def server_close(self) -> None:
        super().server_close()
        with self._lock:
            for connection in self._open:
                _hang_up(connection)
            self._open.clear()

    def handle_error(self, request: Any, client_address: Any) -> None:
        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionError, TimeoutError)) or (
            isinstance(exc, OSError) and exc.errno in _HUNG_UP_ERRNOS
        ):
            log.debug("status endpoint: %s went away: %s", client_address, exc)
            return
        log.error("status endpoint: error answering %s", client_address, exc_info=exc)


def _is_unspecified(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_unspecified
    except ValueError:  # a host name
        return False


def _make_handler(metrics: MetricsSource, status: StatusProvider) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "bloomswarm-agent"
        timeout = REQUEST_TIMEOUT_S  # of each socket operation; the server bounds the whole request

        def parse_request(self) -> bool:
            parsed = super().parse_request()
            cast(_BoundedHTTPServer, self.server).request_read(self.connection)
            return parsed

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            try:
                answer = self._answer(path)
            except Exception:  # a bug behind an endpoint: logged once, the client told
                log.exception("status endpoint: %s failed", path)
                answer = (500, b"internal error\n", "text/plain; charset=utf-8")
            self._send(*answer)

        def _answer(self, path: str) -> tuple[int, bytes, str]:
            if path == "/healthz":
                return 200, b"ok\n", "text/plain; charset=utf-8"
            if path == "/readyz":
                ready = metrics.is_ready
                body = b"ready\n" if ready else b"no verified version installed yet\n"
                return 200 if ready else 503, body, "text/plain; charset=utf-8"
            if path == "/metrics":
                return 200, generate_latest(metrics.registry), CONTENT_TYPE_LATEST
            if path == "/status":
                body = json.dumps(status(), sort_keys=True, indent=2).encode() + b"\n"
                return 200, body, "application/json"
            return 404, b"not found: try /healthz /readyz /metrics /status\n", "text/plain; charset=utf-8"

        def _send(self, code: int, body: bytes, content_type: str) -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            """Silence the per-request log lines."""

    return Handler


__all__ = ["MAX_CONNECTIONS", "REQUEST_TIMEOUT_S", "MetricsSource", "StatusProvider", "StatusServer",
           "address_family"]
