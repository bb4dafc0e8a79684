"""Who may be a peer: the allow-list of networks, and counting the peers refused.

Two guards keep outsiders out of the swarm, each usable alone:

- **The allow-list** (``swarm.allowed_peer_networks``): libtorrent's ``ip_filter`` blocks
  every address but those networks. libtorrent applies the same filter to web seeds, so
  the origin's addresses (as :class:`~.origin_peer_class.OriginPeerClass` resolves them)
  are allowed too; trackers are exempt (``apply_ip_filter_to_trackers`` off).
- **Private versions** (SSL torrents, :mod:`.certificates`): a peer must complete a TLS
  handshake with a certificate from the torrent's CA.

Every refusal is counted by reason (:data:`REFUSAL_REASONS`) and logged at most once per
reason every :data:`LOG_INTERVAL_S` (:class:`RefusalLog`, a pure core), with the count
since the last line.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import libtorrent as lt

if TYPE_CHECKING:
    from .certificates import CertificateStore

LOG_INTERVAL_S = 60.0
"""Seconds between two log lines about refusals of one reason."""

REFUSAL_REASONS = ("address", "tls_handshake", "plaintext")
"""``address``: outside the allowed networks; ``tls_handshake``: the TLS handshake of a
private version failed (no certificate, one from another CA, not TLS at all), or a TLS
session made for another torrent; ``plaintext``: a plain BitTorrent connection to a
private version."""

_ALLOWED, _BLOCKED = 0, 1  # libtorrent ip_filter flags
_LAST_V4, _LAST_V6 = "255.255.255.255", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"


def allowed_ranges(networks: Iterable[str]) -> list[tuple[str, str]]:
    """The (first, last) address of each network (CIDR or one address), in input order.
    ValueError for an entry that is neither."""
    ranges = []
    for entry in networks:
        network = ipaddress.ip_network(entry, strict=False)
        ranges.append((str(network[0]), str(network[-1])))
    return ranges


def make_ip_filter(networks: Iterable[str], extra_addresses: Iterable[str] = ()) -> lt.ip_filter:
    """An ``ip_filter`` that blocks every IPv4 and IPv6 address except ``networks`` and
    ``extra_addresses`` (the origin's)."""
    rules = lt.ip_filter()
    rules.add_rule("0.0.0.0", _LAST_V4, _BLOCKED)
    rules.add_rule("::", _LAST_V6, _BLOCKED)
    for first, last in allowed_ranges(networks):
        rules.add_rule(first, last, _ALLOWED)
    for address in extra_addresses:
        rules.add_rule(address, address, _ALLOWED)
    return rules


def refusal_reason(alert: lt.alert) -> str | None:
    """The reason ``alert`` reports a refused peer, or None when it does not."""
    if isinstance(alert, lt.peer_blocked_alert):
        return "address"
    if isinstance(alert, lt.peer_error_alert) and alert.op == lt.operation_t.ssl_handshake:
        return "tls_handshake"
    if isinstance(alert, lt.peer_disconnected_alert) and alert.error.category().name() == "libtorrent":
        return _DISCONNECT_REASONS.get(alert.error.message())
    return None


_DISCONNECT_REASONS = {"SSL connection required": "plaintext", "invalid SSL certificate": "tls_handshake"}
"""libtorrent's messages for ``errors::requires_ssl_connection`` (a plain connection to a
private version) and ``errors::invalid_ssl_cert`` (a TLS session made for another torrent);
the Python binding has no names for libtorrent's error values."""


@dataclass
class RefusalLog:
    """Counts refusals by reason; says when a log line is due (pure: times are given).

    :meth:`record` returns the number of refusals of that reason since its last line when
    a line is due (the first refusal, then at most one per ``interval_s``), else None.
    """

    interval_s: float = LOG_INTERVAL_S
    totals: dict[str, int] = field(default_factory=dict)
    """Refusals by reason since the start."""
    _unlogged: dict[str, int] = field(default_factory=dict)
    _logged_at: dict[str, float] = field(default_factory=dict)

    def record(self, reason: str, now: float) -> int | None:
        self.totals[reason] = self.totals.get(reason, 0) + 1
        self._unlogged[reason] = self._unlogged.get(reason, 0) + 1
        last = self._logged_at.get(reason)
        if last is not None and now - last < self.interval_s:
            return None
        self._logged_at[reason] = now
        return self._unlogged.pop(reason)


class PeerAccess(Protocol):
    """What the daemon reports of a transfer that refuses peers (the swarm): refusal
    counts, and the certificates for private versions (None: none configured)."""

    @property
    def refusals(self) -> RefusalLog: ...

    @property
    def certificates(self) -> CertificateStore | None: ...
