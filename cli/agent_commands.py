"""``bloomswarm agent run`` (the daemon) and ``bloomswarm agent status`` (ask a running one).

Settings come from ``--config FILE`` (or ``$BLOOMSWARM_AGENT_CONFIG``), ``BLOOMSWARM_AGENT_*``
variables and the flags here, in that order of precedence (see
:mod:`bloomswarm.agent.config` and docs/agent.md).

The daemon's modules (libtorrent, boto3, prometheus_client) are imported by the handlers
when they run: parsing a command line, or printing its ``--help``, loads none of them.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import logging
import os
import signal
import socket
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from bloomswarm.agent.config import CONFIG_ENV, AgentConfig, StatusConfig, load_config
from bloomswarm.common.errors import ConfigError, StorageError

from .arguments import positive_int, positive_seconds_value
from .commands import HELP

if TYPE_CHECKING:
    from bloomswarm.agent.announcements import AnnouncementSource
    from bloomswarm.agent.origin import Origin
    from bloomswarm.agent.status_server import StatusServer
    from bloomswarm.agent.swarm import Swarm
    from bloomswarm.agent.transfer import Transfer
    from bloomswarm.common.signing import VerifyKey

log = logging.getLogger("bloomswarm.agent")

_FLAG_SETTINGS = {
    "data_dir": "data_dir",
    "public_keys": "public_keys",
    "transfer": "transfer",
    "bucket": "s3.bucket",
    "prefix": "s3.prefix",
    "endpoint_url": "s3.endpoint_url",
    "region": "s3.region",
    "cdn_base_url": "origin.cdn_base_url",
    "poll_interval": "watch.poll_interval_s",
    "status_host": "status.host",
    "status_port": "status.port",
}
"""Flag destination -> dotted setting it overrides."""


def register(commands: Any) -> None:
    """Add ``agent run`` and ``agent status`` to the ``commands`` subparsers object."""
    agent = commands.add_parser("agent", help=HELP["agent"])
    sub = agent.add_subparsers(dest="agent_command", metavar="ACTION", parser_class=type(agent))
    sub.required = True

    run = sub.add_parser("run", help="run the agent until SIGTERM/SIGINT")
    run.add_argument("--config", type=Path, metavar="FILE",
                     help=f"TOML configuration file (default: ${CONFIG_ENV})")
    run.add_argument("--data-dir", type=Path, metavar="DIR", help="the data directory applications read")
    run.add_argument("--public-key", type=Path, action="append", dest="public_keys", metavar="PATH",
                     help="trusted publisher public key (PEM); repeatable")
    run.add_argument("--transfer", choices=("swarm", "direct"),
                     help="swarm: BitTorrent (default); direct: HTTP from the origin only")
    run.add_argument("--bucket", help="S3 bucket (the origin)")
    run.add_argument("--prefix", help="key prefix inside the bucket")
    run.add_argument("--endpoint-url", metavar="URL", help="S3-compatible endpoint (MinIO, ...)")
    run.add_argument("--region", help="S3 region")
    run.add_argument("--cdn-base-url", metavar="URL", help="HTTP(S) origin instead of the S3 API")
    run.add_argument("--poll-interval", type=float, metavar="SECONDS",
                     help="seconds between polls of latest.json (2)")
    run.add_argument("--status-host", metavar="ADDRESS", help="address of the status endpoint (127.0.0.1)")
    run.add_argument("--status-port", type=positive_int, metavar="PORT",
                     help=f"port of the status endpoint ({StatusConfig().port}; 0: any)")
    run.set_defaults(handler=run_agent)

    status = sub.add_parser("status", help="show what a running agent is doing")
    status.add_argument("--url", metavar="URL",
                        help=f"the agent's status endpoint (default http://127.0.0.1:{StatusConfig().port}, "
                        "or the one in --config)")
    status.add_argument("--config", type=Path, metavar="FILE", help="read the endpoint from this config")
    status.add_argument("--json", action="store_true", help="print the raw JSON")
    status.add_argument("--timeout", type=positive_seconds_value, default=5.0, metavar="SECONDS",
                        help=argparse.SUPPRESS)
    status.set_defaults(handler=run_status)


def load_agent_config(args: argparse.Namespace) -> AgentConfig:
    """The configuration: file (``--config`` or $BLOOMSWARM_AGENT_CONFIG), environment, flags."""
    path = args.config or (Path(os.environ[CONFIG_ENV]) if os.environ.get(CONFIG_ENV) else None)
    overrides = {setting: getattr(args, dest, None) for dest, setting in _FLAG_SETTINGS.items()}
    if overrides["public_keys"] is not None:
        overrides["public_keys"] = tuple(overrides["public_keys"])
    return load_config(path, environ=os.environ, overrides=overrides)


# --- run --------------------------------------------------------------------------------------


def build_transfer(config: AgentConfig) -> Transfer:
    """The transfer the configuration asks for (the swarm with its small files routed to
    a direct transfer when ``swarm.direct_max_bytes`` is set)."""
    from bloomswarm.agent.direct import DirectTransfer

    if config.transfer == "direct":
        return DirectTransfer(config.direct)
    from bloomswarm.agent.swarm import Swarm

    swarm = Swarm(config.swarm)
    if config.swarm.direct_max_bytes == 0:
        return swarm
    from bloomswarm.agent.size_routed_transfer import SizeRoutedTransfer

    return SizeRoutedTransfer(swarm, DirectTransfer(config.direct), config.swarm.direct_max_bytes)


def swarm_of(transfer: Transfer) -> Swarm | None:
    """The libtorrent session inside ``transfer``, if any (its peer access guard)."""
    from bloomswarm.agent.size_routed_transfer import SizeRoutedTransfer
    from bloomswarm.agent.swarm import Swarm

    inner = transfer.swarm if isinstance(transfer, SizeRoutedTransfer) else transfer
    return inner if isinstance(inner, Swarm) else None


def build_source(
    config: AgentConfig, keys: Sequence[VerifyKey]
) -> tuple[AnnouncementSource, Origin]:
    """The announcement source and origin of the configured S3 bucket or CDN."""
    from bloomswarm.agent.announcements import (
        HttpAnnouncements,
        ObjectStoreAnnouncements,
        PresignedPollReader,
    )
    from bloomswarm.agent.origin import CdnOrigin, S3Origin
    from bloomswarm.common.storage import S3ObjectStore

    if config.s3 is not None:
        store = S3ObjectStore(config.s3)
        reader = PresignedPollReader(store, expiry_s=config.origin.presign_expiry_s,
                                     timeout_s=config.s3.read_timeout_s)
        return ObjectStoreAnnouncements(reader, keys), S3Origin(store, config.origin.presign_expiry_s)
    base = config.origin.cdn_base_url
    if base is None:  # AgentConfig guarantees one origin
        raise ConfigError("no origin configured")
    return HttpAnnouncements(base, keys, timeout_s=config.origin.http_timeout_s), CdnOrigin(base)


def run_agent(args: argparse.Namespace) -> int:
    """``agent run``: the signal handlers first (:class:`_Signals`), then the slow start-up
    (imports, configuration, keys, data directory, transfer, status endpoint): a SIGHUP in
    it is remembered (or logged as ignored by an agent of one filter) and a SIGTERM or
    SIGINT stops the agent cleanly, exit 0, instead of killing it."""
    with _signals() as signals:
        return _run_agent(args, signals)


def _run_agent(args: argparse.Namespace, signals: _Signals) -> int:
    from bloomswarm.agent.daemon import AgentDaemon
    from bloomswarm.agent.install import prepare_data_dir
    from bloomswarm.agent.logfmt import log_event
    from bloomswarm.agent.metrics import AgentMetrics
    from bloomswarm.agent.status_server import StatusServer
    from bloomswarm.common.datadir import FILTERS_DIR
    from bloomswarm.common.dir_spread import spread_subdirectories
    from bloomswarm.common.signing import load_public_keys

    config = load_agent_config(args)
    signals.set_reloads(bool(config.filters))
    keys = load_public_keys(config.public_keys)
    try:  # an unusable data directory fails before anything starts
        if config.filters:  # each filter's daemon prepares its own folder under filters/
            filters_dir = config.data_dir / FILTERS_DIR
            filters_dir.mkdir(mode=0o755, parents=True, exist_ok=True)
            spread_subdirectories(filters_dir)
        else:
            prepare_data_dir(config.data_dir)
    except (OSError, ValueError) as exc:  # ValueError: a path the OS refuses (a NUL)
        reason = getattr(exc, "strerror", None) or exc
        raise ConfigError(f"cannot use data_dir {config.data_dir}: {reason}") from exc
    if signals.stop.is_set():  # stopped while starting: nothing to shut down yet
        return 0
    if config.filters:
        return _run_filters(args, config, signals)
    source, origin = build_source(config, keys)
    metrics = AgentMetrics()
    transfer = build_transfer(config)
    daemon = AgentDaemon(config, source, transfer, origin, keys, metrics=metrics, background_polls=True,
                         peer_access=swarm_of(transfer))
    server = _start_server(StatusServer(metrics, daemon.status, config.status.host, config.status.port),
                           transfer)
    log_event(log, logging.INFO, "listening", url=server.url, transfer=config.transfer, pid=os.getpid())
    try:
        daemon.run(signals.stop)  # a stop set while starting: it starts and shuts down at once
    finally:
        server.stop()
    return 0


def _run_filters(args: argparse.Namespace, config: AgentConfig, signals: _Signals) -> int:
    """The agent of ``config``'s ``[[filters]]``; SIGHUP reloads the configuration (one
    received while starting is applied once the filters run)."""
    from bloomswarm.agent.logfmt import log_event
    from bloomswarm.agent.status_server import StatusServer

    from .agent_filters import all_public_keys, build_filter_set

    all_public_keys(config)  # every key file readable before anything starts
    transfer = build_transfer(config)
    agent = build_filter_set(config, transfer, swarm_of(transfer))
    endpoint = StatusServer(agent, agent.status, config.status.host, config.status.port)
    server = _start_server(endpoint, transfer)
    log_event(log, logging.INFO, "listening", url=server.url, transfer=config.transfer, pid=os.getpid(),
              filters=len(config.filters))
    try:
        agent.run(signals.stop, reload=signals.reload, load_config=lambda: load_agent_config(args))
    finally:
        server.stop()
    return 0


def _start_server(server: StatusServer, transfer: Transfer) -> StatusServer:
    """Bind the status endpoint; ConfigError (the transfer closed) when the address is taken."""
    try:
        server.start()
    except OSError as exc:
        transfer.close()
        raise ConfigError(
            f"cannot listen on {server.address} for the status endpoint: {exc.strerror or exc}"
        ) from exc
    return server


class _Signals:
    """What SIGTERM, SIGINT and SIGHUP asked of ``agent run``, from its first moment.

    SIGTERM and SIGINT set :attr:`stop`. SIGHUP sets :attr:`reload` (logged "reloading";
    while starting, "reload_requested": applied once the filters run), unless the agent
    is known to reload nothing (:meth:`set_reloads` False: one filter), where it is logged
    as "reload_ignored", never fatal. The handlers take no lock: they run on the main
    thread, between any two of its steps."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.reload = threading.Event()
        self._reloads: bool | None = None  # None: not known yet (the config not loaded)

    def set_reloads(self, reloads: bool) -> None:
        """Whether the agent reloads on SIGHUP (an agent of ``[[filters]]``); without, a
        SIGHUP already received is logged as ignored and forgotten."""
        self._reloads = reloads
        if not reloads and self.reload.is_set():
            self.reload.clear()
            self._log_ignored()

    def on_stop(self, signum: int, _frame: FrameType | None) -> None:
        from bloomswarm.agent.logfmt import log_event

        log_event(log, logging.INFO, "stopping", signal=signal.Signals(signum).name)
        self.stop.set()

    def on_reload(self, _signum: int, _frame: FrameType | None) -> None:
        from bloomswarm.agent.logfmt import log_event

        if self._reloads is False:  # one filter: nothing reloads without a restart; do not die of it
            self._log_ignored()
            return
        if self._reloads is None:
            log_event(log, logging.INFO, "reload_requested", signal="SIGHUP",
                      when="once the agent has started")
        else:
            log_event(log, logging.INFO, "reloading", signal="SIGHUP")
        self.reload.set()

    @staticmethod
    def _log_ignored() -> None:
        from bloomswarm.agent.logfmt import log_event

        log_event(log, logging.WARNING, "reload_ignored", signal="SIGHUP",
                  reason="only an agent of [[filters]] reloads its filters; restart to apply settings")


@contextlib.contextmanager
def _signals() -> Iterator[_Signals]:
    """Install :class:`_Signals`' handlers of SIGTERM, SIGINT and SIGHUP; the previous
    handlers are restored on exit."""
    signals = _Signals()
    handlers: dict[signal.Signals, Any] = {signal.SIGTERM: signals.on_stop, signal.SIGINT: signals.on_stop,
                                           signal.SIGHUP: signals.on_reload}
    previous = {sig: signal.signal(sig, handler) for sig, handler in handlers.items()}
    try:
        yield signals
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


# --- status -----------------------------------------------------------------------------------


STATUS_MAX_BYTES = 16 << 20
"""The largest /status answer ``agent status`` reads (an agent's is a few KiB, one of many
filters some hundred KiB); a longer one is refused, not read."""

_NOT_A_STATUS = (LookupError, TypeError, ValueError, ArithmeticError, AttributeError, RecursionError, OSError)
"""What formatting raises on a JSON object that is not an agent's status (a missing key, a
string where a number goes, a timestamp out of range, nesting too deep...)."""


def run_status(args: argparse.Namespace) -> int:
    url = args.url
    if url is None:
        status_config = StatusConfig()
        if args.config is not None:
            status_config = load_config(args.config, environ=os.environ).status
        url = status_config.local_url  # an IPv6 host in brackets, a wildcard as 127.0.0.1
    base = url.rstrip("/")
    status = fetch_status(base, timeout=args.timeout)
    try:
        if args.json:
            text = json.dumps(status, indent=2, sort_keys=True)
        elif "filters" in status:
            from .agent_filters import format_filters_status

            text = format_filters_status(url, status)
        else:
            text = format_status(url, status)
    except _NOT_A_STATUS as exc:
        raise StorageError(_not_a_status(base, _reason(exc))) from None
    print(text)
    return 0


def _not_a_status(url: str, why: str) -> str:
    return f"{url} did not answer with an agent's status: {why}"


def _reason(exc: BaseException) -> str:
    if isinstance(exc, KeyError) and exc.args:
        return f"no {exc.args[0]!r}"
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class _Deadline:
    """Hangs up the connections of one request when its time is up, so that the whole
    answer (headers and body) must arrive within it, however slowly the server drips it:
    a socket timeout alone bounds each read only."""

    def __init__(self, seconds: float) -> None:
        self.expired = False
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True

    def __enter__(self) -> _Deadline:
        self._timer.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._timer.cancel()
        self._timer.join()

    def watch(self, sock: socket.socket) -> None:
        """Hang up ``sock`` (a connection just made) at the deadline, or now if it is past."""
        with self._lock:
            self._sockets.append(sock)
            if self.expired:
                self._hang_up(sock)

    def _expire(self) -> None:
        with self._lock:
            self.expired = True
            for sock in self._sockets:
                self._hang_up(sock)

    @staticmethod
    def _hang_up(sock: socket.socket) -> None:
        with contextlib.suppress(OSError):  # already closed
            # the plain socket's shutdown, under TLS too: the blocked read sees the end
            socket.socket.shutdown(sock, socket.SHUT_RDWR)


def _status_opener(deadline: _Deadline) -> Any:
    """urllib's opener (proxies, redirects, HTTP errors as usual) whose HTTP and HTTPS
    connections ``deadline`` hangs up."""
    import http.client
    import urllib.request

    class Watched(http.client.HTTPConnection):
        def connect(self) -> None:
            super().connect()  # HTTPS: the plain socket, before its handshake
            deadline.watch(self.sock)

    class WatchedHTTPS(http.client.HTTPSConnection, Watched):
        pass

    class HTTPHandler(urllib.request.HTTPHandler):
        def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
            return self.do_open(Watched, req)

    class HTTPSHandler(urllib.request.HTTPSHandler):
        def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
            return self.do_open(WatchedHTTPS, req)

    return urllib.request.build_opener(HTTPHandler, HTTPSHandler)


def _read_bounded(response: Any, limit: int) -> bytes | None:
    """The body of ``response``; None when it is longer than ``limit`` bytes (not read)."""
    length = (response.headers.get("Content-Length") or "").strip()
    if length.isascii() and length.isdigit() and int(length) > limit:
        return None
    body = bytearray()
    while chunk := response.read(64 * 1024):
        body += chunk
        if len(body) > limit:
            return None
    return bytes(body)


def _refuse_constant(name: str) -> None:
    raise ValueError(f"{name} is not a number JSON allows")


def fetch_status(url: str, *, timeout: float = 5.0) -> dict[str, Any]:
    """GET ``{url}/status`` within ``timeout`` seconds overall; StorageError with a one-line
    reason when the agent is not there or the answer is not a JSON object of at most
    :data:`STATUS_MAX_BYTES`."""
    import http.client
    import urllib.error

    timed_out = f"no agent answering at {url}: timed out"
    with _Deadline(timeout) as deadline:
        try:
            response = _status_opener(deadline).open(f"{url}/status", timeout=timeout)
        except urllib.error.HTTPError as exc:
            exc.close()
            raise StorageError(f"{url}/status answered HTTP {exc.code}") from None
        except http.client.InvalidURL as exc:
            raise ConfigError(f"not a URL an agent answers at: {url!r}: {exc}") from None
        except (OSError, http.client.HTTPException) as exc:  # urllib.error.URLError is an OSError
            if deadline.expired:
                raise StorageError(timed_out) from None
            reason = getattr(exc, "reason", None) or exc
            raise StorageError(f"no agent answering at {url}: {reason}") from None
        except ValueError as exc:  # a URL urllib cannot use
            raise StorageError(f"{url}/status did not return JSON: {exc}") from None
        with response:
            try:
                body = _read_bounded(response, STATUS_MAX_BYTES)
            except (OSError, http.client.HTTPException) as exc:
                if deadline.expired:
                    raise StorageError(timed_out) from None
                raise StorageError(_not_a_status(url, f"the answer broke off: {_reason(exc)}")) from None
    if deadline.expired:  # the body may be cut short
        raise StorageError(timed_out)
    if body is None:
        raise StorageError(_not_a_status(url, f"longer than {STATUS_MAX_BYTES >> 20} MiB"))
    try:
        data = json.loads(body, parse_constant=_refuse_constant)
    except (ValueError, RecursionError) as exc:
        raise StorageError(_not_a_status(url, f"not JSON: {_reason(exc)}")) from None
    if not isinstance(data, dict):
        raise StorageError(_not_a_status(url, "not a JSON object"))
    return data


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"  # pragma: no cover


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    if seconds < 86400:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 86400}d{seconds % 86400 // 3600:02d}h"


def _labelled(metrics: dict[str, float], name: str) -> str:
    prefix = f"bloomswarm_agent_{name}_total{{"
    parts = []
    for key, value in sorted(metrics.items()):
        if key.startswith(prefix) and value:
            label = key[len(prefix):-1].split("=", 1)[1].strip('"')
            parts.append(f"{label} {value:.0f}")
    return ", ".join(parts) or "none"


def _pointer_line(pointer: dict[str, Any] | None) -> str:
    """The newest verified latest.json and its freshness (watch.max_pointer_age_s)."""
    if not pointer:
        return "pointer      none seen yet"
    issued_at = dt.datetime.fromtimestamp(pointer["issued_at"], dt.timezone.utc)
    issued = issued_at.strftime("%Y-%m-%d %H:%M:%S UTC")
    line = (f"pointer      v{pointer['version']}{' pinned' if pointer.get('pinned') else ''}, "
            f"sequence {pointer['sequence']}, issued {issued} (age {_duration(pointer['age_s'])})")
    limit = pointer.get("max_age_s") or 0
    if pointer.get("stale"):
        line += (f": STALE, older than {_duration(limit)}: the publisher stopped refreshing latest.json "
                 "or the origin serves an old one")
    elif limit:
        line += f", fresh (limit {_duration(limit)})"
    return line


def format_status(url: str, status: dict[str, Any]) -> str:
    """The /status JSON for a person: one line per topic."""
    m: dict[str, float] = status.get("metrics", {})

    def metric(name: str) -> float:
        return float(m.get(f"bloomswarm_agent_{name}", 0.0))

    lines = [f"agent        {url} (data dir {status.get('data_dir', '?')})",
             f"ready        {'yes' if status.get('ready') else 'no: no verified version installed yet'}"]
    current = status.get("current_version")
    if current is not None:
        created = metric("current_version_created_timestamp_seconds")
        when = dt.datetime.fromtimestamp(created, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
        lines.append(f"current      v{current}, created {when} "
                     f"(age {_duration(metric('current_version_age_seconds'))})")
    else:
        lines.append("current      none")
    lines.append(_pointer_line(status.get("pointer")))
    installed = ", ".join(f"v{v}" for v in status.get("installed_versions", [])) or "none"
    seeding = ", ".join(f"v{v}" for v in status.get("seeding", [])) or "none"
    lines.append(f"installed    {installed} (seeding {seeding})")
    download = status.get("download")
    if download:
        line = (f"download     v{download['version']}: {download['state']} "
                f"{download['progress']:.1%} of {_size(download['size'])}, {download['peers']} peers")
        if download.get("retry_in_s") is not None and download.get("failures"):
            line += f", {download['failures']} failures, retry in {download['retry_in_s']:.0f}s"
        lines.append(line)
    else:
        lines.append("download     none")
    lines.append(f"traffic      from peers {_size(metric('bytes_from_peers_total'))}, "
                 f"from origin {_size(metric('bytes_from_origin_total'))}, "
                 f"uploaded {_size(metric('bytes_uploaded_total'))}, "
                 f"{metric('peers'):.0f} peers, {metric('hash_failures_total'):.0f} hash failures")
    swap = status.get("last_swap")
    swaps = f"swaps        {metric('swaps_total'):.0f}"
    if swap:
        swaps += (f", last v{swap.get('previous') or '-'} -> v{swap['version']} "
                  f"in {swap['latency_s']:.1f}s")
    lines.append(swaps)
    lines.append(f"failures     verification: {_labelled(m, 'verification_failures')}; "
                 f"refused: {_labelled(m, 'refusals')}; "
                 f"origin errors {metric('origin_errors_total'):.0f}; "
                 f"transfer errors {metric('transfer_errors_total'):.0f}")
    error = status.get("last_error")
    if error:
        at = status.get("last_error_at")
        stamp = dt.datetime.fromtimestamp(at, dt.timezone.utc).strftime("%H:%M:%S UTC ") if at else ""
        lines.append(f"last error   {stamp}{error}")
    return "\n".join(lines)
