"""MemoryTransfer: a :class:`~.transfer.Transfer` that moves bytes in memory, for fast tests.

The in-memory twin of the real transfers, as :class:`~bloomswarm.common.memory_store.MemoryObjectStore`
is of S3: no sockets, no threads, no sleeps; a download advances only when :meth:`MemoryTransfer.poll`
is called. Three parts:

- :class:`MemoryOrigin`, the origin in front of an :class:`~bloomswarm.common.storage.ObjectStore`.
  As an :class:`~.origin.Origin` it hands the daemon ``memory://{key}`` URLs (the form of
  ``MemoryObjectStore.presigned_get_url``, so an :class:`~.origin.S3Origin` over a memory store
  works too); as a :class:`~.announcements.DocumentReader` it serves the bucket's documents to
  :class:`~.announcements.ObjectStoreAnnouncements`. It counts the payload bytes it serves per
  key, and ``failing`` makes every request fail (an origin that is down).
- :class:`MemoryPeers`, transfers that reach each other: a download takes a piece from a member
  that has it on disk (same info-hash) before it asks the origin.
- :class:`MemoryTransfer`: each :meth:`~MemoryTransfer.poll` moves up to ``pieces_per_poll``
  pieces of every download (all of them by default), writing the file named in the torrent into
  ``save_dir``, and counts bytes from peers and from the origin like the real transfers. Without
  an origin URL and without a peer that has the next piece, a download waits (peers only).

Faults are injected per transfer key (a version or a delta) and used up by the downloads that meet them:
:meth:`~MemoryTransfer.inject_error` (the download ends in state ``"error"``),
:meth:`~MemoryTransfer.inject_corruption` (it finishes with one byte wrong: same size, so the
daemon's SHA-256 check catches it), :meth:`~MemoryTransfer.inject_hash_failures` (pieces fail
their hash check once, are counted in ``hash_failures`` and fetched again) and
:meth:`~MemoryTransfer.inject_stall` (it never progresses).

Resume data is the byte offset, as for :class:`~.direct.DirectTransfer`, and again the file on
disk is the truth: a download continues from the bytes already in ``save_dir``. Not thread-safe:
drive a transfer, and all members of one :class:`MemoryPeers`, from one thread.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.parse
from collections import Counter
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path

from bloomswarm.common.errors import BloomswarmError, StorageError, VerificationError
from bloomswarm.common.storage import ObjectStore, StoredObject

from .transfer import (
    OriginURL,
    OriginURLFactory,
    TransferKey,
    TransferState,
    TransferStatus,
    key_base,
    key_order,
    key_version,
    relocated,
)
from .verify import read_torrent

SCHEME = "memory://"


def memory_url_key(url: str) -> str:
    """The object key a ``memory://{key}[?query]`` URL names; ValueError for any other URL."""
    if not url.startswith(SCHEME):
        raise ValueError(f"not a {SCHEME} URL: {url!r}")
    key = urllib.parse.unquote(url[len(SCHEME):].split("?", 1)[0])
    if not key:
        raise ValueError(f"no object key in {url!r}")
    return key


class MemoryOrigin:
    """An origin serving ``store``'s objects at ``memory://{key}``: an :class:`~.origin.Origin`
    for the daemon, a document reader for the announcement source, and the byte source of
    :class:`MemoryTransfer`. Thread-safe (a background poll reads documents while the
    daemon's thread reads file bytes)."""

    def __init__(self, store: ObjectStore) -> None:
        self.store = store
        self.failing = False
        """When set, every request raises StorageError (the origin is down)."""
        self.served: Counter[str] = Counter()
        """Payload bytes served, by object key (documents and file ranges alike)."""
        self._lock = threading.Lock()

    def url_factory(self, key: str) -> OriginURLFactory:
        """See :meth:`~.origin.Origin.url_factory`: ``memory://{key}``, which does not expire."""
        url = OriginURL(SCHEME + urllib.parse.quote(key))
        return lambda: url

    def get(self, key: str, *, if_none_match: str | None = None) -> StoredObject | None:
        """See :class:`~.announcements.DocumentReader`: the store's answer, counted."""
        self._check_up(key)
        stored = self.store.get(key, if_none_match=if_none_match)
        if stored is not None:
            self._count(key, len(stored.data))
        return stored

    def read(self, url: str, start: int, end: int) -> bytes:
        """Bytes ``start`` to ``end`` (exclusive) of the object ``url`` names; fewer when the
        object is shorter. ValueError for a URL that is not ``memory://``, ObjectNotFound or
        StorageError as the store (or ``failing``) raises them."""
        key = memory_url_key(url)
        self._check_up(key)
        stored = self.store.get(key)
        if stored is None:  # no condition was sent
            raise StorageError(f"{url}: the store answered 'not modified' to a plain GET")
        data = stored.data[start:end]
        self._count(key, len(data))
        return data

    def _check_up(self, key: str) -> None:
        if self.failing:
            raise StorageError(f"GET {SCHEME}{key}: the origin is unavailable (failing)")

    def _count(self, key: str, size: int) -> None:
        with self._lock:
            self.served[key] += size


class MemoryPeers:
    """Transfers that reach each other; a transfer joins when it is made with this group."""

    def __init__(self) -> None:
        self.members: list[MemoryTransfer] = []


@dataclass
class _Faults:
    """Faults waiting for a version's next downloads."""

    errors: int = 0
    error_message: str = "injected transfer error"
    corruptions: int = 0
    hash_failures: int = 0
    stalls: int = 0


@dataclass
class _Job:
    """One file (a version's or a delta) being downloaded or seeded."""

    key: TransferKey
    path: Path
    swarm: str
    """The torrent's info-hash(es): jobs of the same swarm serve each other."""
    total: int
    piece_size: int
    state: TransferState
    origin: OriginURLFactory | None = None
    url: OriginURL | None = None
    on_disk: int = 0
    from_origin: int = 0
    from_peers: int = 0
    uploaded: int = 0
    hash_failures: int = 0
    error: str | None = None
    stalled: bool = False
    """No source answers: the download never progresses."""


class MemoryTransfer:
    """A :class:`~.transfer.Transfer` that completes downloads on :meth:`poll`; see the module
    docstring. ``origin`` resolves the URLs the daemon's URL factories give (None: no origin
    reachable); ``pieces_per_poll`` bounds each download's progress per poll (None: the whole
    file); ``clock`` (Unix seconds) decides when an origin URL has expired."""

    def __init__(
        self,
        origin: MemoryOrigin | None = None,
        *,
        peers: MemoryPeers | None = None,
        pieces_per_poll: int | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if pieces_per_poll is not None and pieces_per_poll < 1:
            raise ValueError(f"pieces_per_poll must be at least 1, got {pieces_per_poll}")
        self.origin = origin
        self.pieces_per_poll = pieces_per_poll
        self._peers = peers
        self._clock = clock
        self._jobs: dict[TransferKey, _Job] = {}
        self._faults: dict[TransferKey, _Faults] = {}
        self.url_requests = 0
        """How often a URL factory was called (a fresh URL for a download)."""
        if peers is not None:
            peers.members.append(self)

    # -- fault injection -----------------------------------------------------------------

    def inject_error(
        self, key: TransferKey, message: str = "injected transfer error", *, times: int = 1
    ) -> None:
        """The next ``times`` downloads of ``key`` (a version or a delta) end in state
        ``"error"`` with ``message`` at their next poll (a download under way included)."""
        faults = self._faults.setdefault(key, _Faults())
        faults.errors += times
        faults.error_message = message

    def inject_corruption(self, key: TransferKey, *, times: int = 1) -> None:
        """The version's next ``times`` downloads finish with their last byte flipped."""
        self._faults.setdefault(key, _Faults()).corruptions += times

    def inject_stall(self, key: TransferKey, *, times: int = 1) -> None:
        """The next ``times`` downloads of ``key`` never progress (no peer nor origin
        answers), without an error: what a download with silent sources looks like."""
        self._faults.setdefault(key, _Faults()).stalls += times

    def inject_hash_failures(self, key: TransferKey, pieces: int) -> None:
        """The version's next ``pieces`` pieces fail their hash check once each: counted in
        ``hash_failures`` and fetched (and counted as received) again."""
        self._faults.setdefault(key, _Faults()).hash_failures += pieces

    # -- the Transfer protocol -----------------------------------------------------------

    def start_download(
        self,
        key: TransferKey,
        torrent: bytes,
        save_dir: Path,
        origin: OriginURLFactory | None,
        *,
        resume_data: bytes | None = None,
    ) -> None:
        """See :meth:`~.transfer.Transfer.start_download`. Replaces any job of the same
        version; continues from the bytes already in ``save_dir`` (``resume_data`` is not
        needed)."""
        self.remove(key)
        job = self._job(key, torrent, save_dir, "downloading")
        if job.state == "downloading":
            job.origin = origin
            size = job.path.stat().st_size if job.path.is_file() else 0
            job.on_disk = size if size <= job.total else 0  # longer: not this file, start over
            faults = self._faults.get(key)
            if faults is not None and faults.stalls > 0:
                faults.stalls -= 1
                job.stalled = True
        self._jobs[key] = job

    def seed(self, key: TransferKey, torrent: bytes, file_dir: Path) -> None:
        """See :meth:`~.transfer.Transfer.seed`: peers of the group read the file from ``file_dir``."""
        self.remove(key)
        job = self._job(key, torrent, file_dir, "seeding")
        job.on_disk = job.total if job.state == "seeding" else 0
        self._jobs[key] = job

    def relocate(self, key: TransferKey, file_dir: Path, timeout: float = 5.0) -> bool:
        """See :meth:`~.transfer.Transfer.relocate`: a finished job reads the same file
        (checked: :func:`~.transfer.same_file`) from ``file_dir``; its counts carry on."""
        job = self._jobs.get(key)
        moved = None if job is None or job.state != "seeding" else relocated(job.path, file_dir)
        if job is None or moved is None:
            return False
        job.path = moved
        return True

    def remove(self, key: TransferKey) -> None:
        """See :meth:`~.transfer.Transfer.remove`."""
        self._jobs.pop(key, None)

    def status(self, key: TransferKey) -> TransferStatus | None:
        """See :meth:`~.transfer.Transfer.status`."""
        job = self._jobs.get(key)
        if job is None:
            return None
        finished = job.state == "seeding"
        return TransferStatus(
            version=key_version(key),
            state=job.state,
            progress=1.0 if finished else job.on_disk / job.total if job.total else 0.0,
            total_bytes=job.total,
            bytes_from_peers=job.from_peers,
            bytes_from_origin=job.from_origin,
            bytes_uploaded=job.uploaded,
            peers=sum(1 for _ in self._others(job)),
            hash_failures=job.hash_failures,
            finished=finished,
            error=job.error,
            base=key_base(key),
        )

    def versions(self) -> list[TransferKey]:
        """See :meth:`~.transfer.Transfer.versions`."""
        return sorted(self._jobs, key=key_order)

    def poll(self) -> None:
        """Advance every download by up to ``pieces_per_poll`` pieces; apply injected faults."""
        for job in list(self._jobs.values()):
            if job.state == "downloading":
                self._advance(job)

    def wait(self, timeout: float) -> None:
        """Return at once: downloads advance only in :meth:`poll`, so there is always news."""

    def save_resume_data(
        self, timeout: float = 10.0, keys: Collection[TransferKey] | None = None
    ) -> dict[TransferKey, bytes]:
        """The byte offset of every unfinished download (of ``keys``, when given), as JSON."""
        return {
            v: json.dumps({"offset": job.on_disk}).encode()
            for v, job in self._jobs.items()
            if job.state == "downloading" and (keys is None or v in keys)
        }

    def close(self) -> None:
        """Forget every version and leave the peer group."""
        self._jobs.clear()
        if self._peers is not None and self in self._peers.members:
            self._peers.members.remove(self)

    # -- downloading ---------------------------------------------------------------------

    def _job(self, key: TransferKey, torrent: bytes, directory: Path, state: TransferState) -> _Job:
        try:
            summary = read_torrent(torrent)
        except VerificationError as exc:
            return _Job(key, directory, "", 0, 1, "error", error=str(exc))
        swarm = f"{summary.info_hash_v1}/{summary.info_hash_v2 or ''}"
        return _Job(key, directory / summary.file_name, swarm, summary.total_size,
                    summary.piece_size, state)

    def _advance(self, job: _Job) -> None:
        faults = self._faults.get(job.key)
        if faults is not None and faults.errors > 0:
            faults.errors -= 1
            job.state, job.error = "error", faults.error_message
            return
        if job.stalled:
            return
        pieces = 0
        while job.on_disk < job.total and (self.pieces_per_poll is None or pieces < self.pieces_per_poll):
            end = min((job.on_disk // job.piece_size + 1) * job.piece_size, job.total)
            try:
                data = self._fetch(job, job.on_disk, end)
            except (BloomswarmError, OSError, ValueError) as exc:
                job.state, job.error = "error", str(exc) or type(exc).__name__
                return
            if data is None:  # no source has the piece now: wait
                return
            if faults is not None and faults.hash_failures > 0:
                faults.hash_failures -= 1
                job.hash_failures += 1
                continue  # the piece is dropped and fetched again
            self._write(job.path, job.on_disk, data)
            job.on_disk = end
            pieces += 1
        if job.on_disk >= job.total:
            if faults is not None and faults.corruptions > 0:
                faults.corruptions -= 1
                _flip_last_byte(job.path)
            job.state = "seeding"

    def _fetch(self, job: _Job, start: int, end: int) -> bytes | None:
        """Bytes ``start:end`` of the job's file from a peer that has them, else from the
        origin; None when neither can give them now. Counts the bytes."""
        for peer in self._others(job):
            if peer.on_disk >= end:
                try:
                    with peer.path.open("rb") as fh:
                        fh.seek(start)
                        data = fh.read(end - start)
                except OSError:
                    continue
                if len(data) == end - start:
                    peer.uploaded += len(data)
                    job.from_peers += len(data)
                    return data
        if job.origin is None or self.origin is None:
            return None
        data = self.origin.read(self._url(job).url, start, end)
        job.from_origin += len(data)
        if len(data) != end - start:
            raise StorageError(
                f"the origin's object ends at byte {start + len(data)}; the torrent describes {job.total}"
            )
        return data

    def _url(self, job: _Job) -> OriginURL:
        """The job's origin URL, fresh from its factory when it has none or it expired."""
        url = job.url
        if url is None or (url.expires_at is not None and self._clock() >= url.expires_at):
            assert job.origin is not None
            self.url_requests += 1
            url = job.url = job.origin()
        return url

    def _others(self, job: _Job) -> list[_Job]:
        """The jobs of the same torrent in the other members of the peer group."""
        if self._peers is None or not job.swarm:
            return []
        return [
            other
            for member in self._peers.members
            if member is not self
            for other in member._jobs.values()
            if other.swarm == job.swarm and other.state in ("downloading", "seeding")
        ]

    @staticmethod
    def _write(path: Path, offset: int, data: bytes) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("r+b" if path.exists() else "wb") as fh:
            fh.seek(offset)
            fh.write(data)
            fh.truncate()


def _flip_last_byte(path: Path) -> None:
    with path.open("r+b") as fh:
        fh.seek(-1, 2)
        last = fh.read(1)
        fh.seek(-1, 2)
        fh.write(bytes([last[0] ^ 0xFF]))


__all__ = ["SCHEME", "MemoryOrigin", "MemoryPeers", "MemoryTransfer", "memory_url_key"]
