"""The seam between the agent's daemon and whatever moves a version's bytes.

The daemon decides *what* to fetch, verifies it and installs it; a :class:`Transfer`
moves the bytes. Three implementations exist:

- ``agent.swarm.Swarm``: one libtorrent session; pieces from peers (tracker, DHT, LSD),
  the origin as a BEP 19 web seed added at run time;
- ``agent.direct.DirectTransfer``: a plain download from the origin (no peers), the
  "fleet without P2P" baseline of the swarm benchmark;
- ``agent.memory_transfer.MemoryTransfer``: the in-memory twin for fast tests: no sockets,
  no threads, downloads complete on ``poll``; it injects errors, corrupt bytes, hash
  failures and stalls.

What is transferred is named by a :data:`TransferKey`: a plain ``int`` is version N's
filter file, a :class:`DeltaKey` the delta that turns version ``base``'s filter into
version ``version``'s (a torrent of its own). Implementations treat both alike: one
torrent, one file, one status.

Contract for implementations: every method is called from the daemon's one thread and
returns quickly (no method blocks on the network; ``save_resume_data`` and ``relocate``
wait for the transfer's own threads, bounded by their timeout). Failures of one
transfer are reported in its status (``state == "error"``), never raised from ``poll``.

A finished download is installed by hard-linking its file into ``versions/vN``; the
transfer then keeps the torrent and reads that link (:meth:`Transfer.relocate`), so the
peers connected to it stay connected, where removing and seeding it again would cut them.
"""

from __future__ import annotations

import os
import urllib.error
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol, TypeAlias

TransferState = Literal["checking", "downloading", "seeding", "paused", "error"]


@dataclass(frozen=True)
class DeltaKey:
    """The delta from version ``base``'s filter to version ``version``'s."""

    version: int
    base: int

    def __str__(self) -> str:
        return f"v{self.version}-from-v{self.base}"


VersionKey: TypeAlias = int | DeltaKey
"""What one filter's transfer moves: an ``int`` N is version N's filter file, a
:class:`DeltaKey` a delta."""


@dataclass(frozen=True)
class ScopedKey:
    """``key`` of the named filter ``scope``, in a transfer that several filters share
    (:mod:`.scoped_transfer`): filters number their versions independently."""

    scope: str
    key: VersionKey

    def __str__(self) -> str:
        return f"{self.scope}/{key_label(self.key)}"


TransferKey: TypeAlias = int | DeltaKey | ScopedKey
"""What one transfer moves: a :data:`VersionKey`, or one scoped to a named filter."""


def unscoped(key: TransferKey) -> VersionKey:
    """The version key inside ``key`` (``key`` itself when it is not scoped)."""
    return key.key if isinstance(key, ScopedKey) else key


def key_scope(key: TransferKey) -> str | None:
    """The named filter a transfer key belongs to (None: the single filter)."""
    return key.scope if isinstance(key, ScopedKey) else None


def key_version(key: TransferKey) -> int:
    """The version a transfer key belongs to (a delta's target version)."""
    inner = unscoped(key)
    return inner.version if isinstance(inner, DeltaKey) else inner


def key_base(key: TransferKey) -> int | None:
    """The base version of a delta's key; None for a filter file's."""
    inner = unscoped(key)
    return inner.base if isinstance(inner, DeltaKey) else None


def key_label(key: TransferKey) -> str:
    """A key for log lines: "v5", "v5-from-v4" for a delta, "NAME/v5" when scoped."""
    if isinstance(key, ScopedKey | DeltaKey):
        return str(key)
    return f"v{key}"


def key_order(key: TransferKey) -> tuple[int, int]:
    """Sort key: by version, the file before its deltas, deltas by base (a scoped key
    sorts as the key inside it)."""
    inner = unscoped(key)
    return (inner.version, inner.base) if isinstance(inner, DeltaKey) else (inner, 0)


@dataclass(frozen=True)
class OriginURL:
    """A URL of the version's file at the origin, and when it stops working.

    ``expires_at`` is a ``time.time()`` instant (presigned S3 URLs expire), or None for a
    URL that does not expire (a CDN). Implementations ask for a fresh URL before expiry.
    """

    url: str
    expires_at: float | None = None


OriginURLFactory = Callable[[], OriginURL]
"""Returns a (fresh) origin URL for one version's file."""


def describe_origin_error(exc: BaseException) -> str:
    """One line for a failed request to the origin: the HTTP status, or the reason."""
    if isinstance(exc, urllib.error.HTTPError):
        return f"HTTP {exc.code} {exc.reason}"
    if isinstance(exc, urllib.error.URLError):
        return str(exc.reason)
    return str(exc) or type(exc).__name__


@dataclass(frozen=True)
class TransferStatus:
    """A snapshot of one transfer (a version's file, or a delta)."""

    version: int
    """The version the bytes belong to (a delta's target version)."""
    state: TransferState
    progress: float
    """Fraction of the file verified and on disk, 0..1."""
    total_bytes: int
    bytes_from_peers: int
    """Payload bytes received from other agents."""
    bytes_from_origin: int
    """Payload bytes received from the origin (web seed or direct download)."""
    bytes_uploaded: int
    """Payload bytes sent to other agents."""
    peers: int
    """Connected peers (not counting the origin)."""
    hash_failures: int
    """Pieces that failed their hash check (corrupt data from some source)."""
    finished: bool
    """Every piece is on disk and passed its hash check."""
    error: str | None = None
    base: int | None = None
    """For a delta: the version it applies to; None for the filter file."""

    @property
    def key(self) -> TransferKey:
        """The key of the transfer this is a snapshot of."""
        return self.version if self.base is None else DeltaKey(self.version, self.base)


def same_file(path: Path, other: Path) -> bool:
    """Whether ``path`` and ``other`` both exist and are one file (hard links of one
    inode): the condition of :meth:`Transfer.relocate`."""
    try:
        return os.path.samefile(path, other)
    except OSError:
        return False


def relocated(path: Path, file_dir: Path) -> Path | None:
    """``path``'s name in ``file_dir`` when that is the very same file (the condition of
    :meth:`Transfer.relocate`), else None."""
    moved = file_dir / path.name
    return moved if same_file(path, moved) else None


class Transfer(Protocol):
    """Moves the bytes of versions: download, then keep serving them to peers."""

    def start_download(
        self,
        key: TransferKey,
        torrent: bytes,
        save_dir: Path,
        origin: OriginURLFactory | None,
        *,
        resume_data: bytes | None = None,
    ) -> None:
        """Begin fetching ``key`` (a version's file or a delta) into ``save_dir`` (a staging
        directory).

        ``torrent`` is the .torrent file's bytes (one file, named in the torrent);
        ``origin`` gives the origin URL of that file, or None for peers only.
        ``resume_data`` continues an interrupted download.
        """
        ...

    def seed(self, key: TransferKey, torrent: bytes, file_dir: Path) -> None:
        """Serve an installed, already verified file (or delta) from ``file_dir`` to peers."""
        ...

    def relocate(self, key: TransferKey, file_dir: Path, timeout: float = 5.0) -> bool:
        """Serve ``key``'s finished download from ``file_dir`` from now on, keeping the
        transfer itself: its peer connections, its byte and upload counts, its status.

        ``file_dir`` must hold *the very file* being read now, under the same name: a
        second hard link to it (:func:`~.install.install_version` with ``keep_staged``),
        not a copy. So nothing is moved, copied or hashed again, and a peer is only ever
        served the bytes already verified. Returns True once the switch is done: the
        transfer opens nothing under its old directory any more, and the caller may
        delete it. Returns False, changing nothing, when ``key`` is not transferred, has
        not finished, ``file_dir`` holds another file (:func:`same_file`), or the switch
        did not complete within ``timeout`` seconds; the caller then falls back to
        :meth:`remove` and :meth:`seed`. May wait (bounded by ``timeout``) for the
        transfer's disk thread, like :meth:`save_resume_data`.
        """
        ...

    def remove(self, key: TransferKey) -> None:
        """Stop downloading or seeding ``key``; its files are left where they are."""
        ...

    def status(self, key: TransferKey) -> TransferStatus | None:
        """The transfer's status, or None when ``key`` is not being transferred."""
        ...

    def versions(self) -> list[TransferKey]:
        """Keys being downloaded or seeded, in :func:`key_order`."""
        ...

    def poll(self) -> None:
        """Do periodic work: process events, apply the origin policy, refresh URLs."""
        ...

    def wait(self, timeout: float) -> None:
        """Block until the transfer has news (a download finished or failed, a tracker
        answered: anything :meth:`poll` or :meth:`status` would act on) or ``timeout``
        seconds passed, whichever comes first; may return early without news."""
        ...

    def save_resume_data(
        self, timeout: float = 10.0, keys: Collection[TransferKey] | None = None
    ) -> dict[TransferKey, bytes]:
        """Resume data of the unfinished downloads (of ``keys`` only, when given), by key."""
        ...

    def close(self) -> None:
        """Stop everything and release the listening sockets."""
        ...
