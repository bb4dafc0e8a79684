"""The BitTorrent transfer: one libtorrent session that downloads versions from peers and
the origin, then keeps seeding them.

:class:`Swarm` implements :class:`~bloomswarm.agent.transfer.Transfer`. One session holds
every version the agent downloads or seeds, with the settings of
:mod:`.session_settings` (a data centre: TCP only, large send buffers). Peers come from
the configured trackers (the ``.torrent``'s own only with ``torrent_trackers``: the
signature does not cover them), the DHT (bootstrapped only from the configured nodes),
LSD when enabled, and PEX.

The origin (S3 presigned URL or CDN URL) is a BEP 19 web seed added at run time with
``add_url_seed``: the torrent carries no URL that could expire (web seeds inside a
torrent, or remembered by resume data, are dropped). *When* it is added, removed or
replaced, which piece priorities a download has, and when it re-announces, is decided by
the pure core :class:`~.origin_policy.OriginPolicy`, one per torrent (its module holds
every rule: turns, grace, stagger, stripes, stall, back-off). This module is the shell:
at every :meth:`Swarm.poll` it reads each torrent's status and peers from libtorrent,
feeds them to the torrent's policy as an :class:`~.origin_policy.Observation`, and
applies the :class:`~.origin_policy.Decision`; origin errors (``url_seed_alert``) go to
:meth:`~.origin_policy.OriginPolicy.origin_failed`.

Beside it: :mod:`.byte_accounting` splits each download's bytes between origin and peers
(read at every poll and status); :mod:`.origin_peer_class` keeps rate limits on LANs and
gives the origin's addresses their own peer class (``origin_rate_limit``,
``origin_download_priority``), resolving host names in a background thread.

Threading: like the protocol says, every method is called from one thread; only
:meth:`Swarm.save_resume_data` waits (bounded by its timeout). Processes that run a
Swarm and start worker processes must use the ``spawn`` start method (fork after
libtorrent's threads have started hangs).
"""

from __future__ import annotations

import contextlib
import logging
import random
import string
import time
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

import libtorrent as lt

from bloomswarm.common.errors import CertificateError, FormatError

from .config import SwarmConfig
from .origin_peer_class import OriginPeerClass
from .origin_policy import Attach, Decision, Detach, Observation, OriginPolicy, Replace
from .origin_ranges import Pace
from .origin_relay import OriginRelay
from .peer_access import RefusalLog, make_ip_filter, refusal_reason
from .session_settings import session_settings
from .swarm_torrent import CHECKING, NO_ORIGIN, FactoryLink, SwarmTorrent, endpoint, is_web_seed
from .transfer import (
    OriginURLFactory,
    TransferKey,
    TransferStatus,
    key_label,
    key_order,
    key_scope,
    same_file,
)

if TYPE_CHECKING:  # x509 and the certificates are loaded only by an agent that has some
    from bloomswarm.common.tls_identity import TlsIdentity

    from .certificates import CertificateStore

__all__ = ["Swarm", "SwarmConfig", "session_settings"]

log = logging.getLogger("bloomswarm.swarm")


class Swarm:
    """A :class:`~bloomswarm.agent.transfer.Transfer` over one libtorrent session.

    ``clock`` (monotonic seconds) and ``rng`` are for tests. The session listens as soon
    as the object exists; :meth:`close` (or leaving a ``with`` block) releases it. Beyond
    the protocol: :meth:`listen_port` (what other agents bootstrap their DHT from),
    :meth:`connect` (a peer at a known address) and :meth:`origin_in_use`, and read-only
    views for tests (:meth:`piece_priorities`,
    :meth:`web_seeds`, :meth:`trackers`, :meth:`connection_bytes`).
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
        self.certificates: CertificateStore | None = None
        """This agent's certificates for private versions (None: it joins public swarms
        only). Loaded before the session starts: CertificateError stops the agent."""
        if self.config.certificate_dirs:
            from .certificates import CertificateStore  # x509: only with certificates
            self.certificates = CertificateStore(self.config.certificate_dirs, clock=clock)
        self._relay = OriginRelay(user_agent=self.config.user_agent)
        """Serves private versions' HTTPS origin URLs to libtorrent over loopback."""
        self.refusals = RefusalLog()
        """Peers refused (outside the allowed networks, or failing a private version's TLS
        handshake), counted by reason."""
        self.peer_id = _new_peer_id(self._rng)
        """This session's peer id (every torrent's): peers rank it for the origin's turns."""
        settings = session_settings(self.config)
        settings["peer_fingerprint"] = self.peer_id.decode("ascii")
        self._session: lt.session | None = lt.session(settings)
        self._torrents: dict[TransferKey, SwarmTorrent] = {}
        self._by_handle: dict[lt.torrent_handle, SwarmTorrent] = {}
        self._resume: dict[lt.torrent_handle, bytes | None] = {}
        self._moves: dict[lt.torrent_handle, str | None] = {}  # relocate(): None, or the error
        self._dropped_warned = False
        self._swarm_size = 0
        """The fleet's size as known from the versions held here: the most agents (complete
        + incomplete) the trackers reported for a complete torrent at the last poll (the
        current poll's count goes to ``_swarm_size_now``); 0: unknown."""
        self._swarm_size_now = 0
        self._fleet: dict[str | None, frozenset[bytes]] = {}
        """Per filter (``key_scope``), peer ids of the agents connected for any of its
        versions at this poll (the complete ones are read first): the fleet in sight of
        a new version's download before its peers connect for it."""
        self._fleet_now: dict[str | None, set[bytes]] = {}
        self._peer_class = OriginPeerClass(self._ses, self.config, clock,
                                           on_addresses=self._allow_origin)
        caps = [c for c in (self.config.origin_rate_limit, self.config.download_rate_limit) if c > 0]
        self._stripe_pace = Pace(min(caps, default=0))
        """The pace of every stripe fetch of this agent together (origin_stripe_fetch =
        "ranges"): the origin cap, or the download cap, the lower one set."""

    # --- Transfer ---------------------------------------------------------------------------

    def start_download(
        self,
        key: TransferKey,
        torrent: bytes,
        save_dir: Path,
        origin: OriginURLFactory | None,
        *,
        resume_data: bytes | None = None,
    ) -> None:
        """Begin fetching ``key`` into ``save_dir`` (see the protocol).

        Raises FormatError when ``torrent`` is not a valid torrent, ValueError when the
        same torrent is already in the session under another version, and
        CertificateError for a private version whose CA issued no certificate of this
        agent (``swarm.certificate_dirs``). A version already
        present is replaced. Resume data of another torrent, or unreadable resume data, is
        ignored with a warning (the files on disk are then checked instead). Existing
        data in ``save_dir`` is checked and kept; only missing pieces are fetched.
        """
        info = self._torrent_info(torrent)
        params: lt.add_torrent_params | None = None
        if resume_data is not None:
            params = self._read_resume(resume_data, info, key)
        if params is None:
            params = lt.add_torrent_params()
        self._add(key, info, params, save_dir, seeding=False, origin=origin)

    def seed(self, key: TransferKey, torrent: bytes, file_dir: Path) -> None:
        """Serve ``version`` from the complete, verified file in ``file_dir``.

        The torrent is added in seed mode: nothing is hashed up front (libtorrent still
        hashes each piece the first time a peer asks for it, so a damaged file is never
        served). A version already present (its download) is replaced; its byte counts
        carry over. Raises FormatError for an invalid torrent.
        """
        info = self._torrent_info(torrent)
        params = lt.add_torrent_params()
        params.flags |= lt.torrent_flags.seed_mode
        self._add(key, info, params, file_dir, seeding=True, origin=None)

    def relocate(self, key: TransferKey, file_dir: Path, timeout: float = 5.0) -> bool:
        """Switch ``key``'s finished download to the same file in ``file_dir`` (see the
        protocol), keeping its handle: its connections, counts and policy.

        libtorrent's ``move_storage`` with ``reset_save_path_unchecked`` moves and checks
        nothing: it waits for the torrent's outstanding disk jobs (a fence), closes its
        files and reads from ``file_dir`` from then on. Every piece was hashed when it
        was downloaded and the file is the same inode, so no piece needs hashing again.
        Waits for ``storage_moved_alert`` up to ``timeout`` seconds, processing other
        events as :meth:`poll` does; a ``storage_moved_failed_alert`` or no answer in
        time returns False (the old directory may then still be read: keep it until
        the torrent is removed).
        """
        record = self._torrents.get(key)
        if record is None:
            return False
        name = record.info.name()  # a one-file torrent: its file's name
        if record.info.num_files() != 1 or not same_file(record.save_dir / name, file_dir / name):
            return False
        handle = record.handle
        try:
            if not handle.status().is_seeding:
                return False
            self._moves.pop(handle, None)
            handle.move_storage(str(file_dir), lt.move_flags_t.reset_save_path_unchecked)
        except RuntimeError as exc:
            log.warning("%s: cannot switch to %s: %s", record.label, file_dir, exc)
            return False
        deadline = self._clock() + timeout
        while handle not in self._moves:
            left = deadline - self._clock()
            if left <= 0:
                log.warning("%s: no answer from libtorrent on the switch to %s within %.1fs",
                            record.label, file_dir, timeout)
                return False
            self._ses.wait_for_alert(int(min(left, 0.5) * 1000) + 1)
            self._drain_alerts()
        error = self._moves.pop(handle)
        if error is not None:
            log.warning("%s: cannot switch to %s: %s", record.label, file_dir, error)
            return False
        record.save_dir, record.seeding = file_dir, True
        peers = sum(1 for p in handle.get_peer_info() if not is_web_seed(p))
        log.info("%s: now seeds from %s (same torrent, %d peer connections kept)",
                 record.label, file_dir, peers)
        return True

    def remove(self, key: TransferKey) -> None:
        """Stop transferring ``version``; its files stay. Unknown versions are ignored."""
        record = self._torrents.pop(key, None)
        if record is None:
            return
        record.stop_fetch()
        self._by_handle.pop(record.handle, None)
        self._resume.pop(record.handle, None)
        self._moves.pop(record.handle, None)
        with contextlib.suppress(RuntimeError):
            self._ses.remove_torrent(record.handle)
        log.info("%s: removed from the swarm", record.label)

    def status(self, key: TransferKey) -> TransferStatus | None:
        """A snapshot of ``version``'s transfer, or None when it is not in the session."""
        record = self._torrents.get(key)
        return None if record is None else record.status()

    def versions(self) -> list[TransferKey]:
        """Versions in the session (downloading or seeding), ascending."""
        return sorted(self._torrents, key=key_order)

    def poll(self) -> None:
        """Process libtorrent's events, then, for each download: update its byte counts,
        re-announce while no connected peer holds a piece it needs, apply the origin
        policy, and refresh the origin URL before it expires. While every torrent is a
        complete file without a web seed (an idle agent, seeding), no torrent is read:
        :meth:`status` still reads each (one call each), and the first poll after a
        download starts reads them all again.

        Never raises for a problem of one version: it is logged and shows in the status.
        """
        self._drain_alerts()
        self._peer_class.collect()
        if self.certificates is not None and self.certificates.refresh():
            for record in self._torrents.values():
                self._present_certificate(record.handle, record.info)
        now = self._clock()
        records = list(self._torrents.values())
        if all(r.settled for r in records):
            return  # only complete files, no web seed: no decision to take, nothing to count
        self._swarm_size_now = 0
        self._fleet_now = {}
        # Complete torrents first: their peers are the fleet the downloads see this tick.
        for record in sorted(records, key=lambda r: not r.complete):
            try:
                self._poll_torrent(record, now)
            except RuntimeError as exc:  # libtorrent refused an operation on this torrent
                log.warning("%s: %s", record.label, exc)
        self._swarm_size = self._swarm_size_now
        self._fleet = {scope: frozenset(ids) for scope, ids in self._fleet_now.items()}

    def wait(self, timeout: float) -> None:
        """Block until libtorrent posts an event (a torrent finished, a tracker answered, an
        error) or ``timeout`` seconds passed (see the protocol)."""
        if self._session is not None:
            self._session.wait_for_alert(max(1, int(timeout * 1000)))

    def save_resume_data(
        self, timeout: float = 10.0, keys: Collection[TransferKey] | None = None
    ) -> dict[TransferKey, bytes]:
        """Resume data of the unfinished downloads (of ``keys`` only, when given), by key.

        Asks libtorrent for each download's resume data (flushing its disk cache first, so
        the data on disk is at least what the resume data claims) and waits up to
        ``timeout`` seconds for the answers; downloads that did not answer in time, or
        failed to, are left out. Other events that arrive meanwhile are processed as in
        :meth:`poll`.
        """
        pending: dict[lt.torrent_handle, TransferKey] = {}
        records = (self._torrents.values() if keys is None
                   else [r for k in keys if (r := self._torrents.get(k)) is not None])
        for record in records:
            if record.seeding or record.error is not None:
                continue
            try:
                if record.handle.status().is_seeding:
                    continue
                record.handle.save_resume_data(lt.torrent_handle.flush_disk_cache)
            except RuntimeError as exc:
                log.warning("%s: cannot save resume data: %s", record.label, exc)
                continue
            pending[record.handle] = record.key
            self._resume.pop(record.handle, None)
        result: dict[TransferKey, bytes] = {}
        deadline = self._clock() + timeout
        while pending:
            self._drain_alerts()
            for handle in [h for h in pending if h in self._resume]:
                data = self._resume.pop(handle)
                key = pending.pop(handle)
                if data is not None:
                    result[key] = data
            left = deadline - self._clock()
            if not pending or left <= 0:
                break
            self._ses.wait_for_alert(int(min(left, 0.5) * 1000) + 1)
        for key in pending.values():
            log.warning("%s: no resume data within %.1fs", key_label(key), timeout)
        return result

    def close(self) -> None:
        """Remove every torrent (keeping files) and destroy the session, which closes its
        listening sockets. Idempotent."""
        if self._session is None:
            return
        for key in list(self._torrents):
            self.remove(key)
        self._peer_class.close()
        self._relay.close()
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

    def ssl_listen_port(self) -> int:
        """The TLS port private versions' peers connect to (0: none, no certificates)."""
        return int(self._ses.ssl_listen_port())

    def connect(self, key: TransferKey, peer: tuple[str, int]) -> None:
        """Connect ``key``'s torrent to the peer at ``peer`` (an address known beside the
        tracker, DHT and LSD). Unknown keys are ignored."""
        record = self._torrents.get(key)
        if record is not None:
            with contextlib.suppress(RuntimeError):
                record.handle.connect_peer(peer)

    def origin_in_use(self, key: TransferKey) -> bool:
        """Whether ``version``'s origin is currently added as web seed."""
        record = self._torrents.get(key)
        return record is not None and record.policy.attached is not None

    def piece_priorities(self, key: TransferKey) -> list[int] | None:
        """``version``'s piece priorities as libtorrent holds them (None: not in the session)."""
        record = self._torrents.get(key)
        return None if record is None else [int(p) for p in record.handle.get_piece_priorities()]

    def web_seeds(self, key: TransferKey) -> list[str] | None:
        """The web seed URLs of ``version``'s torrent (None: not in the session)."""
        record = self._torrents.get(key)
        return None if record is None else [str(url) for url in record.handle.url_seeds()]

    def connection_bytes(self, key: TransferKey) -> dict[tuple[tuple[str, int], tuple[str, int]], int] | None:
        """Payload received so far on each live peer connection of ``key`` (not the
        origin), by the connection's ends: the peer's address, then this side's (None: not
        in the session). libtorrent may count an earlier connection's bytes with the same
        peer in a new one; a connection this side dials again has a new local port."""
        record = self._torrents.get(key)
        if record is None:
            return None
        return {(endpoint(p.ip), endpoint(p.local_endpoint())): int(p.total_download)
                for p in record.handle.get_peer_info() if not is_web_seed(p)}

    def trackers(self, key: TransferKey) -> list[str] | None:
        """The tracker URLs ``version`` announces to, sorted (None: not in the session)."""
        record = self._torrents.get(key)
        return None if record is None else sorted(str(entry["url"]) for entry in record.handle.trackers())

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

    def _read_resume(
        self, data: bytes, info: lt.torrent_info, key: TransferKey
    ) -> lt.add_torrent_params | None:
        try:
            params = lt.read_resume_data(data)
        except (RuntimeError, TypeError, ValueError) as exc:
            log.warning("%s: ignoring unreadable resume data: %s", key_label(key), exc)
            return None
        if str(params.info_hashes.v1) != str(info.info_hashes().v1) or str(
            params.info_hashes.v2
        ) != str(info.info_hashes().v2):
            log.warning("%s: ignoring resume data of another torrent", key_label(key))
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
        key: TransferKey,
        info: lt.torrent_info,
        params: lt.add_torrent_params,
        save_dir: Path,
        *,
        seeding: bool,
        origin: OriginURLFactory | None,
    ) -> None:
        if self._session is None:
            raise RuntimeError("the swarm is closed")
        identity = self._identity_for(info)  # a private version it cannot join: before any change
        hashes = str(info.info_hashes().v1), str(info.info_hashes().v2)
        for other in self._torrents.values():
            other_hashes = str(other.info.info_hashes().v1), str(other.info.info_hashes().v2)
            if other.key != key and other_hashes == hashes:
                raise ValueError(
                    f"{key_label(key)}: the same torrent is already in the swarm as {other.label}"
                )
        previous = self._torrents.get(key)
        if previous is not None:
            with contextlib.suppress(RuntimeError):
                previous.snapshot()  # count the old handle's last bytes before it goes
            self.remove(key)
        try:
            handle = self._add_handle(info, params, save_dir, web_seed=None, identity=identity)
        except RuntimeError as exc:
            raise ValueError(f"{key_label(key)}: libtorrent refused the torrent: {exc}") from exc
        now = self._clock()
        if origin is not None and info.ssl_cert():  # libtorrent would refuse an HTTPS origin
            origin = self._relay.wrap(origin)
        policy = OriginPolicy(self.config, pieces=info.num_pieces(), piece_length=info.piece_length(),
                              origin=origin is not None, now=now, rng=self._rng,
                              peer_bytes=0 if previous is None else previous.bytes_from_peers,
                              identity=(info.info_hashes().get_best().to_bytes(), self.peer_id),
                              fleet_size=self._fleet_size() if origin is not None else 0)
        record = SwarmTorrent(
            key=key,
            handle=handle,
            info=info,
            save_dir=save_dir,
            seeding=seeding,
            started=now,
            policy=policy,
            link=NO_ORIGIN if origin is None else FactoryLink(key_label(key), origin, self._peer_class),
        )
        if previous is not None:
            record.origin_before = previous.bytes_from_origin
            record.peers_before = previous.bytes_from_peers
            record.hash_failures = previous.hash_failures
            with contextlib.suppress(RuntimeError):
                record.uploaded_before = previous.uploaded_before + int(
                    previous.handle.status().total_payload_upload
                )
        self._torrents[key] = record
        self._by_handle[handle] = record
        log.info(
            "%s: %s %s in %s (%d bytes, %d pieces)",
            record.label,
            "seeding" if seeding else "downloading",
            hashes[0],
            save_dir,
            record.total_bytes,
            info.num_pieces(),
        )

    def _add_handle(self, info: lt.torrent_info, params: lt.add_torrent_params, save_dir: Path,
                    *, web_seed: str | None, identity: TlsIdentity | None = None) -> lt.torrent_handle:
        """Add ``info`` to the session with the configured trackers only, and no web seed
        but ``web_seed`` (one written into the torrent is unsigned, one remembered by resume
        data may have expired), and for a private version ``identity``, the certificate of
        its CA. RuntimeError when libtorrent refuses it."""
        params.ti = info
        params.save_path = str(save_dir)
        params.flags &= ~lt.torrent_flags.auto_managed
        params.flags |= lt.torrent_flags.paused  # resumed once its trackers are settled
        params.flags |= lt.torrent_flags.duplicate_is_error
        trackers = list(self.config.trackers)
        if trackers:
            params.trackers = list(params.trackers) + trackers
            params.tracker_tiers = list(params.tracker_tiers) + [0] * len(trackers)
        params.url_seeds = [] if web_seed is None else [web_seed]
        params.http_seeds = []
        handle = self._ses.add_torrent(params)
        if identity is not None:
            _set_certificate(handle, identity)
        if not self.config.torrent_trackers:  # keep only the configured trackers
            handle.replace_trackers([lt.announce_entry(url) for url in trackers])
        for url in handle.url_seeds():
            if url != web_seed:
                handle.remove_url_seed(url)
        handle.resume()
        return handle

    def _identity_for(self, info: lt.torrent_info) -> TlsIdentity | None:
        """The certificate to present in ``info``'s swarm: None for a public torrent;
        CertificateError for a private one whose CA issued none of this agent's."""
        ca = str(info.ssl_cert())
        if not ca:
            return None
        identity = self.certificates.for_ca(ca.encode("ascii")) if self.certificates else None
        if identity is None:
            from bloomswarm.common.tls_identity import ca_fingerprint  # x509: a private torrent

            held = "none configured (swarm.certificate_dirs)" if self.certificates is None else \
                ", ".join(i.subject for i in self.certificates.identities)
            raise CertificateError(f"a private version of CA {ca_fingerprint(ca)[:16]}..., and "
                                   f"no certificate of this agent is from that CA (held: {held})")
        return identity

    def _present_certificate(self, handle: lt.torrent_handle, info: lt.torrent_info) -> None:
        """Give a private torrent the (reloaded) certificate of its CA."""
        with contextlib.suppress(RuntimeError, CertificateError):
            identity = self._identity_for(info)
            if identity is not None:
                _set_certificate(handle, identity)

    def _allow_origin(self, addresses: frozenset[str]) -> None:
        """With an allow-list, the session's ip_filter: the allowed networks and the
        origin's ``addresses`` (libtorrent filters web seeds too)."""
        if self.config.allowed_peer_networks:
            self._ses.set_ip_filter(make_ip_filter(self.config.allowed_peer_networks, addresses))

    def _attach_at_once(self, record: SwarmTorrent, url: str) -> None:
        """Add the web seed on ``url`` to a download that holds nothing yet, so that it
        connects now: libtorrent connects a web seed added at run time only on its
        one-second tick, but one given with the torrent as soon as the torrent is added.
        The torrent is added again with it (it has no byte to lose; its peers are found
        again through the trackers at once: only with trackers configured, not on the
        DHT alone, whose lookups take seconds). If libtorrent refuses the new torrent, the
        download is in error (the agent retries it)."""
        old = record.handle
        params = lt.add_torrent_params()
        try:
            params.piece_priorities = old.get_piece_priorities()  # a stripe's, set this tick
            self._ses.remove_torrent(old)
        except RuntimeError:
            old.add_url_seed(url)
            return
        self._by_handle.pop(old, None)
        self._resume.pop(old, None)
        try:
            handle = self._add_handle(record.info, params, record.save_dir, web_seed=url)
        except RuntimeError as exc:
            record.error = f"libtorrent refused the torrent again with its web seed: {exc}"
            log.error("%s: %s", record.label, record.error)
            return
        record.handle = handle
        self._by_handle[handle] = record

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
                    log.warning("%s: piece %d failed its hash check", record.label, alert.piece_index)
            elif isinstance(alert, lt.save_resume_data_alert):
                self._resume[alert.handle] = bytes(lt.write_resume_data_buf(alert.params))
            elif isinstance(alert, lt.save_resume_data_failed_alert):
                self._resume[alert.handle] = None
                self._log_for(alert, logging.WARNING, "saving resume data failed: %s")
            elif isinstance(alert, lt.url_seed_alert):
                self._on_origin_error(alert)
            elif isinstance(alert, lt.storage_moved_alert):
                self._moves[alert.handle] = None
            elif isinstance(alert, lt.storage_moved_failed_alert):
                self._moves[alert.handle] = alert.message()
            elif isinstance(alert, lt.dht_get_peers_reply_alert):
                self._on_dht_peers(alert)
            elif isinstance(alert, lt.tracker_reply_alert):
                record = by_handle.get(alert.handle)
                if record is not None:
                    record.announced = True
                    record.named_peers = max(record.named_peers, int(alert.num_peers))
            elif isinstance(alert, (lt.torrent_error_alert, lt.file_error_alert)):
                record = by_handle.get(alert.handle)
                if record is not None:
                    record.error = alert.message()
                    log.error("%s: %s", record.label, alert.message())
            elif isinstance(alert, lt.alerts_dropped_alert):
                if not self._dropped_warned:
                    self._dropped_warned = True
                    log.warning("libtorrent dropped alerts (poll more often or raise "
                                "swarm.alert_queue_size): hash failures may be undercounted")
            elif isinstance(alert, (lt.tracker_error_alert, lt.listen_failed_alert)):
                log.warning("%s", alert.message())
            elif (reason := refusal_reason(alert)) is not None:
                count = self.refusals.record(reason, self._clock())
                if count is not None:
                    log.warning("refused %d peer(s) (%s) since the last report, e.g. %s", count, reason,
                                alert.message())
            elif debug:
                log.debug("%s: %s", type(alert).__name__, alert.message())

    def _log_for(self, alert: lt.torrent_alert, level: int, message: str) -> None:
        record = self._by_handle.get(alert.handle)
        prefix = f"{record.label}: " if record is not None else ""
        log.log(level, prefix + message, alert.message())

    def _on_dht_peers(self, alert: lt.dht_get_peers_reply_alert) -> None:
        """Connect the downloads of the looked-up info-hash to the peers the DHT found."""
        info_hash = str(alert.info_hash)
        own = ("127.0.0.1", self.listen_port())
        peers = alert.peers()
        for record in self._torrents.values():
            if str(record.info.info_hashes().v1) != info_hash or record.seeding:
                continue
            record.announced = True
            record.named_peers = max(record.named_peers, len(peers))
            for peer in peers:
                if endpoint(peer) != own:
                    with contextlib.suppress(RuntimeError):
                        record.handle.connect_peer(peer)

    def _on_origin_error(self, alert: lt.url_seed_alert) -> None:
        record = self._by_handle.get(alert.handle)
        if record is None or not record.policy.has_origin:
            return
        log.warning("%s: origin failed: %s", record.label, alert.message())
        decision = record.policy.origin_failed(str(alert.server_url()), self._clock())
        with contextlib.suppress(RuntimeError):
            self._apply(record, decision)

    # --- the origin policy: observations in, decisions applied ------------------------------

    def fleet_in_sight(self, scope: str | None = None) -> frozenset[bytes]:
        """Peer ids of the agents connected for the versions of filter ``scope`` (None: the
        single filter) at the last poll that read them: what a new version's download of
        that filter counts its place among (docs/origin-policy.md)."""
        return self._fleet.get(scope, frozenset())

    def _fleet_size(self) -> int:
        """The fleet's size as the trackers count it for the versions held here (complete
        torrents), read now: an idle agent's polls do not read them."""
        size = 0
        for record in self._torrents.values():
            if record.complete or record.seeding:
                with contextlib.suppress(RuntimeError):
                    size = max(size, _tracker_count(record.handle.status()))
        return size

    def _poll_torrent(self, record: SwarmTorrent, now: float) -> None:
        st, connections = record.snapshot()
        peers = [p for p in connections if not is_web_seed(p)]
        # The swarm's size as the trackers see it (complete + incomplete); a complete
        # torrent's tells the fleet's size to the downloads of newer versions.
        size = _tracker_count(st)
        if st.is_seeding:
            self._swarm_size_now = max(self._swarm_size_now, size)
        # A connection still in its handshake has no peer id yet (all zeros).
        peer_ids = [pid for pid in (p.pid.to_bytes() for p in peers) if any(pid)]
        scope = key_scope(record.key)
        fleet = self._fleet_now.setdefault(scope, set())
        fleet_ids = frozenset() if st.is_seeding else frozenset(fleet)  # a seed's policy is done
        fleet.update(peer_ids)
        observation = Observation(
            now=now,
            wall=time.time(),
            peer_bytes=record.bytes_from_peers,
            have=st.pieces,
            peers=[(bool(p.flags & lt.peer_info.seed), p.pieces) for p in peers],
            finished=bool(st.is_seeding),
            failed=st.errc.value() != 0 or record.error is not None,
            checking=st.state in CHECKING,
            announced=record.announced or bool(peers),
            known_peers=record.named_peers,
            swarm_size=max(self._swarm_size, size, record.named_peers),
            peer_ids=peer_ids,
            fleet_peer_ids=fleet_ids,
            fleet_known=self._swarm_size > 0,
        )
        self._check_fetch(record, now, st.pieces)
        decision = record.policy.step(observation, record.link)
        self._apply(record, decision, (now, st, observation))

    def _apply(self, record: SwarmTorrent, decision: Decision,
               tick: tuple[float, lt.torrent_status, Observation] | None = None) -> None:
        """Carry out ``decision`` on ``record``'s torrent (``tick``: the time, its status
        and what the policy observed this tick, for the log of an added web seed)."""
        if decision.reannounce:
            self._reannounce(record)
        stripes = record.policy.stripes
        by_ranges = (self.config.origin_stripe_fetch == "ranges" and stripes is not None
                     and stripes.stripes > 1)
        # Fetched by range requests, a stripe needs no priorities: without a web seed,
        # pieces nobody holds cannot be picked anyway.
        if decision.priorities is not None and not by_ranges:
            with contextlib.suppress(RuntimeError):
                record.handle.prioritize_pieces(list(decision.priorities))
        if decision.stripe is not None and stripes is not None:
            log.info("%s: origin stripe %d of %d", record.label, decision.stripe, stripes.stripes)
        change = decision.web_seed
        if record.stripe_fetch is not None or (
                by_ranges and isinstance(change, Attach) and record.policy.stripe is not None):
            self._apply_to_fetch(record, decision)
        else:
            self._apply_to_web_seed(record, change, tick)
        if isinstance(change, Attach):
            assert tick is not None
            now, st, seen = tick
            log.info("%s: origin on (%s; %.1fs after start, %d peers of a swarm of %d, position "
                     "%.1f, %.0f%% verified, %d B from peers)",
                     record.label, self.config.origin_policy, now - record.started, len(seen.peers),
                     seen.swarm_size, record.policy.position(seen), 100 * record.verified_fraction(st),
                     record.bytes_from_peers)
        elif isinstance(change, Detach) and change.reason is not None:
            log.info("%s: origin off (%s; %d B from the origin so far)", record.label, change.reason,
                     record.bytes_from_origin)
        elif isinstance(change, Replace):
            log.info("%s: origin URL refreshed", record.label)

    def _apply_to_fetch(self, record: SwarmTorrent, decision: Decision) -> None:
        """The origin decision for a stripe fetched by range requests: start it, move it
        to the decision's new stripe, give it a refreshed URL, or stop it."""
        change = decision.web_seed
        if isinstance(change, Detach):
            record.stop_fetch()
            return
        fetch = record.stripe_fetch
        if isinstance(change, Replace) and fetch is not None:
            fetch.url = change.new  # a refreshed URL, for its next request
        url = change.url if isinstance(change, Attach) else fetch.url if fetch is not None else None
        stripe = record.policy.stripe
        if url is not None and stripe is not None and (fetch is None or stripe != record.fetching_stripe):
            record.fetch_stripe(url, stripe, **self._fetch_options())

    def _apply_to_web_seed(self, record: SwarmTorrent, change: Attach | Detach | Replace | None,
                           tick: tuple[float, lt.torrent_status, Observation] | None) -> None:
        """The origin decision for libtorrent's web seed: add it (at once, for a download
        that holds nothing yet), remove it, or replace its URL."""
        handle = record.handle
        if isinstance(change, Attach):
            assert tick is not None
            _, st, _ = tick
            # Not for a private version: a peer's TLS session belongs to the torrent it was
            # made with, and libtorrent cuts it from the torrent added again.
            if (self.config.trackers and st.total_payload_download == 0 and not record.seeding
                    and not any(st.pieces) and not record.info.ssl_cert()):
                self._attach_at_once(record, change.url)
            else:
                handle.add_url_seed(change.url)
        elif isinstance(change, Detach):
            with contextlib.suppress(RuntimeError):
                if change.reason is not None:
                    record.snapshot(origin_attached=True)  # count the web seed's bytes before it closes
                handle.remove_url_seed(change.url)
        elif isinstance(change, Replace):
            record.snapshot(origin_attached=True)
            handle.remove_url_seed(change.old)
            handle.add_url_seed(change.new)

    def _fetch_options(self) -> dict[str, Any]:
        """How stripe fetches go: all paced together (:attr:`_stripe_pace`), with the
        agent's User-Agent."""
        return {"pace": self._stripe_pace, "user_agent": self.config.user_agent}

    def _check_fetch(self, record: SwarmTorrent, now: float, have: Sequence[bool]) -> None:
        """A stripe fetch that failed is an origin error (the policy backs off and tries
        again with a fresh URL after ``origin_retry_s``)."""
        for piece in record.count_bad_pieces():
            log.warning("%s: piece %d from the origin failed its hash check (not handed to libtorrent)",
                        record.label, piece)
        fetch = record.stripe_fetch
        trouble = None if fetch is None else record.fetch_trouble(now, have)
        if fetch is None or trouble is None:
            return
        log.warning("%s: origin failed: %s", record.label, trouble)
        self._apply(record, record.policy.origin_failed(fetch.url, now))

    def _reannounce(self, record: SwarmTorrent) -> None:
        """Re-announce to the trackers and the DHT (the policy asks for it while no
        connected peer holds a piece the download needs)."""
        record.handle.force_reannounce(0, -1, lt.torrent_handle.ignore_min_interval)
        if self.config.enable_dht:
            # An explicit lookup and announce (answers arrive as dht_get_peers_reply_alert):
            # libtorrent's own DHT announce of a torrent runs on a slow timer, and an
            # agent that started before its DHT had any node would wait for it.
            info_hash = record.info.info_hashes().v1
            self._ses.dht_get_peers(info_hash)
            if record.info.ssl_cert():  # announced with the TLS port and the SSL flag
                record.handle.force_dht_announce()
            else:
                self._ses.dht_announce(info_hash, self.listen_port(), 0)


def _set_certificate(handle: lt.torrent_handle, identity: TlsIdentity) -> None:
    """Present ``identity`` in ``handle``'s swarm. libtorrent always loads Diffie-Hellman
    parameters with the certificate (an error alert without them): the standard group
    :data:`FFDHE2048_PEM` (the keys are EC, so handshakes use ECDHE anyway)."""
    handle.set_ssl_certificate_buffer(identity.certificate_pem.decode("ascii"),
                                      identity.key_pem.decode("ascii"), FFDHE2048_PEM)


FFDHE2048_PEM = """-----BEGIN DH PARAMETERS-----
MIIBCAKCAQEA//////////+t+FRYortKmq/cViAnPTzx2LnFg84tNpWp4TZBFGQz
+8yTnc4kmz75fS/jY2MMddj2gbICrsRhetPfHtXV/WVhJDP1H18GbtCFY2VVPe0a
87VXE15/V8k1mE8McODmi3fipona8+/och3xWKE2rec1MKzKT0g6eXq8CrGCsyT7
YdEIqUuyyOP7uWrat2DX9GgdT0Kj3jlN9K5W7edjcrsZCwenyO4KbXCeAvzhzffi
7MA0BM0oNC9hkXL+nOmFg/+OTxIy7vKBg8P+OxtMb61zO7X8vC7CIAXFjvGDfRaD
ssbzSibBsu/6iGtCOGEoXJf//////////wIBAg==
-----END DH PARAMETERS-----
"""
"""RFC 7919's ffdhe2048 group (``openssl genpkey -genparam -algorithm DH -pkeyopt
dh_param:ffdhe2048``): public, standard parameters, nothing secret."""


def _tracker_count(st: lt.torrent_status) -> int:
    """The swarm's size as the trackers last counted it for a torrent: complete +
    incomplete (0 when none answered)."""
    return max(st.num_complete, 0) + max(st.num_incomplete, 0)


def _new_peer_id(rng: random.Random) -> bytes:
    """A 20-byte peer id: the client's prefix and 12 random letters and digits."""
    alphabet = string.ascii_letters + string.digits
    return b"-BS0001-" + "".join(rng.choice(alphabet) for _ in range(12)).encode("ascii")
