"""The agent's metrics (Prometheus, in its own registry) and its HTTP endpoint.

Metrics, all prefixed ``bloomswarm_agent_``:

==========================================  =========  ======================================
name                                        type       meaning
==========================================  =========  ======================================
``ready``                                   gauge      1 once a verified version is installed
``current_version``                         gauge      version ``current`` points at (0: none)
``current_version_created_timestamp_seconds``  gauge   its creation time (manifest), Unix s
``current_version_age_seconds``             gauge      now minus that creation time
``pointer_age_seconds``                     gauge      now minus ``issued_at`` of the newest
                                                       verified latest.json seen (0: none yet)
``pointer_issued_timestamp_seconds``        gauge      that ``issued_at``, Unix s (0: none yet)
``pointer_stale``                           gauge      1 while that age exceeds
                                                       ``watch.max_pointer_age_s`` (> 0)
``download_version``                        gauge      version being downloaded (0: none)
``download_progress``                       gauge      its verified fraction, 0..1
``peers``                                   gauge      connected peers over all transfers
``bytes_from_peers_total``                  counter    payload bytes received from agents
``bytes_from_origin_total``                 counter    payload bytes received from the origin
``bytes_uploaded_total``                    counter    payload bytes sent to agents
``hash_failures_total``                     counter    pieces that failed their hash check
``verification_failures_total{check}``      counter    announcements or downloads refused by
                                                       a failed check (verify.py's labels)
``refusals_total{reason}``                  counter    pointers or downloads refused by
                                                       policy: replay, downgrade,
                                                       file_too_large, disk_space
``origin_errors_total``                     counter    failed reads of the announcement source
``transfer_errors_total``                   counter    downloads the transfer reported failed
``swaps_total``                             counter    flips of ``current``
``swap_latency_seconds``                    histogram  announcement first seen -> ``current``
                                                       flipped
``delta_bytes_total``                       counter    payload bytes of deltas received (from
                                                       agents and the origin; also counted
                                                       in the two ``bytes_from_*`` above)
``delta_installs_total``                    counter    versions installed from a delta
``delta_fallbacks_total{reason}``           counter    deltas given up for the full file:
                                                       base_missing, missing, delta_hash,
                                                       base_modified, corrupt, wrong_result,
                                                       stalled, no_room (see deltas.py)
==========================================  =========  ======================================

A dedicated :class:`~prometheus_client.CollectorRegistry` keeps these apart from any
other metrics of the process (and lets tests build one agent after another).

The endpoint (:class:`StatusServer`, 127.0.0.1 by default) serves ``/healthz`` (200 while
the process runs), ``/readyz`` (200 once a verified version is installed, else 503),
``/metrics`` (Prometheus text format) and ``/status`` (JSON, what ``bloomswarm agent
status`` prints). A connection has :data:`REQUEST_TIMEOUT_S` to send its request and take
the answer, and at most :data:`MAX_CONNECTIONS` are served at once, so a slow, silent or
flooding client cannot starve the agent or its health checks; a client that hangs up
mid-answer is not an error.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any, Protocol, cast

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import generate_latest

from .transfer import TransferKey, TransferStatus, key_version

if TYPE_CHECKING:
    from .certificates import CertificateState

log = logging.getLogger("bloomswarm.agent.status")

PREFIX = "bloomswarm_agent_"
SWAP_LATENCY_BUCKETS = (0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1800, 3600)
"""Seconds; from a small file over a fast network to a large file over a slow one."""


class AgentMetrics:
    """The agent's metrics. Methods are thread-safe (prometheus_client's are)."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self._clock = clock
        self._created_at: float | None = None
        self.ready = Gauge(PREFIX + "ready", "1 once a verified version is installed", registry=r)
        self.current_version = Gauge(
            PREFIX + "current_version", "Version current points at (0: none)", registry=r
        )
        self.current_created = Gauge(
            PREFIX + "current_version_created_timestamp_seconds",
            "Creation time of the current version (from its manifest), Unix seconds",
            registry=r,
        )
        self.current_age = Gauge(
            PREFIX + "current_version_age_seconds",
            "Seconds since the current version was created (0: none installed)",
            registry=r,
        )
        self.current_age.set_function(self._age)
        self.pointer_age = Gauge(
            PREFIX + "pointer_age_seconds",
            "Seconds since the newest verified latest.json seen was issued (0: none seen yet)",
            registry=r,
        )
        self.pointer_issued = Gauge(
            PREFIX + "pointer_issued_timestamp_seconds",
            "issued_at of the newest verified latest.json seen, Unix seconds (0: none seen yet)",
            registry=r,
        )
        self.pointer_stale = Gauge(
            PREFIX + "pointer_stale",
            "1 while the newest verified latest.json is older than watch.max_pointer_age_s",
            registry=r,
        )
        self.download_version = Gauge(
            PREFIX + "download_version", "Version being downloaded (0: none)", registry=r
        )
        self.download_progress = Gauge(
            PREFIX + "download_progress", "Verified fraction of the download, 0..1", registry=r
        )
        self.peers = Gauge(PREFIX + "peers", "Connected peers over all transfers", registry=r)
        self.bytes_from_peers = Counter(
            PREFIX + "bytes_from_peers", "Payload bytes received from other agents", registry=r
        )
        self.bytes_from_origin = Counter(
            PREFIX + "bytes_from_origin", "Payload bytes received from the origin", registry=r
        )
        self.bytes_uploaded = Counter(
            PREFIX + "bytes_uploaded", "Payload bytes sent to other agents", registry=r
        )
        self.hash_failures = Counter(
            PREFIX + "hash_failures", "Pieces that failed their hash check", registry=r
        )
        self.verification_failures = Counter(
            PREFIX + "verification_failures",
            "Announcements or downloads refused because a check failed",
            ["check"],
            registry=r,
        )
        self.refusals = Counter(
            PREFIX + "refusals",
            "Pointers or downloads refused by policy (replay, downgrade, size, disk space)",
            ["reason"],
            registry=r,
        )
        self.origin_errors = Counter(
            PREFIX + "origin_errors", "Failed reads of the announcement source", registry=r
        )
        self.transfer_errors = Counter(
            PREFIX + "transfer_errors", "Downloads the transfer reported as failed", registry=r
        )
        self.swaps = Counter(PREFIX + "swaps", "Flips of the current link", registry=r)
        self.swap_latency = Histogram(
            PREFIX + "swap_latency_seconds",
            "Seconds from an announcement first seen to current flipped to it",
            buckets=SWAP_LATENCY_BUCKETS,
            registry=r,
        )
        self.delta_bytes = Counter(
            PREFIX + "delta_bytes",
            "Payload bytes of deltas received from agents and the origin",
            registry=r,
        )
        self.delta_installs = Counter(
            PREFIX + "delta_installs", "Versions installed from a delta", registry=r
        )
        self.delta_fallbacks = Counter(
            PREFIX + "delta_fallbacks",
            "Deltas given up for the full file, by reason",
            ["reason"],
            registry=r,
        )
        self.refused_peers = Counter(
            PREFIX + "refused_peers",
            "Peers refused: outside the allowed networks (address), or failing a private "
            "version's TLS handshake (tls_handshake, plaintext)",
            ["reason"],
            registry=r,
        )
        self.certificate_expiry = Gauge(
            PREFIX + "certificate_expiry_seconds",
            "Seconds until this agent's certificate for private versions expires "
            "(negative once expired), by certificate file",
            ["certificate"],
            registry=r,
        )
        self._seen: dict[TransferKey, TransferStatus] = {}
        self._refused_seen: dict[str, int] = {}
        self._certificates_seen: set[str] = set()
        self._lock = threading.Lock()
        self._ready = False

    @property
    def is_ready(self) -> bool:
        """A verified version is installed (what /readyz answers)."""
        return self._ready

    def _age(self) -> float:
        created = self._created_at
        return max(self._clock() - created, 0.0) if created is not None else 0.0

    def set_current(self, version: int | None, created_at: float | None) -> None:
        """Record the installed version (None: nothing installed) and its creation time."""
        installed = version is not None
        self.current_version.set(version or 0)
        self.ready.set(1 if installed else 0)
        self._ready = installed
        self._created_at = created_at if installed else None
        self.current_created.set(self._created_at or 0)

    def set_pointer_freshness(self, issued_at: float | None, age_s: float | None, stale: bool) -> None:
        """Record the newest verified pointer's issue time and age (None: none seen yet)."""
        self.pointer_issued.set(issued_at or 0)
        self.pointer_age.set(age_s or 0.0)
        self.pointer_stale.set(1 if stale else 0)

    def record_swap(self, latency_s: float) -> None:
        """Count one flip of ``current`` and its latency."""
        self.swaps.inc()
        self.swap_latency.observe(max(latency_s, 0.0))

    def account(self, status: TransferStatus) -> None:
        """Count a transfer's bytes and hash failures since its previous snapshot.

        Totals in a status grow from the transfer's start; the counters grow by the
        difference to the previous snapshot of the same version (a smaller total means
        the transfer restarted: all of it is new).
        """
        with self._lock:
            old = self._seen.get(status.key)
            received = 0
            for counter, attr in (
                (self.bytes_from_peers, "bytes_from_peers"),
                (self.bytes_from_origin, "bytes_from_origin"),
                (self.bytes_uploaded, "bytes_uploaded"),
                (self.hash_failures, "hash_failures"),
            ):
                new_total = getattr(status, attr)
                old_total = getattr(old, attr) if old is not None else 0
                delta = new_total - old_total if new_total >= old_total else new_total
                if delta > 0:
                    counter.inc(delta)
                    if attr.startswith("bytes_from_"):
                        received += delta
            if status.base is not None and received > 0:
                self.delta_bytes.inc(received)
            self._seen[status.key] = status

    def forget(self, key: TransferKey) -> None:
        """The transfer of ``key`` was removed: a later one starts counting from zero."""
        with self._lock:
            self._seen.pop(key, None)

    def observe_transfers(
        self, statuses: Iterable[TransferStatus], downloading: TransferKey | None
    ) -> None:
        """Update every transfer metric from fresh snapshots of all transfers."""
        statuses = list(statuses)
        for status in statuses:
            self.account(status)
        with self._lock:
            for key in set(self._seen) - {s.key for s in statuses}:
                del self._seen[key]
        self.peers.set(sum(s.peers for s in statuses))
        progress = next((s.progress for s in statuses if s.key == downloading), 0.0)
        self.download_version.set(key_version(downloading) if downloading is not None else 0)
        self.download_progress.set(progress if downloading is not None else 0.0)

    def observe_peer_access(self, refused: Mapping[str, int],
                            certificates: Iterable[CertificateState]) -> None:
        """Count the refusals since the last call (``refused``: totals by reason) and set
        each certificate's seconds left; a certificate no longer held loses its series."""
        with self._lock:
            for reason, total in refused.items():
                new = total - self._refused_seen.get(reason, 0)
                if new > 0:
                    self.refused_peers.labels(reason).inc(new)
                self._refused_seen[reason] = total
        held = {state.certificate: state.expires_in_s for state in certificates}
        with self._lock:
            for gone in self._certificates_seen - held.keys():  # removed or renamed: no stale alert
                self.certificate_expiry.remove(gone)
            self._certificates_seen = set(held)
        for certificate, seconds in held.items():
            self.certificate_expiry.labels(certificate).set(seconds)

    def samples(self) -> dict[str, float]:
        """Every sample as ``name{label="value"}`` -> value (for /status and the CLI)."""
        result: dict[str, float] = {}
        for family in self.registry.collect():
            for sample in family.samples:
                if sample.name.endswith("_created"):
                    continue
                labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
                result[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
        return result


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
        """The base URL, e.g. "http://127.0.0.1:9731" (the bound port)."""
        return f"http://{self.host}:{self.port}"

    def start(self) -> str:
        """Bind and serve; return the base URL. OSError when the address is taken."""
        handler = _make_handler(self.metrics, self.status)
        self._server = _BoundedHTTPServer((self.host, self.port), handler)
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

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler]) -> None:
        self._lock = threading.Lock()
        self._open: dict[socket.socket, _Slot] = {}  # insertion order: oldest first
        super().__init__(address, handler)

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


__all__ = ["MAX_CONNECTIONS", "PREFIX", "REQUEST_TIMEOUT_S", "AgentMetrics", "MetricsSource",
           "StatusProvider", "StatusServer"]
