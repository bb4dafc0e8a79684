"""The BitTorrent transfer: one libtorrent session that downloads versions from peers and
the origin, then keeps seeding them.

:class:`Swarm` implements :class:`~bloomswarm.agent.transfer.Transfer`. One session holds
every version the agent downloads or seeds. It is tuned for a data centre, as measured
in design.md: TCP only (uTP off), large send buffers, several connections per IP
allowed, UPnP/NAT-PMP off. Peers come from the configured trackers (the ``.torrent``'s
own only with ``torrent_trackers``: the signature does not cover them), the DHT
(bootstrapped only from the configured nodes, never from a public router), LSD when
enabled, and PEX.

The origin (S3 presigned URL or CDN URL) is a BEP 19 web seed added at run time with
``add_url_seed``: the torrent carries no URL that could expire (web seeds inside a
torrent are ignored). A presigned URL is replaced by a fresh one before it expires.

Origin load policy ("fallback", the default; docs/origin-policy.md has the measurements)
----------------------------------------------------------------------------------------
The goal is that the origin sends about one copy of a version to the whole fleet, not one
per agent. Each download has its own origin switch, decided in :meth:`Swarm.poll`. The
rules work like Ethernet's carrier sense with collision back-off: wait your turn, take
the origin only when nobody feeds you, and step back at once when someone else does.

1. *Wait your turn.* Each download draws a rank ``u`` in [0, 1) and may not use the
   origin before ``origin_grace_s + u * origin_stagger_s * (peers + 1)`` seconds after
   it started (``peers``: connected peers, now; the product is capped at
   ``origin_max_delay_s``). The grace lets the agent find peers, one of which may already
   have the version. The staggered part spreads the fleet's turns about
   ``origin_stagger_s`` apart *whatever the fleet size*, while the first turn still comes
   after about ``origin_grace_s``.
2. *Starved → on.* Once its turn has come, the download adds the web seed only when it
   is starved: no payload byte from a peer for ``origin_starved_s`` seconds *and* no
   connected peer holds a piece it still needs — or nothing from peers for
   ``STALL_FACTOR`` times that, whatever they hold (they choke us or are saturated). An
   agent whose peer pulls from the origin sees that peer's new pieces and keeps
   receiving them, so it is never starved and never touches the origin.
3. *Collision → back off.* While the web seed is on, a connected peer that holds a piece
   we lack got it elsewhere — from the origin (another agent had the same idea) or from
   a peer that had it before. Either way the origin is not needed for it: the web seed is
   removed and a new rank is drawn (a new turn, counted from now, without grace). Of two
   agents that took the origin at the same time, the one whose new turn comes first
   takes it again; the other is fed by it. A peer that holds needed pieces but delivers
   nothing for ``STALL_FACTOR * origin_starved_s`` does not count.
4. The web seed is removed when the download finishes or fails.

While the web seed is on, libtorrent's rarest-first picker asks it first for the pieces
no peer has, so even a collision fetches mostly different pieces; smaller origin
requests (``origin_request_bytes``) keep the overlap of a collision small. Adding a web
seed takes up to a second in libtorrent (it connects on the torrent's next tick), which
is why turns should be spaced wider than that.

``origin_policy = "always"`` adds the web seed at once and keeps it (a CDN that can take
the load, or the baseline of the measurement).

Rate limits
-----------
``upload_rate_limit`` and ``download_rate_limit`` cap the whole session. libtorrent
exempts peers on local networks from limits by default; here every address (IPv4 and
IPv6) is put into the global peer class with ``set_peer_class_filter``, so the caps hold
on a data-centre LAN and on loopback. A second peer class ("origin") is given to the
origin's addresses: the address in the URL, or those its host name resolves to (resolved
in a background thread before the web seed is added). It caps the web seed at
``origin_rate_limit`` and gives it ``origin_download_priority`` times a peer's share of a
download link that is capped (``download_rate_limit``) and full. Caveat: a peer that
shares an address with the origin (an agent on the object store's host; the local fleet
puts its origin on 127.0.0.2 for this) is in that class too.

Accounting
----------
``bytes_from_origin`` and ``bytes_from_peers`` come from libtorrent's cumulative
per-connection payload counters (``get_peer_info()``; a web seed is told apart by its
``connection_type``), read at every :meth:`Swarm.poll` and :meth:`Swarm.status`. A
connection that closes between two reads takes the bytes it received since the last
read with it; those are recovered from the torrent's exact total
(``total_payload_download``): the part of the total not seen on live connections is
given to the connections that disappeared, by their last download rates (see
:class:`ByteAccounting`). So ``bytes_from_origin + bytes_from_peers`` equals libtorrent's
payload total up to the bytes in flight during one read. (``block_finished_alert`` looks
exact but is not: libtorrent 2.x skips it for blocks whose disk write completes after
the torrent turned seed.)

Threading: like the protocol says, every method is called from one thread; only
:meth:`Swarm.save_resume_data` waits (bounded by its timeout). Processes that run a
Swarm and start worker processes must use the ``spawn`` start method (fork after
libtorrent's threads have started hangs).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import ipaddress
import logging
import random
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

import libtorrent as lt
from bitarray import bitarray

from bloomswarm.common.errors import FormatError

from . import origin_stripes
from .config import SwarmConfig
from .origin_stripes import Stripes
from .transfer import OriginURL, OriginURLFactory, TransferState, TransferStatus

log = logging.getLogger("bloomswarm.swarm")

KIB = 1024
MIB = 1024 * KIB
RESOLVE_TTL_S = 300.0
"""Seconds before the addresses of an origin host name are looked up again."""

def session_settings(config: SwarmConfig) -> lt.settings_pack:
    """The libtorrent ``settings_pack`` for ``config`` (exposed for tests and docs)."""
    return {
        "listen_interfaces": config.listen_interfaces,
        "user_agent": config.user_agent,
        # A data centre: TCP only, big send buffers, many connections per address.
        "enable_outgoing_utp": False,
        "enable_incoming_utp": False,
        "enable_outgoing_tcp": True,
        "enable_incoming_tcp": True,
        "send_buffer_watermark": config.send_buffer_watermark,
        "send_buffer_low_watermark": min(64 * KIB, config.send_buffer_watermark),
        # A download whose wanted pieces are done while an origin stripe holds others at
        # priority 0 is "finished" for a tick: keep its connections to seeds.
        "close_redundant_connections": False,
        "max_out_request_queue": 1500,
        "allow_multiple_connections_per_ip": True,
        "connections_limit": config.connections_limit,
        "unchoke_slots_limit": config.unchoke_slots,
        "upload_rate_limit": config.upload_rate_limit,
        "download_rate_limit": config.download_rate_limit,
        "enable_upnp": False,
        "enable_natpmp": False,
        "announce_to_all_trackers": True,
        "announce_to_all_tiers": True,
        # Peer discovery.
        "enable_dht": config.enable_dht,
        "dht_bootstrap_nodes": ",".join(config.dht_bootstrap_nodes),
        "dht_restrict_routing_ips": config.dht_restrict_ips,
        "dht_restrict_search_ips": config.dht_restrict_ips,
        "dht_block_ratelimit": 5 if config.dht_restrict_ips else 1_000_000,
        "enable_lsd": config.enable_lsd,
        # The origin as web seed.
        "ssrf_mitigation": not config.allow_private_origin,
        "urlseed_max_request_bytes": config.origin_request_bytes,
        "urlseed_wait_retry": max(1, int(config.origin_retry_s)),
        # Events: errors, state, resume data, hash failures, tracker and DHT replies.
        "alert_mask": (
            lt.alert_category.error
            | lt.alert_category.status
            | lt.alert_category.storage
            | lt.alert_category.tracker
            | lt.alert_category.dht_operation
        ),
        "alert_queue_size": config.alert_queue_size,
    }


ConnectionKey = tuple[Any, ...]


@dataclass
class _Connection:
    origin: bool
    downloaded: int
    rate: int


class ByteAccounting:
    """Splits one torrent's downloaded payload between the origin and the peers.

    Feed it, at every read, the torrent's exact payload total and a snapshot of its live
    connections (:meth:`update`). Each live connection contributes what its cumulative
    counter grew by since the previous snapshot. The bytes that no live counter explains
    (received by connections that closed since the previous snapshot) are given to the
    connections that disappeared last, in proportion to their last download rates —
    also later, since libtorrent's total lags the per-connection counters by up to a
    second. A connection can also open and close between two snapshots (a small file on
    a fast link). With the origin attached at either snapshot, no web seed seen and no
    connection gone, the unexplained bytes are the origin's; with the origin attached at
    neither and no connection ever gone to take them, they can only be the peers'. Pure Python,
    no libtorrent: unit-testable.
    """

    def __init__(self) -> None:
        self.origin = 0
        """Payload bytes attributed to the origin (web seeds)."""
        self.peers = 0
        """Payload bytes attributed to peers."""
        self._live: dict[ConnectionKey, _Connection] = {}
        self._gone: list[_Connection] = []
        self._origin_was_attached = False

    def update(
        self,
        total: int,
        connections: list[tuple[ConnectionKey, bool, int, int]],
        *,
        origin_attached: bool = False,
    ) -> None:
        """Account for a snapshot.

        ``total`` is the torrent's cumulative payload download, read *before* the
        connections; ``connections`` holds ``(key, is_origin, downloaded, rate)`` per live
        connection: a key unique to the connection (endpoints), whether it is a web
        seed, its cumulative payload download, and its current download rate.
        ``origin_attached``: the origin is added as a web seed at this snapshot.
        """
        gone: list[_Connection] = []
        live: dict[ConnectionKey, _Connection] = {}
        for key, is_origin, downloaded, rate in connections:
            previous = self._live.pop(key, None)
            if previous is None or downloaded < previous.downloaded:
                if previous is not None:  # the key was reused by a new connection
                    gone.append(previous)
                delta = downloaded
            else:
                delta = downloaded - previous.downloaded
            if is_origin:
                self.origin += delta
            else:
                self.peers += delta
            live[key] = _Connection(is_origin, downloaded, rate)
        gone.extend(self._live.values())
        web_seed_seen = any(c.origin for c in live.values()) or any(c.origin for c in gone)
        self._live = live
        if gone:
            self._gone = gone
        unexplained = total - self.origin - self.peers
        origin_possible = origin_attached or self._origin_was_attached
        self._origin_was_attached = origin_attached
        if unexplained > 0 and origin_possible and not web_seed_seen and not gone:
            self.origin += unexplained  # a web-seed connection came and went unseen
        elif unexplained > 0 and not self._gone and not origin_possible:
            self.peers += unexplained  # a peer connection came and went unseen
        elif unexplained > 0 and self._gone:
            gone = self._gone
            weights = [max(c.rate, 1) for c in gone]
            to_origin = unexplained * sum(w for c, w in zip(gone, weights, strict=True) if c.origin)
            to_origin //= sum(weights)
            self.origin += to_origin
            self.peers += unexplained - to_origin


@dataclass
class _Origin:
    """The origin switch of one download."""

    factory: OriginURLFactory
    turn_from: float
    """Monotonic instant from which the wait for the origin counts (start, or back-off)."""
    grace: float
    """Fixed part of the wait (``origin_grace_s`` at start, 0 after a back-off)."""
    rank: float
    """This download's place in the fleet's turns, uniform in [0, 1)."""
    url: OriginURL | None = None
    """The last URL the factory gave."""
    url_fetched_at: float = 0.0
    """Wall-clock time (``time.time()``) when ``url`` was fetched."""
    added: str | None = None
    """The URL currently added as web seed, or None when the origin is off."""
    retry_at: float = 0.0
    """Monotonic instant before which the origin is not tried again after a failure."""
    stripe: int | None = None
    """The stripe the web seed fetches first, or None: any piece (rarest first)."""
    stripe_base: bitarray | None = None
    """The stripe's pieces in sight when we took it (a bitarray): a rival is judged by
    what it fetched since."""


@dataclass
class _Torrent:
    """One version in the session."""

    version: int
    handle: lt.torrent_handle
    info: lt.torrent_info
    save_dir: Path
    seeding: bool
    """Added by :meth:`Swarm.seed` (seed mode) rather than :meth:`Swarm.start_download`."""
    started: float
    """Monotonic instant it was added."""
    origin: _Origin | None = None
    stripe_watch: origin_stripes.StripeWatch | None = None
    """The download's origin stripes and their growth ("fallback" with more than one
    stripe; None otherwise)."""
    priorities: list[int] | None = None
    """Piece priorities last set for a stripe (None: libtorrent's defaults)."""
    accounting: ByteAccounting = field(default_factory=ByteAccounting)
    origin_before: int = 0
    """Bytes from the origin counted by an earlier handle of the same version."""
    peers_before: int = 0
    """Bytes from peers counted by an earlier handle of the same version."""
    uploaded_before: int = 0
    """Payload uploaded by an earlier handle of the same version (replaced by seed())."""
    hash_failures: int = 0
    error: str | None = None
    peer_bytes_at_poll: int = 0
    last_peer_progress: float = 0.0
    """Monotonic instant when payload last came from a peer (or when it started)."""
    last_rediscovery: float = 0.0
    rediscovery_gap: float = 1.0
    """Seconds until the next re-announce: 1 s at first, doubling up to the configured."""

    @property
    def total_bytes(self) -> int:
        return int(self.info.total_size())

    @property
    def bytes_from_origin(self) -> int:
        return self.origin_before + self.accounting.origin

    @property
    def bytes_from_peers(self) -> int:
        return self.peers_before + self.accounting.peers

    def snapshot(self) -> tuple[lt.torrent_status, list[lt.peer_info]]:
        """The torrent's status and live connections, with the byte accounting updated.
        Raises RuntimeError when the handle is no longer valid."""
        st = self.handle.status()
        peers = self.handle.get_peer_info()
        self.accounting.update(
            int(st.total_payload_download),
            [
                ((_endpoint(p.ip), str(p.pid)), _is_web_seed(p),
                 int(p.total_download), int(p.payload_down_speed))
                for p in peers
            ],
            origin_attached=self.origin is not None and self.origin.added is not None,
        )
        return st, peers


def _is_web_seed(peer: lt.peer_info) -> bool:
    return bool(peer.connection_type in (lt.peer_info.web_seed, lt.peer_info.http_seed))


def _endpoint(value: tuple[str, int]) -> tuple[str, int]:
    host, port = value
    return str(host), int(port)


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


STALL_FACTOR = 3
"""Peers that hold needed pieces but deliver nothing for this many ``origin_starved_s``
(they choke us, or are saturated) no longer keep the origin off."""


def want_origin(*, origin_on: bool, idle_s: float, starved_s: float, peers_hold_needed: bool) -> bool:
    """The "fallback" policy's decision for one download whose turn has come.

    ``idle_s``: seconds since payload last came from a peer; ``peers_hold_needed``: a
    connected peer holds a piece the download still needs.

    - Off → on when starved: nothing from peers for ``starved_s`` and no peer holds a
      needed piece — or nothing from peers for ``STALL_FACTOR * starved_s`` at all.
    - On → stays on while no peer holds a needed piece (the origin is the only source),
      or while peers deliver nothing for ``STALL_FACTOR * starved_s``; otherwise off
      (the caller then draws a new turn: the back-off).
    """
    stalled = idle_s >= STALL_FACTOR * starved_s
    if origin_on:
        return not peers_hold_needed or stalled
    return (idle_s >= starved_s and not peers_hold_needed) or stalled


def peers_hold_needed(have: Sequence[bool], peers: Sequence[tuple[bool, Sequence[bool]]]) -> bool:
    """Whether a piece missing from ``have`` is held by one of ``peers``, given as
    ``(is_seed, pieces)`` per connected peer (web seeds excluded)."""
    missing = [i for i, got in enumerate(have) if not got]
    if not missing:
        return False
    return any(seed or any(i < len(bits) and bits[i] for i in missing) for seed, bits in peers)


class Swarm:
    """A :class:`~bloomswarm.agent.transfer.Transfer` over one libtorrent session.

    ``clock`` (monotonic seconds) and ``rng`` are for tests. The session listens as soon
    as the object exists; :meth:`close` (or leaving a ``with`` block) releases it. Beyond
    the protocol: :meth:`listen_port` (what other agents bootstrap their DHT from) and
    :meth:`origin_in_use`.
    """

    def __init__(
        self,
        config: SwarmConfig | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
    ) -> None:
        self.config = config or SwarmConfig()
        self._clock = clock
        self._rng = rng or random.Random()
        self._session: lt.session | None = lt.session(session_settings(self.config))
        self._torrents: dict[int, _Torrent] = {}
        self._by_handle: dict[lt.torrent_handle, _Torrent] = {}
        self._resume: dict[lt.torrent_handle, bytes | None] = {}
        self._dropped_warned = False
        # The origin peer class and the addresses in it.
        self._origin_class: int | None = None
        self._origin_ips: set[str] = set()
        self._resolved: dict[str, float] = {}
        """Host name -> monotonic instant of its last successful resolution."""
        self._resolving: dict[str, concurrent.futures.Future[set[str]]] = {}
        self._resolver: concurrent.futures.ThreadPoolExecutor | None = None
        if self.config.origin_rate_limit > 0 or self.config.origin_download_priority > 1:
            self._origin_class = int(self._ses.create_peer_class("origin"))
            info = self._ses.get_peer_class(self._origin_class)
            info["download_limit"] = self.config.origin_rate_limit
            info["download_priority"] = self.config.origin_download_priority
            self._ses.set_peer_class(self._origin_class, info)
        self._apply_peer_class_filter()

    # --- Transfer ---------------------------------------------------------------------------

    def start_download(
        self,
        version: int,
        torrent: bytes,
        save_dir: Path,
        origin: OriginURLFactory | None,
        *,
        resume_data: bytes | None = None,
    ) -> None:
        """Begin fetching ``version`` into ``save_dir`` (see the protocol).

        Raises FormatError when ``torrent`` is not a valid torrent, and ValueError when the
        same torrent is already in the session under another version. A version already
        present is replaced. Resume data of another torrent, or unreadable resume data, is
        ignored with a warning (the files on disk are then checked instead). Existing
        data in ``save_dir`` is checked and kept; only missing pieces are fetched.
        """
        info = self._torrent_info(torrent)
        params: lt.add_torrent_params | None = None
        if resume_data is not None:
            params = self._read_resume(resume_data, info, version)
        if params is None:
            params = lt.add_torrent_params()
        origin_state = None
        if origin is not None:
            origin_state = _Origin(factory=origin, turn_from=self._clock(),
                                   grace=self.config.origin_grace_s, rank=self._rng.random())
        self._add(version, info, params, save_dir, seeding=False, origin=origin_state)

    def seed(self, version: int, torrent: bytes, file_dir: Path) -> None:
        """Serve ``version`` from the complete, verified file in ``file_dir``.

        The torrent is added in seed mode: nothing is hashed up front (libtorrent still
        hashes each piece the first time a peer asks for it, so a damaged file is never
        served). A version already present (its download) is replaced; its byte counts
        carry over. Raises FormatError for an invalid torrent.
        """
        info = self._torrent_info(torrent)
        params = lt.add_torrent_params()
        params.flags |= lt.torrent_flags.seed_mode
        self._add(version, info, params, file_dir, seeding=True, origin=None)

    def remove(self, version: int) -> None:
        """Stop transferring ``version``; its files stay. Unknown versions are ignored."""
        record = self._torrents.pop(version, None)
        if record is None:
            return
        self._by_handle.pop(record.handle, None)
        self._resume.pop(record.handle, None)
        with contextlib.suppress(RuntimeError):
            self._ses.remove_torrent(record.handle)
        log.info("v%d: removed from the swarm", version)

    def status(self, version: int) -> TransferStatus | None:
        """A snapshot of ``version``'s transfer, or None when it is not in the session."""
        record = self._torrents.get(version)
        if record is None:
            return None
        try:
            st, connections = record.snapshot()
            peers = sum(1 for p in connections if not _is_web_seed(p))
        except RuntimeError as exc:  # the handle became invalid
            return self._error_status(record, f"torrent handle invalid: {exc}")
        error = record.error
        if st.errc.value() != 0:
            error = st.errc.message()
        state: TransferState
        if error is not None:
            state = "error"
        elif st.state in (lt.torrent_status.checking_files, lt.torrent_status.checking_resume_data):
            state = "checking"
        elif st.flags & lt.torrent_flags.paused:
            state = "paused"
        elif st.is_seeding:
            state = "seeding"
        else:
            state = "downloading"
        return TransferStatus(
            version=version,
            state=state,
            progress=self._verified_fraction(record, st),
            total_bytes=record.total_bytes,
            bytes_from_peers=record.bytes_from_peers,
            bytes_from_origin=record.bytes_from_origin,
            bytes_uploaded=record.uploaded_before + int(st.total_payload_upload),
            peers=peers,
            hash_failures=record.hash_failures,
            finished=bool(st.is_seeding),
            error=error,
        )

    def versions(self) -> list[int]:
        """Versions in the session (downloading or seeding), ascending."""
        return sorted(self._torrents)

    def poll(self) -> None:
        """Process libtorrent's events, then, for each download: update its byte counts,
        re-announce while no connected peer holds a piece it needs, apply the origin
        policy, and refresh the origin URL before it expires.

        Never raises for a problem of one version: it is logged and shows in the status.
        """
        self._drain_alerts()
        self._collect_resolutions()
        now = self._clock()
        for record in list(self._torrents.values()):
            try:
                self._poll_torrent(record, now)
            except RuntimeError as exc:  # libtorrent refused an operation on this torrent
                log.warning("v%d: %s", record.version, exc)

    def save_resume_data(self, timeout: float = 10.0) -> dict[int, bytes]:
        """Resume data of the unfinished downloads, by version.

        Asks libtorrent for each download's resume data (flushing its disk cache first, so
        the data on disk is at least what the resume data claims) and waits up to
        ``timeout`` seconds for the answers; downloads that did not answer in time, or
        failed to, are left out. Other events that arrive meanwhile are processed as in
        :meth:`poll`.
        """
        pending: dict[lt.torrent_handle, int] = {}
        for record in self._torrents.values():
            if record.seeding or record.error is not None:
                continue
            try:
                if record.handle.status().is_seeding:
                    continue
                record.handle.save_resume_data(lt.torrent_handle.flush_disk_cache)
            except RuntimeError as exc:
                log.warning("v%d: cannot save resume data: %s", record.version, exc)
                continue
            pending[record.handle] = record.version
            self._resume.pop(record.handle, None)
        result: dict[int, bytes] = {}
        deadline = self._clock() + timeout
        while pending:
            self._drain_alerts()
            for handle in [h for h in pending if h in self._resume]:
                data = self._resume.pop(handle)
                version = pending.pop(handle)
                if data is not None:
                    result[version] = data
            left = deadline - self._clock()
            if not pending or left <= 0:
                break
            self._ses.wait_for_alert(int(min(left, 0.5) * 1000) + 1)
        for version in pending.values():
            log.warning("v%d: no resume data within %.1fs", version, timeout)
        return result

    def close(self) -> None:
        """Remove every torrent (keeping files) and destroy the session, which closes its
        listening sockets. Idempotent."""
        if self._session is None:
            return
        for version in list(self._torrents):
            self.remove(version)
        if self._resolver is not None:
            self._resolver.shutdown(wait=False, cancel_futures=True)
            self._resolver = None
        session, self._session = self._session, None
        del session

    # --- extras -----------------------------------------------------------------------------

    @property
    def _ses(self) -> lt.session:
        if self._session is None:
            raise RuntimeError("the swarm is closed")
        return self._session

    def listen_port(self) -> int:
        """The TCP (and DHT UDP) port the session listens on."""
        return int(self._ses.listen_port())

    def origin_in_use(self, version: int) -> bool:
        """Whether ``version``'s origin is currently added as web seed."""
        record = self._torrents.get(version)
        return record is not None and record.origin is not None and record.origin.added is not None

    def __enter__(self) -> Swarm:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # --- adding torrents --------------------------------------------------------------------

    @staticmethod
    def _torrent_info(torrent: bytes) -> lt.torrent_info:
        try:
            info = lt.torrent_info(torrent)
        except (RuntimeError, TypeError, ValueError) as exc:
            raise FormatError(f"not a valid torrent: {exc}") from exc
        return info

    def _read_resume(self, data: bytes, info: lt.torrent_info, version: int) -> lt.add_torrent_params | None:
        try:
            params = lt.read_resume_data(data)
        except (RuntimeError, TypeError, ValueError) as exc:
            log.warning("v%d: ignoring unreadable resume data: %s", version, exc)
            return None
        if str(params.info_hashes.v1) != str(info.info_hashes().v1) or str(
            params.info_hashes.v2
        ) != str(info.info_hashes().v2):
            log.warning("v%d: ignoring resume data of another torrent", version)
            return None
        # Resume data remembers run-time web seeds (an expired URL) and the piece priorities
        # of an origin stripe (0 for pieces nobody held then): start from neither.
        params.url_seeds = []
        params.http_seeds = []
        params.piece_priorities = []
        params.file_priorities = []
        return params

    def _add(
        self,
        version: int,
        info: lt.torrent_info,
        params: lt.add_torrent_params,
        save_dir: Path,
        *,
        seeding: bool,
        origin: _Origin | None,
    ) -> None:
        if self._session is None:
            raise RuntimeError("the swarm is closed")
        hashes = str(info.info_hashes().v1), str(info.info_hashes().v2)
        for other in self._torrents.values():
            other_hashes = str(other.info.info_hashes().v1), str(other.info.info_hashes().v2)
            if other.version != version and other_hashes == hashes:
                raise ValueError(f"v{version}: the same torrent is already in the swarm as v{other.version}")
        previous = self._torrents.get(version)
        if previous is not None:
            with contextlib.suppress(RuntimeError):
                previous.snapshot()  # count the old handle's last bytes before it goes
            self.remove(version)
        params.ti = info
        params.save_path = str(save_dir)
        params.flags &= ~lt.torrent_flags.auto_managed
        params.flags |= lt.torrent_flags.paused  # resumed once its trackers are settled
        params.flags |= lt.torrent_flags.duplicate_is_error
        trackers = list(self.config.trackers)
        if trackers:
            params.trackers = list(params.trackers) + trackers
            params.tracker_tiers = list(params.tracker_tiers) + [0] * len(trackers)
        try:
            handle = self._ses.add_torrent(params)
        except RuntimeError as exc:
            raise ValueError(f"v{version}: libtorrent refused the torrent: {exc}") from exc
        if not self.config.torrent_trackers:  # keep only the configured trackers
            handle.replace_trackers([lt.announce_entry(url) for url in trackers])
        # The origin is added at run time only, under the policy: drop any web seed written
        # into the torrent (unsigned) or remembered by resume data.
        for url in handle.url_seeds():
            handle.remove_url_seed(url)
        handle.resume()
        now = self._clock()
        stripes = None
        if origin is not None and self.config.origin_policy == "fallback" and self.config.origin_stripes > 1:
            stripes = Stripes.for_torrent(info.num_pieces(), info.piece_length(),
                                          self.config.origin_request_bytes, self.config.origin_stripes)
        record = _Torrent(
            version=version,
            handle=handle,
            info=info,
            save_dir=save_dir,
            seeding=seeding,
            started=now,
            origin=origin,
            stripe_watch=None if stripes is None else origin_stripes.StripeWatch(stripes, now),
            last_peer_progress=now,
            last_rediscovery=now,
        )
        if previous is not None:
            record.origin_before = previous.bytes_from_origin
            record.peers_before = previous.bytes_from_peers
            record.peer_bytes_at_poll = previous.bytes_from_peers
            record.hash_failures = previous.hash_failures
            with contextlib.suppress(RuntimeError):
                record.uploaded_before = previous.uploaded_before + int(
                    previous.handle.status().total_payload_upload
                )
        self._torrents[version] = record
        self._by_handle[handle] = record
        log.info(
            "v%d: %s %s in %s (%d bytes, %d pieces)",
            version,
            "seeding" if seeding else "downloading",
            hashes[0],
            save_dir,
            record.total_bytes,
            info.num_pieces(),
        )

    # --- events -----------------------------------------------------------------------------

    def _drain_alerts(self) -> None:
        """Pop every pending alert and update the records."""
        if self._session is None:
            return
        by_handle = self._by_handle
        debug = log.isEnabledFor(logging.DEBUG)
        for alert in self._session.pop_alerts():
            if isinstance(alert, lt.hash_failed_alert):
                record = by_handle.get(alert.handle)
                if record is not None:
                    record.hash_failures += 1
                    log.warning("v%d: piece %d failed its hash check", record.version, alert.piece_index)
            elif isinstance(alert, lt.save_resume_data_alert):
                self._resume[alert.handle] = bytes(lt.write_resume_data_buf(alert.params))
            elif isinstance(alert, lt.save_resume_data_failed_alert):
                self._resume[alert.handle] = None
                self._log_for(alert, logging.WARNING, "saving resume data failed: %s")
            elif isinstance(alert, lt.url_seed_alert):
                self._on_origin_error(alert)
            elif isinstance(alert, lt.dht_get_peers_reply_alert):
                self._on_dht_peers(alert)
            elif isinstance(alert, (lt.torrent_error_alert, lt.file_error_alert)):
                record = by_handle.get(alert.handle)
                if record is not None:
                    record.error = alert.message()
                    log.error("v%d: %s", record.version, alert.message())
            elif isinstance(alert, lt.alerts_dropped_alert):
                if not self._dropped_warned:
                    self._dropped_warned = True
                    log.warning("libtorrent dropped alerts (poll more often or raise "
                                "swarm.alert_queue_size): hash failures may be undercounted")
            elif isinstance(alert, (lt.tracker_error_alert, lt.listen_failed_alert)):
                log.warning("%s", alert.message())
            elif debug:
                log.debug("%s: %s", type(alert).__name__, alert.message())

    def _log_for(self, alert: lt.torrent_alert, level: int, message: str) -> None:
        record = self._by_handle.get(alert.handle)
        prefix = f"v{record.version}: " if record is not None else ""
        log.log(level, prefix + message, alert.message())

    def _on_dht_peers(self, alert: lt.dht_get_peers_reply_alert) -> None:
        """Connect the downloads of the looked-up info-hash to the peers the DHT found."""
        info_hash = str(alert.info_hash)
        own = ("127.0.0.1", self.listen_port())
        for record in self._torrents.values():
            if str(record.info.info_hashes().v1) != info_hash or record.seeding:
                continue
            for endpoint in alert.peers():
                if _endpoint(endpoint) != own:
                    with contextlib.suppress(RuntimeError):
                        record.handle.connect_peer(endpoint)

    def _on_origin_error(self, alert: lt.url_seed_alert) -> None:
        record = self._by_handle.get(alert.handle)
        if record is None or record.origin is None:
            return
        origin = record.origin
        log.warning("v%d: origin failed: %s", record.version, alert.message())
        if origin.added is not None and alert.server_url() == origin.added:
            # Take it out and come back later with a fresh URL (a presigned URL may have
            # expired; a CDN may be down).
            with contextlib.suppress(RuntimeError):
                record.handle.remove_url_seed(origin.added)
            origin.added = None
            origin.url = None
            origin.retry_at = self._clock() + self.config.origin_retry_s
            self._drop_stripe(record)

    # --- the origin policy ------------------------------------------------------------------

    def _poll_torrent(self, record: _Torrent, now: float) -> None:
        st, connections = record.snapshot()
        if record.bytes_from_peers != record.peer_bytes_at_poll:
            record.peer_bytes_at_poll = record.bytes_from_peers
            record.last_peer_progress = now
        if st.is_seeding or st.errc.value() != 0 or record.error is not None:
            self._origin_off(record, "finished" if st.is_seeding else "failed")
            return
        if st.state in (lt.torrent_status.checking_files, lt.torrent_status.checking_resume_data):
            return
        peers = [p for p in connections if not _is_web_seed(p)]
        bitfields = [(bool(p.flags & lt.peer_info.seed), p.pieces) for p in peers]
        holding = peers_hold_needed(st.pieces, bitfields)
        if not holding:
            self._rediscover(record, now)
        origin = record.origin
        if origin is None:
            return
        if record.stripe_watch is not None:
            record.stripe_watch.update(st.pieces, bitfields, now)
        on = origin.added is not None
        if self.config.origin_policy == "always":
            want = True
        elif not on and now < self._turn(origin, len(peers)):
            want = False
        elif self._striped_origin(record, st, bitfields, now):
            return
        else:
            want = want_origin(
                origin_on=on,
                idle_s=now - record.last_peer_progress,
                starved_s=self.config.origin_starved_s,
                peers_hold_needed=holding,
            )
        if want and not on:
            self._origin_on(record, st, len(peers), now)
        elif not want and on:
            self._origin_off(record, "a peer has pieces we need")
            origin.turn_from, origin.grace, origin.rank = now, 0.0, self._rng.random()
        elif on:
            self._refresh_url(record, now)

    def _striped_origin(self, record: _Torrent, st: lt.torrent_status,
                        bitfields: origin_stripes.Bitfields, now: float) -> bool:
        """The stripe rules (``origin_stripes`` > 1), for a download whose turn has come or
        whose origin is on. Returns False when the starvation rule decides instead.

        - Off, and a stripe nobody in sight holds a piece of (else one that stopped growing
          for ``STALL_FACTOR * origin_starved_s``: its fetcher left it): take the origin
          for it.
          Off, and none: the origin only once peers delivered nothing for
          ``STALL_FACTOR * origin_starved_s`` (the stripes' fetchers are at work; near the
          end everyone waits for their last pieces).
        - On for a stripe that a peer ahead of us also fetches: another unclaimed stripe if
          any, otherwise off and a new turn (the back-off).
        - On for a stripe now complete: the next unclaimed stripe if any; otherwise off,
          and a new turn.
        - On for a stripe in progress: its pieces first, other pieces nobody holds never.
        """
        origin, watch = record.origin, record.stripe_watch
        assert origin is not None
        if watch is None or watch.stripes.stripes == 1:
            return False
        stripes = watch.stripes
        have = st.pieces
        if origin.added is None:
            self._drop_stripe(record)
            free = self._free_stripes(record, now)
            stalled = now - record.last_peer_progress >= STALL_FACTOR * self.config.origin_starved_s
            if (not free and not stalled) or self._origin_url(record, now) is None:
                return True  # nothing to take yet, or no usable URL (retry window, DNS)
            if free:
                self._set_stripe(record, self._rng.choice(free), have, bitfields)
            self._origin_on(record, st, len(bitfields), now)
            return True
        if origin.stripe is None:
            return False
        if origin_stripes.yields(stripes, have, bitfields, origin.stripe, origin.stripe_base):
            free = [s for s in self._free_stripes(record, now) if s != origin.stripe]
            if free:  # the web seed stays, on another stripe
                self._set_stripe(record, self._rng.choice(free), have, bitfields)
                return True
            self._origin_off(record, f"stripe {origin.stripe} is fetched by another agent")
            origin.turn_from, origin.grace, origin.rank = now, 0.0, self._rng.random()
            return True
        if not origin_stripes.complete(stripes, have, origin.stripe):
            self._set_stripe(record, origin.stripe, have, bitfields)  # peers' new pieces
            self._refresh_url(record, now)
            return True
        free = self._free_stripes(record, now)
        if free:
            self._set_stripe(record, self._rng.choice(free), have, bitfields)
            self._refresh_url(record, now)
        else:
            self._origin_off(record, f"stripe {origin.stripe} is complete")
            origin.turn_from, origin.grace, origin.rank = now, 0.0, self._rng.random()
        return True

    def _free_stripes(self, record: _Torrent, now: float) -> list[int]:
        """Stripes to take (as of this tick's :meth:`StripeWatch.update`): those nobody in
        sight holds a piece of, else those that stopped growing for ``STALL_FACTOR *
        origin_starved_s`` (their fetcher left them)."""
        watch = record.stripe_watch
        assert watch is not None
        return watch.unclaimed() or watch.stalled(now, STALL_FACTOR * self.config.origin_starved_s)

    def _set_stripe(self, record: _Torrent, stripe: int, have: Sequence[bool],
                    bitfields: origin_stripes.Bitfields) -> None:
        """Piece priorities for the web seed on ``stripe``."""
        origin, watch = record.origin, record.stripe_watch
        assert origin is not None and watch is not None
        stripes = watch.stripes
        priorities = origin_stripes.priorities(stripes, have, bitfields, stripe)
        if priorities != record.priorities:
            with contextlib.suppress(RuntimeError):
                record.handle.prioritize_pieces(priorities)
            record.priorities = priorities
        if stripe != origin.stripe:
            log.info("v%d: origin stripe %d of %d", record.version, stripe, stripes.stripes)
            origin.stripe_base = origin_stripes.held(stripes, have, bitfields) & stripes.mask(stripe)
        origin.stripe = stripe

    def _drop_stripe(self, record: _Torrent) -> None:
        """No stripe, every piece at the default priority (whenever the origin goes off)."""
        if record.origin is not None:
            record.origin.stripe = None
        if record.priorities is not None:
            with contextlib.suppress(RuntimeError):
                record.handle.prioritize_pieces([origin_stripes.DEFAULT_PRIORITY] * len(record.priorities))
            record.priorities = None

    def _turn(self, origin: _Origin, peers: int) -> float:
        """Monotonic instant from which this download may use the origin."""
        stagger = min(self.config.origin_stagger_s * (peers + 1), self.config.origin_max_delay_s)
        return origin.turn_from + origin.grace + origin.rank * stagger

    def _rediscover(self, record: _Torrent, now: float) -> None:
        """Re-announce (trackers, DHT) at most every ``peer_rediscovery_s``: called while
        no connected peer holds a piece the download needs."""
        if now - record.last_rediscovery < min(record.rediscovery_gap, self.config.peer_rediscovery_s):
            return
        record.last_rediscovery = now
        record.rediscovery_gap *= 2
        record.handle.force_reannounce(0, -1, lt.torrent_handle.ignore_min_interval)
        if self.config.enable_dht:
            # An explicit lookup and announce (answers arrive as dht_get_peers_reply_alert):
            # libtorrent's own DHT announce of a torrent runs on a slow timer, and an
            # agent that started before its DHT had any node would wait for it.
            info_hash = record.info.info_hashes().v1
            self._ses.dht_get_peers(info_hash)
            self._ses.dht_announce(info_hash, self.listen_port(), 0)

    def _origin_url(self, record: _Torrent, now: float) -> str | None:
        """A usable URL for the origin (fetched from the factory when needed), or None."""
        origin = record.origin
        assert origin is not None
        if origin.url is None or self._expiring(origin):
            if now < origin.retry_at:
                return None
            try:
                origin.url = origin.factory()
                origin.url_fetched_at = time.time()
            except Exception as exc:  # the factory is the daemon's code: keep the swarm alive
                log.warning("v%d: cannot get an origin URL: %s", record.version, exc)
                origin.retry_at = now + self.config.origin_retry_s
                return None
        url = origin.url.url
        if not self._origin_addresses_ready(url, now):
            return None
        return url

    def _expiring(self, origin: _Origin) -> bool:
        url = origin.url
        if url is None or url.expires_at is None:
            return False
        margin = min(self.config.origin_url_refresh_s, (url.expires_at - origin.url_fetched_at) / 2)
        return time.time() >= url.expires_at - margin

    def _origin_on(self, record: _Torrent, st: lt.torrent_status, peers: int, now: float) -> None:
        assert record.origin is not None
        url = self._origin_url(record, now)
        if url is None:
            return
        self._add_web_seed(record, url)
        log.info(
            "v%d: origin on (%s; %.1fs after start, %d peers, %.0f%% verified, %d B from peers)",
            record.version,
            self.config.origin_policy,
            now - record.started,
            peers,
            100 * self._verified_fraction(record, st),
            record.bytes_from_peers,
        )

    def _add_web_seed(self, record: _Torrent, url: str) -> None:
        assert record.origin is not None
        record.handle.add_url_seed(url)
        record.origin.added = url

    def _origin_off(self, record: _Torrent, why: str) -> None:
        origin = record.origin
        self._drop_stripe(record)
        if origin is None or origin.added is None:
            return
        with contextlib.suppress(RuntimeError):
            record.snapshot()  # count the web seed's bytes before its connection closes
            record.handle.remove_url_seed(origin.added)
        origin.added = None
        log.info("v%d: origin off (%s; %d B from the origin so far)", record.version, why,
                 record.bytes_from_origin)

    def _refresh_url(self, record: _Torrent, now: float) -> None:
        origin = record.origin
        assert origin is not None and origin.added is not None
        if not self._expiring(origin):
            return
        old = origin.added
        url = self._origin_url(record, now)
        if url is None or url == old:
            return
        record.snapshot()
        record.handle.remove_url_seed(old)
        self._add_web_seed(record, url)
        log.info("v%d: origin URL refreshed", record.version)

    # --- rate limits ------------------------------------------------------------------------

    def _apply_peer_class_filter(self) -> None:
        """Every address in the global class (so limits hold on LANs); origin addresses
        in the origin class too."""
        global_class = 1 << int(lt.session.global_peer_class_id)
        rules = lt.ip_filter()
        rules.add_rule("0.0.0.0", "255.255.255.255", global_class)
        rules.add_rule("::", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", global_class)
        if self._origin_class is not None:
            for ip in sorted(self._origin_ips):
                rules.add_rule(ip, ip, global_class | (1 << self._origin_class))
        self._ses.set_peer_class_filter(rules)

    def _origin_addresses_ready(self, url: str, now: float) -> bool:
        """With an origin peer class (a rate limit or a priority), whether the URL's
        addresses are in it (a host name is resolved in the background first). Always True
        without one."""
        if self._origin_class is None:
            return True
        host, port = _url_host_port(url)
        ip = _ip_literal(host)
        if ip is not None:
            if ip not in self._origin_ips:
                self._origin_ips.add(ip)
                self._apply_peer_class_filter()
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

    def _collect_resolutions(self) -> None:
        for host, future in list(self._resolving.items()):
            if not future.done():
                continue
            del self._resolving[host]
            try:
                addresses = future.result()
            except (OSError, UnicodeError) as exc:
                log.warning("cannot resolve the origin %s: %s; its rate limit may not apply", host, exc)
                addresses = set()
            self._resolved[host] = self._clock()
            if addresses - self._origin_ips:
                self._origin_ips |= addresses
                self._apply_peer_class_filter()

    # --- status helpers ---------------------------------------------------------------------

    @staticmethod
    def _verified_fraction(record: _Torrent, st: lt.torrent_status) -> float:
        total = record.total_bytes
        if total <= 0 or st.is_seeding:
            return 1.0
        pieces = int(st.num_pieces)
        done = pieces * int(record.info.piece_length())
        last = record.info.num_pieces() - 1
        if pieces and record.handle.have_piece(last):
            done -= int(record.info.piece_length()) - int(record.info.piece_size(last))
        return max(0.0, min(1.0, done / total))

    @staticmethod
    def _error_status(record: _Torrent, message: str) -> TransferStatus:
        return TransferStatus(
            version=record.version,
            state="error",
            progress=0.0,
            total_bytes=record.total_bytes,
            bytes_from_peers=record.bytes_from_peers,
            bytes_from_origin=record.bytes_from_origin,
            bytes_uploaded=record.uploaded_before,
            peers=0,
            hash_failures=record.hash_failures,
            finished=False,
            error=message,
        )


def _resolve(host: str, port: int) -> set[str]:
    """The IP addresses ``host`` resolves to (run in the resolver thread)."""
    return {str(info[4][0]) for info in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)}
