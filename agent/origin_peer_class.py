"""The session's peer classes: rate limits that hold on a LAN, and the origin's own class.

libtorrent exempts peers on local networks from rate limits by default; here every
address (IPv4 and IPv6) is put into the global peer class with ``set_peer_class_filter``,
so ``upload_rate_limit`` and ``download_rate_limit`` hold on a data-centre LAN and on
loopback. When ``origin_rate_limit`` or ``origin_download_priority`` asks for it, a second
peer class ("origin") is given to the origin's addresses: the address in the URL, or
those its host name resolves to. With an allow-list (``allowed_peer_networks``) those
addresses are also passed on, to be let through the session's ``ip_filter``
(agent/peer_access.py). Host names are resolved in a background thread (never
on the caller's), again every :data:`RESOLVE_TTL_S`; the web seed is added only once its
addresses are in the class. The class caps the web seed at ``origin_rate_limit`` and gives
it ``origin_download_priority`` times a peer's share of a capped, full download link.
Caveat: a peer that shares an address with the origin (an agent on the object store's
host; the local fleet puts its origin on 127.0.0.2 for this) is in that class too.
"""

from __future__ import annotations

import concurrent.futures
import ipaddress
import logging
import socket
from collections.abc import Callable
from urllib.parse import urlsplit

import libtorrent as lt

from .config import SwarmConfig

log = logging.getLogger("bloomswarm.swarm")

RESOLVE_TTL_S = 300.0
"""Seconds before the addresses of an origin host name are looked up again."""


class OriginPeerClass:
    """The peer class filter of one session, and the origin's addresses in it.

    Called from the session's one thread; only :func:`_resolve` runs on the resolver
    thread. ``clock`` is monotonic seconds.
    """

    def __init__(self, session: lt.session, config: SwarmConfig, clock: Callable[[], float],
                 *, on_addresses: Callable[[frozenset[str]], None] | None = None) -> None:
        self._session: lt.session | None = session
        """None once closed: the session's owner destroys it (this must not keep it alive)."""
        self._clock = clock
        self._on_addresses = on_addresses
        self._tracking = on_addresses is not None and bool(config.allowed_peer_networks)
        """Whether the origin's addresses are needed besides its class: the allow-list
        must let the web seed through (``on_addresses`` is told every change)."""
        self._class: int | None = None
        self._ips: set[str] = set()
        self._resolved: dict[str, float] = {}
        """Host name -> monotonic instant of its last resolution."""
        self._resolving: dict[str, concurrent.futures.Future[set[str]]] = {}
        self._resolver: concurrent.futures.ThreadPoolExecutor | None = None
        if config.origin_rate_limit > 0 or config.origin_download_priority > 1:
            self._class = int(session.create_peer_class("origin"))
            info = session.get_peer_class(self._class)
            info["download_limit"] = config.origin_rate_limit
            info["download_priority"] = config.origin_download_priority
            session.set_peer_class(self._class, info)
        self._apply_filter()

    def addresses_ready(self, url: str, now: float) -> bool:
        """With an origin class (or an allow-list), whether the URL's addresses are in it (a
        host name is resolved in the background first: False until then). Always True
        without either."""
        if self._class is None and not self._tracking:
            return True
        host, port = _url_host_port(url)
        ip = _ip_literal(host)
        if ip is not None:
            if ip not in self._ips:
                self._ips.add(ip)
                self._apply_filter()
            return True
        resolved_at = self._resolved.get(host)
        stale = resolved_at is None or now - resolved_at > RESOLVE_TTL_S
        if stale and host not in self._resolving:
            if self._resolver is None:
                self._resolver = concurrent.futures.ThreadPoolExecutor(
                    max_workers=1, thread_name_prefix="bloomswarm-resolve"
                )
            self._resolving[host] = self._resolver.submit(_resolve, host, port)
        return resolved_at is not None

    def collect(self) -> None:
        """Put the addresses of finished resolutions into the origin class."""
        for host, future in list(self._resolving.items()):
            if not future.done():
                continue
            del self._resolving[host]
            try:
                addresses = future.result()
            except (OSError, UnicodeError) as exc:
                if self._tracking:  # the allow-list would block it: try again, no web seed meanwhile
                    log.warning("cannot resolve the origin %s: %s; resolving again", host, exc)
                    continue
                log.warning("cannot resolve the origin %s: %s; its rate limit may not apply", host, exc)
                addresses = set()
            self._resolved[host] = self._clock()
            if addresses - self._ips:
                self._ips |= addresses
                self._apply_filter()

    def close(self) -> None:
        """Stop the resolver thread (resolutions under way are abandoned) and let go of the
        session, so that its owner's ``del`` destroys it (and closes its sockets) at once.
        Idempotent; the filter is no longer changed afterwards."""
        if self._resolver is not None:
            self._resolver.shutdown(wait=False, cancel_futures=True)
            self._resolver = None
        self._session = None

    def _apply_filter(self) -> None:
        """Every address in the global class (so limits hold on LANs); origin addresses
        in the origin class too."""
        if self._session is None:
            return
        global_class = 1 << int(lt.session.global_peer_class_id)
        rules = lt.ip_filter()
        rules.add_rule("0.0.0.0", "255.255.255.255", global_class)
        rules.add_rule("::", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", global_class)
        if self._class is not None:
            for ip in sorted(self._ips):
                rules.add_rule(ip, ip, global_class | (1 << self._class))
        self._session.set_peer_class_filter(rules)
        if self._tracking and self._on_addresses is not None:
            self._on_addresses(frozenset(self._ips))


def _ip_literal(host: str) -> str | None:
    """``host`` as a normalised IP address string, or None for a host name."""
    try:
        return str(ipaddress.ip_address(host.strip("[]")))
    except ValueError:
        return None


def _url_host_port(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return parts.hostname or "", port


def _resolve(host: str, port: int) -> set[str]:
    """The IP addresses ``host`` resolves to (run in the resolver thread)."""
    return {str(info[4][0]) for info in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)}
