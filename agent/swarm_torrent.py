"""One version in the swarm's libtorrent session: its handle, byte counts and status.

The record the :class:`~.swarm.Swarm` shell keeps per torrent: the libtorrent handle, the
torrent's :class:`~.origin_policy.OriginPolicy` and the :class:`FactoryLink` it asks for
URLs, the :class:`~.byte_accounting.ByteAccounting` fed from every read of its
connections, and the counts carried over from an earlier handle of the same version.
:meth:`SwarmTorrent.status` turns a read into a :class:`~.transfer.TransferStatus`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import libtorrent as lt

from .byte_accounting import ByteAccounting
from .origin_peer_class import OriginPeerClass
from .origin_policy import OriginLink, OriginPolicy
from .origin_ranges import Pace, PieceGeometry, StripeFetch
from .transfer import (
    OriginURL,
    OriginURLFactory,
    TransferKey,
    TransferState,
    TransferStatus,
    key_base,
    key_label,
    key_version,
)

log = logging.getLogger("bloomswarm.swarm")

CHECKING = (lt.torrent_status.checking_files, lt.torrent_status.checking_resume_data)
"""Torrent states in which the pieces on disk are being checked."""

FETCH_SETTLE_S = 2.0
"""Seconds after a stripe fetch handed over its last piece before pieces of the stripe
still missing count as lost (libtorrent hashes a piece added with ``add_piece``
asynchronously; one that failed its hash is fetched again)."""
FETCH_ATTEMPTS = 3
"""Stripe fetches of one stripe that may end with pieces missing before the origin counts
as failed (the policy then backs off and retries later with a fresh URL)."""

REUSE_READ_S = 0.05
"""A :meth:`SwarmTorrent.status` this soon after a :meth:`SwarmTorrent.snapshot` reuses its
read: the daemon asks for the status of a download right after ``Swarm.poll`` read it, and
each read crosses to libtorrent's thread twice and walks every connection."""


@dataclass
class SwarmTorrent:
    """One file in the session: a version's, or a delta."""

    key: TransferKey
    handle: lt.torrent_handle
    info: lt.torrent_info
    save_dir: Path
    seeding: bool
    """Added by ``Swarm.seed`` (seed mode) rather than ``Swarm.start_download``."""
    started: float
    """Monotonic instant it was added."""
    policy: OriginPolicy
    """Its origin and peer decisions, and their state."""
    link: OriginLink
    """Its origin URL factory and the origin's peer class (:data:`NO_ORIGIN`: peers only)."""
    accounting: ByteAccounting = field(default_factory=ByteAccounting)
    origin_before: int = 0
    """Bytes from the origin counted by an earlier handle of the same version."""
    peers_before: int = 0
    """Bytes from peers counted by an earlier handle of the same version."""
    uploaded_before: int = 0
    """Payload uploaded by an earlier handle of the same version (replaced by seed())."""
    hash_failures: int = 0
    error: str | None = None
    announced: bool = False
    """A tracker or the DHT has answered for this torrent (the origin policy's settle rule)."""
    complete: bool = False
    """The last :meth:`snapshot` found the file complete (seeding): :meth:`status` then
    reads the counters alone, not every connection, while no web seed is attached."""
    _last_read: tuple[float, lt.torrent_status, list[lt.peer_info]] | None = field(
        default=None, repr=False)
    """The last snapshot, with its monotonic time (see :data:`REUSE_READ_S`)."""
    named_peers: int = 0
    """The most peers one tracker or DHT answer named."""
    stripe_fetch: StripeFetch | None = None
    """The origin stripe being fetched by range requests (``origin_stripe_fetch =
    "ranges"``), or None."""
    fetched_before: int = 0
    """Bytes received by this handle's earlier stripe fetches."""
    _fetch_stripe: int | None = None
    _fetch_attempts: int = 0
    _fetch_ended_at: float | None = None

    @property
    def version(self) -> int:
        """The version the file belongs to (a delta's target version)."""
        return key_version(self.key)

    @property
    def label(self) -> str:
        """The key for log lines ("v5", "v5-from-v4")."""
        return key_label(self.key)

    @property
    def total_bytes(self) -> int:
        return int(self.info.total_size())

    @property
    def bytes_from_origin(self) -> int:
        fetching = 0 if self.stripe_fetch is None else self.stripe_fetch.received
        return self.origin_before + self.accounting.origin + self.fetched_before + fetching

    @property
    def web_seed_on(self) -> bool:
        """libtorrent's web seed is attached (the origin is on, not as a stripe fetch)."""
        return self.policy.attached is not None and self.stripe_fetch is None

    @property
    def settled(self) -> bool:
        """Complete as of the last read, and the origin off (no web seed, no stripe fetch):
        nothing left to decide or count for it."""
        return self.complete and self.policy.attached is None and self.stripe_fetch is None

    # --- the origin stripe fetched by range requests ------------------------------------------

    def fetch_stripe(self, url: str, stripe: int, *, pace: Pace, user_agent: str) -> None:
        """Fetch ``stripe``'s pieces (the policy's stripes) that are still missing from
        ``url``, replacing any fetch under way."""
        stripes = self.policy.stripes
        assert stripes is not None
        if self._fetch_stripe != stripe:
            self._fetch_attempts = 0
        self.stop_fetch()
        handle, info = self.handle, self.info
        geometry = PieceGeometry(info.num_pieces(), info.piece_length(), int(info.total_size()))
        wanted = list(stripes.mask(stripe).search(1))
        self.stripe_fetch = StripeFetch(
            url, wanted, geometry,
            missing=lambda piece: not handle.have_piece(piece),
            deliver=lambda piece, data: handle.add_piece(piece, data, 0),
            piece_hashes={piece: bytes(info.hash_for_piece(piece)) for piece in wanted},
            pace=pace, user_agent=user_agent,
        ).start()
        self._fetch_stripe = stripe
        self._fetch_attempts += 1
        self._fetch_ended_at = None

    @property
    def fetching_stripe(self) -> int | None:
        """The stripe of the fetch under way or ended last (None: none yet)."""
        return self._fetch_stripe

    def stop_fetch(self) -> None:
        """Cancel the stripe fetch under way (its bytes so far stay counted)."""
        fetch, self.stripe_fetch = self.stripe_fetch, None
        if fetch is not None:
            fetch.cancel()
            self.fetched_before += fetch.received
            self.hash_failures += len(fetch.take_bad_pieces())

    def count_bad_pieces(self) -> list[int]:
        """Pieces of the fetch under way that failed their check since the last call,
        counted as hash failures."""
        bad = [] if self.stripe_fetch is None else self.stripe_fetch.take_bad_pieces()
        self.hash_failures += len(bad)
        return bad

    def fetch_trouble(self, now: float, have: Sequence[bool]) -> str | None:
        """Why the stripe fetch failed, checked at every poll: its error, or pieces still
        missing :data:`FETCH_SETTLE_S` after it handed over its last one for the
        :data:`FETCH_ATTEMPTS`-th time (a fetch that ended with pieces missing before that
        is started again; ``have``: the torrent's pieces as just read). None while it runs
        or when it went well."""
        fetch = self.stripe_fetch
        if fetch is None or not fetch.done:
            return None
        if fetch.error is not None:
            return fetch.error
        if self._fetch_ended_at is None:
            self._fetch_ended_at = now
        missing = [p for p in fetch.wanted if p >= len(have) or not have[p]]
        if not missing or now - self._fetch_ended_at < FETCH_SETTLE_S:
            return None
        if self._fetch_attempts >= FETCH_ATTEMPTS:
            return f"{len(missing)} piece(s) of the stripe still missing after {self._fetch_attempts} fetches"
        assert self._fetch_stripe is not None
        log.warning("%s: %d piece(s) of origin stripe %d missing after its fetch (failed their "
                    "hash check?): fetching them again", self.label, len(missing), self._fetch_stripe)
        self.fetch_stripe(fetch.url, self._fetch_stripe, pace=fetch.pace, user_agent=fetch.user_agent)
        return None

    @property
    def bytes_from_peers(self) -> int:
        return self.peers_before + self.accounting.peers

    def snapshot(self, *, origin_attached: bool | None = None,
                 ) -> tuple[lt.torrent_status, list[lt.peer_info]]:
        """The torrent's status and live connections, with the byte accounting updated
        (``origin_attached``: the web seed is on; default: as the policy says). Raises
        RuntimeError when the handle is no longer valid."""
        st = self.handle.status()
        self.complete = bool(st.is_seeding)
        peers = self.handle.get_peer_info()
        self.accounting.update(
            int(st.total_payload_download),
            [
                ((endpoint(p.ip), str(p.pid)), is_web_seed(p),
                 int(p.total_download), int(p.payload_down_speed))
                for p in peers
            ],
            origin_attached=self.web_seed_on if origin_attached is None else origin_attached,
        )
        self._last_read = (time.monotonic(), st, peers)
        return st, peers

    def status(self) -> TransferStatus:
        """A snapshot of the transfer (state "error" when the handle became invalid).

        A complete file without a web seed downloads nothing, so its byte split cannot
        change: it is read with one status call (no piece lists, no per-connection read),
        its peers counted by libtorrent; what an idle, seeding agent pays per tick."""
        try:
            if self.settled:
                st = self.handle.status(0)
                if st.is_seeding:
                    return self._from_status(st, int(st.num_peers))
                self.complete = False  # a piece failed its check in seed mode: read it all
            last = self._last_read
            if last is not None and time.monotonic() - last[0] <= REUSE_READ_S:
                _, st, connections = last
            else:
                st, connections = self.snapshot()
        except RuntimeError as exc:
            return self._status("error", 0.0, 0, uploaded=0, finished=False,
                                error=f"torrent handle invalid: {exc}")
        return self._from_status(st, sum(1 for p in connections if not is_web_seed(p)))

    def _from_status(self, st: lt.torrent_status, peers: int) -> TransferStatus:
        error = st.errc.message() if st.errc.value() != 0 else self.error
        state: TransferState
        if error is not None:
            state = "error"
        elif st.state in CHECKING:
            state = "checking"
        elif st.flags & lt.torrent_flags.paused:
            state = "paused"
        elif st.is_seeding:
            state = "seeding"
        else:
            state = "downloading"
        return self._status(state, self.verified_fraction(st), peers, uploaded=int(st.total_payload_upload),
                            finished=bool(st.is_seeding), error=error)

    def _status(self, state: TransferState, progress: float, peers: int, *, uploaded: int,
                finished: bool, error: str | None) -> TransferStatus:
        return TransferStatus(
            version=self.version, state=state, progress=progress, total_bytes=self.total_bytes,
            bytes_from_peers=self.bytes_from_peers, bytes_from_origin=self.bytes_from_origin,
            bytes_uploaded=self.uploaded_before + uploaded, peers=peers,
            hash_failures=self.hash_failures, finished=finished, error=error,
            base=key_base(self.key),
        )

    def verified_fraction(self, st: lt.torrent_status) -> float:
        """Fraction of the file verified and on disk, 0..1."""
        total = self.total_bytes
        if total <= 0 or st.is_seeding:
            return 1.0
        pieces = int(st.num_pieces)
        done = pieces * int(self.info.piece_length())
        last = self.info.num_pieces() - 1
        if pieces and self.handle.have_piece(last):
            done -= int(self.info.piece_length()) - int(self.info.piece_size(last))
        return max(0.0, min(1.0, done / total))


class FactoryLink:
    """The :class:`~.origin_policy.OriginLink` of one download: its URL factory (whose
    failures are logged, never raised), and the origin's peer class."""

    def __init__(self, label: str, factory: OriginURLFactory, peer_class: OriginPeerClass) -> None:
        self._label = label
        self._factory = factory
        self._peer_class = peer_class

    def fetch(self) -> OriginURL | None:
        try:
            return self._factory()
        except Exception as exc:  # the factory is the daemon's code: keep the swarm alive
            log.warning("%s: cannot get an origin URL: %s", self._label, exc)
            return None

    def ready(self, url: str, now: float) -> bool:
        return self._peer_class.addresses_ready(url, now)


class _NoOrigin:
    """The link of a torrent without an origin: the policy never asks it."""

    def fetch(self) -> OriginURL | None:
        return None

    def ready(self, url: str, now: float) -> bool:
        return False


NO_ORIGIN: OriginLink = _NoOrigin()


def is_web_seed(peer: lt.peer_info) -> bool:
    """Whether a connection is a web seed (the origin)."""
    return bool(peer.connection_type in (lt.peer_info.web_seed, lt.peer_info.http_seed))


def endpoint(value: tuple[str, int]) -> tuple[str, int]:
    """A connection's ``(address, port)`` as plain values."""
    host, port = value
    return str(host), int(port)

