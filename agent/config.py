"""The agent's configuration: one frozen dataclass per component, from a file, the environment, flags.

Precedence, lowest first: the defaults written on the dataclasses below (the only place
defaults live), a TOML file, ``BLOOMSWARM_AGENT_*`` environment variables, command-line
flags. Every setting has a dotted name; the file uses it as table and key, the
environment upper-cases it with ``_`` for ``.`` behind ``BLOOMSWARM_AGENT_``::

    # agent.toml                                        # the same from the environment
    data_dir = "/var/lib/bloomswarm"                    # BLOOMSWARM_AGENT_DATA_DIR
    public_keys = ["/etc/bloomswarm/publisher.pub"]     # BLOOMSWARM_AGENT_PUBLIC_KEYS (a,b)

    [s3]                                                # the origin: S3 ...
    bucket = "filters"                                  # BLOOMSWARM_AGENT_S3_BUCKET
    prefix = "fleet-a"                                  # BLOOMSWARM_AGENT_S3_PREFIX

    [origin]                                            # ... or a CDN in front of it
    cdn_base_url = "https://cdn.example.com/fleet-a"    # BLOOMSWARM_AGENT_ORIGIN_CDN_BASE_URL

    [watch]
    poll_interval_s = 2.0                               # BLOOMSWARM_AGENT_WATCH_POLL_INTERVAL_S

    [[filters]]                                         # named filters: the file only
    name = "blocklist"

The ``[s3]`` table takes every field of :class:`~bloomswarm.common.storage.S3Config`;
credentials come from boto3's standard chain, never from here. docs/agent.md lists every
setting. An unknown setting — in the file or as a ``BLOOMSWARM_AGENT_*`` variable — or a
value of the wrong type (nan or inf where a number belongs, a string where a bool does)
raises ConfigError naming it, in every table alike: :mod:`bloomswarm.common.settings`
does the reading and checking for both components; the dataclasses check ranges, upper
bounds included (timeouts and intervals at most a day, integers that go into libtorrent
within 32 bits, base URLs that ``/latest.json`` can be appended to), so that a value that
would fail on every poll is refused at start.

``[[filters]]`` tables (:mod:`.filter_config`) list the named filters the agent follows;
they are no setting: the file alone gives them (``BLOOMSWARM_AGENT_FILTERS`` is refused).
Without them the agent follows the one filter at the bucket prefix, as it always has.
"""

from __future__ import annotations

import ipaddress
import re
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from bloomswarm.common.errors import ConfigError
from bloomswarm.common.settings import (
    INT32_MAX,
    MAX_INTERVAL_S,
    MAX_TIMEOUT_S,
    ONE_DAY,
    SettingsLoader,
    check_at_most,
    check_http_url,
)
from bloomswarm.common.storage import S3Config

from .filter_config import FILTERS_KEY, FilterConfig, check_filters, filters_from_toml

ENV_PREFIX = "BLOOMSWARM_AGENT_"
CONFIG_ENV = "BLOOMSWARM_AGENT_CONFIG"
"""Environment variable naming the config file when ``--config`` is not given."""

KIB = 1024
MIB = 1024 * KIB
GIB = 1024 * MIB
BLOCK_SIZE = 16 * KIB
"""libtorrent's transfer unit: every piece is requested in blocks of this size."""
MAX_PRESIGN_EXPIRY_S = 7 * 24 * 3600
"""S3's longest presigned URL lifetime (SigV4): 604800 s, 7 days."""
MAX_POINTER_AGE_S = 365 * 24 * 3600
"""Longest ``watch.max_pointer_age_s``: a year (the publisher refreshes far more often)."""
LIBTORRENT_INT = "libtorrent takes a 32-bit int"
"""Why an integer that goes into libtorrent is at most :data:`INT32_MAX`."""
MIN_CHUNK_SIZE = 4 * KIB
"""Smallest ``direct.chunk_size``."""
MAX_CHUNK_SIZE = 64 * MIB
"""Largest ``direct.chunk_size``: every running download holds a buffer this large."""
MAX_DIRECT_CONCURRENCY = 1024
"""Most ``direct.concurrency``: each download runs on a thread of its own."""
TransferKind = Literal["swarm", "direct"]


LISTEN_KEY = "swarm.listen_interfaces"
MAX_PORT = 65535
_LISTEN_ENTRY = re.compile(
    r"(?:\[(?P<ipv6>[^\]]*)\]|(?P<host>[^\s:\[\]\",]+))\s*:\s*(?P<port>\d+)\s*(?P<flags>[a-z]*)"
)
"""One ``listen_interfaces`` entry as libtorrent reads it: ``[IPv6]:port`` or
``IPv4-or-device:port``, then libtorrent's flags: ``s`` a TLS listener, ``l`` a local one."""


@dataclass(frozen=True)
class ListenInterface:
    """One entry of ``swarm.listen_interfaces``, checked by :func:`parse_listen_interfaces`."""

    entry: str
    """The entry as written (without surrounding blanks)."""
    address: str
    """An IP address (IPv6 without its brackets) or a network device name (``eth0``)."""
    port: int
    """0..65535; 0: any free port."""
    ssl: bool = False
    """libtorrent's ``s`` flag: a TLS listener (private versions' peers connect to it)."""
    local: bool = False
    """libtorrent's ``l`` flag: a listener for the local network."""

    @property
    def host(self) -> str:
        """The address as written in an entry: an IPv6 address in brackets."""
        return f"[{self.address}]" if ":" in self.address else self.address


def parse_listen_interfaces(value: str) -> tuple[ListenInterface, ...]:
    """The entries of a ``listen_interfaces`` string, in order; ConfigError naming
    ``swarm.listen_interfaces`` and the entry when one is not libtorrent's
    ``address:port`` (``[::1]:6881`` for IPv6, a device name for the address, a trailing
    ``s`` for TLS, ``l`` for local) or its port is beyond 0..65535: libtorrent would only
    skip such an entry with a warning alert. Empty entries (``a,,b``) are skipped, as
    libtorrent skips them; no entry at all is refused."""
    entries: list[ListenInterface] = []
    for raw in value.split(","):
        entry = raw.strip()
        if not entry:
            continue
        match = _LISTEN_ENTRY.fullmatch(entry)
        if match is None:
            raise ConfigError(
                f"{LISTEN_KEY}: {entry!r} is not address:port (an IPv6 address in brackets: "
                f"[::1]:6881; a device name may stand for the address: eth0:6881)"
            )
        flags = match["flags"]
        if any(flag not in "sl" for flag in flags) or len(set(flags)) != len(flags):
            raise ConfigError(
                f"{LISTEN_KEY}: {entry!r} ends in {flags!r}; after the port only libtorrent's "
                f"flags may follow, each once: s (a TLS listener), l (local network)"
            )
        port = int(match["port"])
        if port > MAX_PORT:
            raise ConfigError(f"{LISTEN_KEY}: {entry!r} has port {port}, not in 0..{MAX_PORT}")
        address = match["ipv6"] if match["ipv6"] is not None else match["host"]
        _check_listen_address(entry, address, ipv6=match["ipv6"] is not None)
        entries.append(ListenInterface(entry, address, port, ssl="s" in flags, local="l" in flags))
    if not entries:
        raise ConfigError(f"{LISTEN_KEY} must not be empty")
    return tuple(entries)


def _check_listen_address(entry: str, address: str, *, ipv6: bool) -> None:
    """ConfigError unless ``address`` is an IPv6 address (``ipv6``: it was in brackets), an
    IPv4 address, or a device name (anything else that does not look like an IPv4 address:
    digits and dots alone are an address, and a wrong one is refused)."""
    try:
        if ipv6:
            ipaddress.IPv6Address(address)
        elif re.fullmatch(r"[0-9.]+", address):
            ipaddress.IPv4Address(address)
    except ValueError:
        kind = "IPv6" if ipv6 else "IPv4"
        raise ConfigError(f"{LISTEN_KEY}: {entry!r}: {address!r} is not an {kind} address") from None


def tls_port(port: int) -> int:
    """The port of the TLS listener added beside a plain one on ``port``: the next one
    (0 stays 0, any free port)."""
    return 0 if port == 0 else port + 1


def with_tls_listeners(listen_interfaces: str) -> str:
    """``listen_interfaces`` with a TLS listener (libtorrent's ``s`` flag) beside each
    plain one, on :func:`tls_port`, unless some entry already has the flag (the operator
    chose the TLS listeners). Private versions' peers connect to it; the plain port keeps
    the DHT and public versions. ConfigError naming ``swarm.listen_interfaces`` and the
    entry when an entry is bad (:func:`parse_listen_interfaces`) or its port is 65535,
    which leaves no next port."""
    entries = parse_listen_interfaces(listen_interfaces)
    if any(e.ssl for e in entries):
        return ",".join(e.entry for e in entries)
    added = []
    for e in entries:
        port = tls_port(e.port)
        if port > MAX_PORT:
            raise ConfigError(
                f"{LISTEN_KEY}: {e.entry!r}: with swarm.certificate_dirs a TLS listener goes on "
                f"the next port, and {e.port} is the last; choose a lower port or list the "
                f"TLS listener yourself ({e.entry},{e.host}:{e.port - 1}s)"
            )
        taken = next((other for other in entries if port and other.port == port
                      and _same_socket_address(e.address, other.address)), None)
        if taken is not None:
            raise ConfigError(
                f"{LISTEN_KEY}: {e.entry!r}: with swarm.certificate_dirs a TLS listener goes on "
                f"the next port, {port}, which {taken.entry!r} already listens on; leave a port "
                f"free after each plain one or list the TLS listeners yourself (an entry ending in s)"
            )
        added.append(f"{e.host}:{port}s{'l' if e.local else ''}")
    return ",".join([e.entry for e in entries] + added)


def _same_socket_address(one: str, other: str) -> bool:
    """Whether listeners on ``one`` and ``other`` with the same port would clash: the same
    address, or either the wildcard of the other's family (``0.0.0.0``, ``::``)."""
    if one == other:
        return True
    return bool({one, other} & {"0.0.0.0", "::"}) and (":" in one) == (":" in other)



OriginPolicy = Literal["fallback", "always"]
StripeFetchMode = Literal["ranges", "web_seed"]


@dataclass(frozen=True)
class SwarmConfig:
    """Settings of the libtorrent session (the agent's ``[swarm]`` table).

    Every default is here and nowhere else. Rates are bytes per second, 0 for no limit.
    """

    listen_interfaces: str = "0.0.0.0:6881,[::]:6881"
    """libtorrent ``listen_interfaces``: comma-separated ``address:port`` (TCP, and UDP for
    the DHT); an IPv6 address in brackets (``[::1]:6881``), a device name may stand for the
    address (``eth0:6881``). Port 0 picks a free port (:meth:`Swarm.listen_port` tells
    which). With ``certificate_dirs``, a TLS listener (``address:port+1s``) is added beside
    each, for private versions, unless some entry already ends in ``s`` (libtorrent's TLS
    flag); a port of 65535 then has no next port and is refused. Checked at load: a port
    beyond 0..65535 or an entry that is not ``address:port`` is refused, naming it
    (:func:`parse_listen_interfaces`)."""
    trackers: tuple[str, ...] = ()
    """Tracker announce URLs added to every torrent."""
    torrent_trackers: bool = False
    """Also announce to the trackers listed in the ``.torrent``. Off by default: that list
    lies outside the info dictionary, so the signed info-hash does not cover it, and
    someone who can write to the bucket could send agents to a tracker of theirs."""
    enable_dht: bool = True
    """Find peers through the DHT (trackerless)."""
    dht_bootstrap_nodes: tuple[str, ...] = ()
    """``host:port`` of DHT nodes to join through (other agents); empty: the DHT starts
    alone until another node contacts it. Public routers are never used."""
    dht_restrict_ips: bool = True
    """libtorrent's per-address DHT defences: one node per IP address in routing tables
    and searches, and an address that sends more than 5 DHT packets/s is ignored for 5
    minutes. Turn off when several agents share an address (tests on loopback, NAT):
    otherwise the bootstrap node blocks them all as one flooding address."""
    enable_lsd: bool = False
    """Local Service Discovery: multicast announces on the LAN."""
    upload_rate_limit: int = 0
    """Cap on all uploads of the session."""
    download_rate_limit: int = 0
    """Cap on all downloads of the session, origin included."""
    origin_rate_limit: int = 0
    """Cap on downloads from the origin (web seed, stripe fetches) alone."""
    origin_download_priority: int = 8
    """When the download cap is reached, the origin connection's share of it against one
    peer's (1..255; libtorrent's peer class priority). The origin is the only source of
    the pieces nobody has yet: behind 30 peers at equal shares it would get 1/31 of the
    link and hold back the whole fleet."""
    origin_policy: OriginPolicy = "fallback"
    """"fallback": the origin only when the swarm cannot deliver (agent/origin_policy.py,
    docs/origin-policy.md); "always": the web seed from the start."""
    origin_grace_s: float = 5.0
    """Most seconds a download waits to see its swarm before its turns at the origin
    count ("fallback"). Turns count as soon as a tracker or the DHT answered and the
    peers it named are connected (milliseconds on a LAN); this cap applies only when
    nobody answers."""
    origin_stagger_s: float = 0.5
    """Seconds between two agents' turns at the origin, per origin stripe ("fallback"):
    the agent ranked p-th for a version waits ``p * stagger / stripes`` after settling
    (agent/origin_policy.py). Long enough for an agent's first piece from the origin to
    reach the peers, so that the next agent sees it and stays off."""
    origin_max_delay_s: float = 60.0
    """Cap of the staggered wait (large swarms)."""
    origin_starved_s: float = 2.0
    """A download is starved when no payload byte came from a peer for this long (and no
    peer holds a piece it needs)."""
    origin_request_bytes: int = 4 * MIB
    """Largest HTTP range request to the origin (``urlseed_max_request_bytes``). Smaller
    requests let agents that use the origin at the same time overlap less."""
    origin_stripes: int = 8
    """Agents that may fetch from the origin at once, each a disjoint stripe of the
    pieces ("fallback"; see agent/origin_stripes.py); a running fleet larger than this, up
    to ``origin_stripes_per_agent_up_to`` agents, gets one stripe per agent
    (docs/origin-policy.md). 1: one agent at a time, all pieces."""
    origin_stripes_per_agent_up_to: int = 64
    """The largest running fleet dealt one stripe per agent (``max(origin_stripes, fleet
    size)`` stripes); a larger fleet gets ``origin_stripes``. One stripe each needs every
    agent to know its exact place, i.e. to see the whole fleet, and hundreds of agents on
    the origin at once, each with an estimated place, collide (docs/fleet-scale.md)."""
    origin_stripe_fetch: StripeFetchMode = "ranges"
    """How an agent fetches its origin stripe. "ranges": HTTP range requests of exactly
    the stripe's missing pieces, each handed to libtorrent (agent/origin_ranges.py);
    paced at ``origin_rate_limit`` or ``download_rate_limit`` (the lower one set),
    outside libtorrent's own cap.
    "web_seed": libtorrent's web seed with the stripe's pieces first; it also fetches
    pieces that peers hold once the stripe's are requested, so the origin sends more
    than one copy (docs/benchmarks/delta-rollout.md). Unstriped origin use is always the
    web seed."""
    origin_retry_s: float = 10.0
    """After the origin failed (an HTTP error, a URL that could not be made), seconds
    before trying again with a fresh URL."""
    direct_max_bytes: int = 256 * KIB
    """A filter file or a delta of at most this many bytes is fetched from the origin with
    one plain HTTP GET instead of through the swarm, and not seeded
    (agent/size_routed_transfer.py). 0: every file through the swarm. Below this size a
    swarm's fixed cost per version (announces, connections, the origin policy's wait)
    outweighs what it saves the origin (docs/benchmarks/many_filters.md)."""
    origin_url_refresh_s: float = 300.0
    """A URL with an expiry is replaced this many seconds before it expires (or at half
    its remaining lifetime, whichever comes first)."""
    allow_private_origin: bool = False
    """Turn libtorrent's ``ssrf_mitigation`` off, so that a web seed URL with a query
    string (a presigned URL) may point to a private or loopback address. Only for an
    origin on a private network (MinIO on the LAN, tests)."""
    connections_limit: int = 500
    """Most peer connections of the session."""
    unchoke_slots: int = 32
    """Peers uploaded to at the same time (-1: every interested peer)."""
    send_buffer_watermark: int = 8 * MIB
    """Bytes queued per peer connection before reading more from disk: large buffers
    keep a fast LAN link busy (16 MB/s with libtorrent's default, 160 MB/s with 8 MiB
    on one loopback pair)."""
    peer_rediscovery_s: float = 15.0
    """While no connected peer holds a piece a download needs, re-announce it to the
    trackers and the DHT (to find agents that joined since): after 1 s, 2 s, 4 s, ...
    at most this far apart."""
    certificate_dirs: tuple[Path, ...] = ()
    """Private versions: directories holding this agent's certificates from the fleet CA,
    each ``NAME.crt`` with its ``NAME.key`` (a Kubernetes TLS Secret, a systemd
    credentials directory). A private version's torrent names its CA; the agent presents
    the certificate that CA issued. Certificates are checked at start: a missing,
    unreadable, mismatched or expired one stops the agent (docs/private-swarm.md)."""
    require_private: bool = False
    """Refuse to download a version whose signed manifest is not private (no swarm CA), so
    that a publisher misconfigured to public never puts the filter on an open swarm."""
    allowed_peer_networks: tuple[str, ...] = ()
    """Peers are accepted only from these networks (CIDR, e.g. ``10.0.0.0/8``; libtorrent's
    ``ip_filter``); empty: from anywhere. libtorrent filters web seeds too: the origin's
    addresses as the agent resolves them are let through (a private version's HTTPS origin
    goes through the agent's loopback relay, always let through), but an origin host name
    whose DNS answers vary (S3, a CDN) may resolve to another address in libtorrent: list
    the origin's networks here too. Trackers are not filtered."""
    alert_queue_size: int = 10_000
    """libtorrent alerts kept between two polls (errors, state changes, hash failures)."""
    user_agent: str = "bloomswarm"
    """HTTP User-Agent of requests to the origin and HTTP trackers."""

    def __post_init__(self) -> None:
        for name in ("upload_rate_limit", "download_rate_limit", "origin_rate_limit"):
            if getattr(self, name) < 0:
                raise ConfigError(f"swarm.{name} must be 0 (unlimited) or positive")
        for name in ("origin_grace_s", "origin_stagger_s", "origin_max_delay_s",
                     "origin_starved_s", "origin_retry_s",
                     "origin_url_refresh_s", "peer_rediscovery_s"):
            if getattr(self, name) < 0:
                raise ConfigError(f"swarm.{name} must not be negative")
            check_at_most(f"swarm.{name}", getattr(self, name), MAX_INTERVAL_S, ONE_DAY)
        # Every integer of the session's settings_pack and the origin's peer class: a larger
        # one would be wrapped to 32 bits by libtorrent without a word (session_settings.py).
        for name in ("upload_rate_limit", "download_rate_limit", "origin_rate_limit",
                     "origin_request_bytes", "connections_limit", "unchoke_slots",
                     "send_buffer_watermark", "alert_queue_size"):
            check_at_most(f"swarm.{name}", getattr(self, name), INT32_MAX, LIBTORRENT_INT)
        if self.origin_policy not in typing.get_args(OriginPolicy):
            raise ConfigError(f"swarm.origin_policy must be 'fallback' or 'always', "
                              f"got {self.origin_policy!r}")
        if self.origin_stripe_fetch not in typing.get_args(StripeFetchMode):
            raise ConfigError(f"swarm.origin_stripe_fetch must be 'ranges' or 'web_seed', "
                              f"got {self.origin_stripe_fetch!r}")
        if not 1 <= self.origin_download_priority <= 255:
            raise ConfigError("swarm.origin_download_priority must be within 1..255")
        if self.origin_stripes < 1:
            raise ConfigError("swarm.origin_stripes must be at least 1")
        if self.origin_stripes_per_agent_up_to < 0:
            raise ConfigError("swarm.origin_stripes_per_agent_up_to must not be negative")
        if self.origin_request_bytes < BLOCK_SIZE:
            raise ConfigError(f"swarm.origin_request_bytes must be at least {BLOCK_SIZE}")
        if self.direct_max_bytes < 0:
            raise ConfigError("swarm.direct_max_bytes must be 0 (off) or positive")
        if self.connections_limit < 2 or self.alert_queue_size < 1000:
            raise ConfigError("swarm.connections_limit must be >= 2, alert_queue_size >= 1000")
        if self.unchoke_slots == 0 or self.unchoke_slots < -1:
            raise ConfigError("swarm.unchoke_slots must be positive or -1 (unlimited)")
        if self.send_buffer_watermark < 16 * KIB:
            raise ConfigError("swarm.send_buffer_watermark must be at least 16 KiB")
        if self.certificate_dirs:  # checks the TLS listeners' ports as well
            with_tls_listeners(self.listen_interfaces)
        else:
            parse_listen_interfaces(self.listen_interfaces)
        for network in self.allowed_peer_networks:
            try:
                ipaddress.ip_network(network, strict=False)
            except ValueError:
                raise ConfigError(
                    f"swarm.allowed_peer_networks: {network!r} is not an address or CIDR network"
                ) from None
        if self.require_private and not self.certificate_dirs:
            raise ConfigError("swarm.require_private needs swarm.certificate_dirs: the agent "
                              "cannot join a private swarm without a certificate")
        for node in self.dht_bootstrap_nodes:
            host, _, port = node.rpartition(":")
            if not host or not port.isdigit():
                raise ConfigError(f"swarm.dht_bootstrap_nodes: {node!r} is not host:port")


@dataclass(frozen=True)
class OriginConfig:
    """Where the origin is when it is not the S3 API, and how the web seed URL is made."""

    cdn_base_url: str | None = None
    """Plain HTTP(S) URL in front of the bucket prefix (a CDN): ``{cdn_base_url}/latest.json``
    is the pointer. Exclusive with ``[s3]``; needs no credentials."""
    presign_expiry_s: int = 3600
    """Lifetime of the presigned S3 URL given to the transfer as web seed; the transfer asks
    for a fresh one before it expires."""
    http_timeout_s: float = 10.0
    """Seconds to wait for a connection or a response byte from the CDN."""

    def __post_init__(self) -> None:
        if self.cdn_base_url is not None:
            check_http_url("origin.cdn_base_url", self.cdn_base_url,
                           credentials_from="the origin needs none")
        if self.presign_expiry_s < 60:
            raise ConfigError(f"origin.presign_expiry_s must be at least 60, got {self.presign_expiry_s}")
        check_at_most("origin.presign_expiry_s", self.presign_expiry_s, MAX_PRESIGN_EXPIRY_S,
                      "7 days, S3's limit")
        if self.http_timeout_s <= 0:
            raise ConfigError("origin.http_timeout_s must be positive")
        check_at_most("origin.http_timeout_s", self.http_timeout_s, MAX_TIMEOUT_S, ONE_DAY)


@dataclass(frozen=True)
class WatchConfig:
    """How often the agent looks for a new version, and how it backs off after failures."""

    poll_interval_s: float = 2.0
    """Seconds between two conditional GETs of latest.json."""
    poll_jitter_s: float = 0.5
    """A uniform random 0..jitter seconds added to every interval, so a fleet started at
    once does not poll in lock-step."""
    retry_initial_s: float = 1.0
    """First delay after a failure (origin unreachable, verification failed); doubled after
    each further failure in a row."""
    retry_max_s: float = 60.0
    """Longest delay between two attempts."""
    max_pointer_age_s: float = 0.0
    """Freeze detection: the newest verified latest.json seen is *stale* once its
    ``issued_at`` is older than this many seconds by the agent's clock (a CDN or a man in
    the middle serving an old signed pointer for ever). Stale is reported (metrics, log,
    /status), never acted on. 0 turns it off. Set it above the publisher's refresh
    interval plus clock skew (agent/freshness.py)."""

    def __post_init__(self) -> None:
        if self.poll_interval_s <= 0 or self.retry_initial_s <= 0:
            raise ConfigError("watch.poll_interval_s and watch.retry_initial_s must be positive")
        if self.max_pointer_age_s < 0:
            raise ConfigError(
                f"watch.max_pointer_age_s must not be negative (0 turns it off), got {self.max_pointer_age_s}"
            )
        if self.poll_jitter_s < 0:
            raise ConfigError("watch.poll_jitter_s must not be negative")
        if self.retry_max_s < self.retry_initial_s:
            raise ConfigError("watch.retry_max_s must be at least watch.retry_initial_s")
        for name in ("poll_interval_s", "poll_jitter_s", "retry_initial_s", "retry_max_s"):
            check_at_most(f"watch.{name}", getattr(self, name), MAX_INTERVAL_S, ONE_DAY)
        check_at_most("watch.max_pointer_age_s", self.max_pointer_age_s, MAX_POINTER_AGE_S,
                      "1 year")


@dataclass(frozen=True)
class InstallConfig:
    """What the agent accepts to download, and how many versions it keeps installed."""

    keep_versions: int = 2
    """Installed (and seeded) versions kept: the current one plus the newest others."""
    max_file_size: int = 64 * GIB
    """A version whose file is larger is refused before any download."""
    disk_margin_bytes: int = 1 * GIB
    """Free space that must remain on the data directory's file system after a download;
    a version that does not fit is refused before any download."""
    deltas: bool = True
    """Fetch the delta from the installed version when the manifest lists one (else, or
    when it fails, the full file)."""
    delta_stall_s: float = 120.0
    """A delta download that makes no progress for this long is given up for the full file."""

    def __post_init__(self) -> None:
        if not self.delta_stall_s > 0:
            raise ConfigError(f"install.delta_stall_s must be positive, got {self.delta_stall_s}")
        check_at_most("install.delta_stall_s", self.delta_stall_s, MAX_INTERVAL_S, ONE_DAY)
        if self.keep_versions < 1:
            raise ConfigError(f"install.keep_versions must be at least 1, got {self.keep_versions}")
        if self.max_file_size < 1 or self.disk_margin_bytes < 0:
            raise ConfigError("install.max_file_size must be positive, disk_margin_bytes >= 0")


@dataclass(frozen=True)
class StatusConfig:
    """The HTTP endpoint with /healthz, /readyz, /metrics and /status."""

    host: str = "127.0.0.1"
    """Address to listen on; loopback by default (the scraper runs on the instance). An
    IPv4 or IPv6 address (``::1``, ``::`` for every address; no brackets) or a host name.
    Checked at load: an empty host, a NUL or blank in it, or a malformed IPv6 address is
    refused, naming ``status.host`` (a name that does not resolve fails at bind)."""
    port: int = 9731
    """TCP port; 0 picks a free one."""

    def __post_init__(self) -> None:
        check_status_host(self.host)
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"status.port must be in 0..65535, got {self.port}")

    @property
    def local_url(self) -> str:
        """The base URL a client on this machine reaches the endpoint at: a wildcard host
        (``0.0.0.0``, ``::``) is reached on 127.0.0.1 (a ``::`` listener takes IPv4 too),
        an IPv6 address goes in brackets: ``http://[::1]:9731``."""
        host = self.host
        if _is_unspecified(host):
            host = "127.0.0.1"
        return f"http://{url_host(host)}:{self.port}"


_HOST_NAME = re.compile(r"[A-Za-z0-9_.-]+")
"""The characters of a host name or IPv4 address ``status.host`` may be."""


def check_status_host(host: object) -> None:
    """ConfigError naming ``status.host`` unless ``host`` is an IPv6 address (without
    brackets; a ``%scope`` allowed) or made of what an IPv4 address or a host name is
    (letters, digits, ``.``, ``-``, ``_``): an empty host (every address), a NUL or a
    blank would fail at bind with an internal error, or worse, listen where nobody meant
    it to. Whether such a name resolves (``999.1.1.1`` does not) is the bind's to say:
    "cannot listen on ..." (docs/bad-input.md)."""
    if not isinstance(host, str) or not host:
        raise ConfigError(f"status.host must be an IP address or host name, got {host!r}")
    if host.startswith("[") and host.endswith("]"):
        raise ConfigError(f"status.host: write an IPv6 address without brackets, got {host!r}")
    try:
        if ":" in host:
            ipaddress.IPv6Address(host)
        elif not _HOST_NAME.fullmatch(host):
            raise ValueError(host)
    except ValueError:
        raise ConfigError(
            f"status.host must be an IP address or host name, got {host!r:.80}"
        ) from None


def url_host(host: str) -> str:
    """``host`` as it goes in a URL: an IPv6 address in brackets (``[::1]``)."""
    return f"[{host}]" if ":" in host else host


def _is_unspecified(host: str) -> bool:
    """Whether ``host`` is the wildcard address of its family (``0.0.0.0``, ``::``)."""
    try:
        return ipaddress.ip_address(host).is_unspecified
    except ValueError:  # a host name
        return False


@dataclass(frozen=True)
class DirectConfig:
    """The plain-HTTP transfer (``transfer = "direct"``): no peers, the file from the origin."""

    chunk_size: int = 1 * MIB
    """Bytes read and written at a time: 4 KiB .. 64 MiB."""
    timeout_s: float = 30.0
    """Seconds to wait for a connection or a response byte."""
    rate_limit_bytes_per_s: int = 0
    """Download rate cap; 0 for none."""
    concurrency: int = 8
    """Downloads running at once (1..1024); the others wait their turn (an agent of many
    small filters fetches them all at once when they are published together)."""

    def __post_init__(self) -> None:
        # Each setting is checked on its own, so that the message names the one refused.
        if isinstance(self.chunk_size, bool) or self.chunk_size < MIN_CHUNK_SIZE:
            raise ConfigError(f"direct.chunk_size must be at least {MIN_CHUNK_SIZE}, "
                              f"got {self.chunk_size!r}")
        check_at_most("direct.chunk_size", self.chunk_size, MAX_CHUNK_SIZE,
                      "64 MiB, read into memory at once per download")
        if not self.timeout_s > 0:
            raise ConfigError(f"direct.timeout_s must be positive, got {self.timeout_s!r}")
        check_at_most("direct.timeout_s", self.timeout_s, MAX_TIMEOUT_S, ONE_DAY)
        if isinstance(self.rate_limit_bytes_per_s, bool) or self.rate_limit_bytes_per_s < 0:
            raise ConfigError(f"direct.rate_limit_bytes_per_s must be 0 (no limit) or positive, "
                              f"got {self.rate_limit_bytes_per_s!r}")
        if isinstance(self.concurrency, bool) or self.concurrency < 1:
            raise ConfigError(f"direct.concurrency must be at least 1, got {self.concurrency!r}")
        check_at_most("direct.concurrency", self.concurrency, MAX_DIRECT_CONCURRENCY,
                      "one thread per download")


@dataclass(frozen=True)
class AgentConfig:
    """Everything ``bloomswarm agent run`` needs."""

    data_dir: Path
    """The data directory applications read through LiveFilter (see common/datadir.py)."""
    public_keys: tuple[Path, ...]
    """Ed25519 public keys (PEM) of the publisher; a signature by any one is accepted, so
    a new key can be shipped before the publisher switches to it."""
    transfer: TransferKind = "swarm"
    """How bytes move: "swarm" (libtorrent, peers + web seed) or "direct" (HTTP from the
    origin only: tests and the no-P2P baseline)."""
    resume_save_interval_s: float = 30.0
    """Seconds between two saves of the unfinished download's resume data (also saved on
    SIGTERM)."""
    s3: S3Config | None = None
    """The bucket, when the origin is the S3 API (``[s3]`` table)."""
    origin: OriginConfig = field(default_factory=OriginConfig)
    """CDN origin and web seed URLs (``[origin]`` table)."""
    watch: WatchConfig = field(default_factory=WatchConfig)
    """Polling and retries (``[watch]`` table)."""
    install: InstallConfig = field(default_factory=InstallConfig)
    """Size limits and retention (``[install]`` table)."""
    status: StatusConfig = field(default_factory=StatusConfig)
    """Health, metrics and status endpoint (``[status]`` table)."""
    direct: DirectConfig = field(default_factory=DirectConfig)
    """The direct transfer's settings (``[direct]`` table)."""
    swarm: SwarmConfig = field(default_factory=SwarmConfig)
    """The libtorrent transfer's settings (``[swarm]`` table)."""
    filters: tuple[FilterConfig, ...] = ()
    """Named filters to follow (``[[filters]]`` tables, the file only); empty: the one
    filter at the bucket prefix (a single-filter data directory)."""

    def __post_init__(self) -> None:
        if "\0" in str(self.data_dir):
            raise ConfigError(f"data_dir must not contain a NUL character, got {str(self.data_dir)!r:.80}")
        if not isinstance(self.filters, tuple) or not all(
            isinstance(entry, FilterConfig) for entry in self.filters
        ):
            raise ConfigError("filters must be a tuple of FilterConfig")
        check_filters(self.filters)
        if not self.public_keys:
            raise ConfigError("no public_keys: pin at least one publisher key")
        if (self.s3 is None) == (self.origin.cdn_base_url is None):
            raise ConfigError(
                "configure exactly one origin: an [s3] bucket or origin.cdn_base_url"
            )
        if self.resume_save_interval_s <= 0:
            raise ConfigError("resume_save_interval_s must be positive")
        check_at_most("resume_save_interval_s", self.resume_save_interval_s, MAX_INTERVAL_S, ONE_DAY)


# --- loading ----------------------------------------------------------------------------------

_LOADER = SettingsLoader(
    AgentConfig, env_prefix=ENV_PREFIX, strict=True, ignore_env=(CONFIG_ENV,), scalar_lists=True,
    exclude=(FILTERS_KEY,),
)

SETTINGS: dict[str, Any] = _LOADER.settings
"""Dotted setting name -> the type its value must have."""


def env_name(setting: str) -> str:
    """The environment variable of a setting: "s3.bucket" -> "BLOOMSWARM_AGENT_S3_BUCKET"."""
    return _LOADER.env_name(setting)


def swarm_config(values: Mapping[str, object], *, where: str = "[swarm]") -> SwarmConfig:
    """A :class:`SwarmConfig` from the keys and values of a ``[swarm]`` table (TOML values:
    lists, not comma-separated strings), checked like the agent's file; ConfigError names
    ``where`` and the setting. For processes that run a swarm without an agent."""
    config: SwarmConfig = _LOADER.load_table("swarm", values, where)
    return config


def load_config(
    path: Path | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    overrides: Mapping[str, object] | None = None,
) -> AgentConfig:
    """Assemble the configuration from ``path`` (TOML), ``environ`` and ``overrides``.

    ``overrides`` maps dotted names to flag values; None values are ignored (the flag was
    not given). Raises ConfigError for an unreadable or invalid file, an unknown setting
    (file, ``BLOOMSWARM_AGENT_*`` variable or override), a value of the wrong type, or a
    missing required setting, and bad ``[[filters]]`` tables (see :mod:`.filter_config`).
    """
    variable = env_name(FILTERS_KEY)
    if environ is not None and variable in environ:
        raise ConfigError(f"{variable}: filters cannot come from the environment; "
                          f"list them as [[filters]] tables in the config file")
    values: dict[str, object] = {}
    filters: tuple[FilterConfig, ...] = ()
    if path is not None:
        where = f"config file {path}"
        document = _LOADER.read_document(path)
        if FILTERS_KEY in document:
            filters = filters_from_toml(document.pop(FILTERS_KEY), where)
        values.update(_LOADER.document_values(document, where))
    values.update(_LOADER.load(None, environ=environ, overrides=overrides))
    return _assemble(values, filters)


def _assemble(values: Mapping[str, object], filters: tuple[FilterConfig, ...] = ()) -> AgentConfig:
    for required in ("data_dir", "public_keys"):
        if required not in values:
            raise ConfigError(
                f"missing setting {required}: set it in the config file or {env_name(required)}"
            )
    if _LOADER.table_values(values, "s3") and "s3.bucket" not in values:
        raise ConfigError(f"[s3] needs a bucket ({env_name('s3.bucket')})")
    fields = _LOADER.fields(values)
    try:
        return AgentConfig(**fields, filters=filters)  # type: ignore[arg-type]
    except TypeError as exc:  # a dataclass refusing a value it cannot take
        raise ConfigError(f"invalid agent configuration: {exc}") from exc


__all__ = [
    "CONFIG_ENV",
    "ENV_PREFIX",
    "SETTINGS",
    "AgentConfig",
    "DirectConfig",
    "FilterConfig",
    "InstallConfig",
    "OriginConfig",
    "StatusConfig",
    "SwarmConfig",
    "WatchConfig",
    "env_name",
    "load_config",
    "swarm_config",
]
