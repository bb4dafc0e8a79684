"""Making the hybrid BitTorrent v1+v2 ``.torrent`` of a filter file with libtorrent.

The torrent carries the file's piece hashes (SHA-1 pieces for v1, SHA-256 merkle trees
per 16 KiB block for v2), its name (the file's base name) and the configured trackers in
one tier. It carries no web seed: agents add a presigned or CDN URL of the filter object
at run time, so nothing in the torrent expires.

Piece size: v2 needs a power of two of at least 16 KiB. Fewer, larger pieces mean a
smaller torrent and fewer HAVE messages; more, smaller pieces mean finer-grained
sharing early in a swarm. :func:`choose_piece_size` aims at 1024–2048 pieces within
256 KiB .. 16 MiB, the range common clients use.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import libtorrent as lt

from bloomswarm.common.manifest import MIN_PIECE_SIZE

from .progress import Progress

KIB = 1024
MIN_AUTO_PIECE_SIZE = 256 * KIB
MAX_AUTO_PIECE_SIZE = 16 * KIB * KIB
MAX_AUTO_PIECES = 2048
CREATOR = "bloomswarm"


@dataclass(frozen=True)
class TorrentFile:
    """A generated torrent and the identifiers the manifest records."""

    data: bytes
    """The bencoded ``.torrent`` file."""
    info_hash_v1: str
    """SHA-1 info-hash, 40 lower-case hex characters."""
    info_hash_v2: str
    """SHA-256 info-hash, 64 lower-case hex characters."""
    piece_size: int
    """Bytes per piece."""


def choose_piece_size(file_size: int) -> int:
    """The smallest power of two in [256 KiB, 16 MiB] that cuts ``file_size`` bytes into at
    most 2048 pieces: 1024–2048 pieces from 256 MiB to 32 GiB, fewer below, more above."""
    if file_size < 0:
        raise ValueError(f"file size must not be negative, got {file_size}")
    piece_size = MIN_AUTO_PIECE_SIZE
    while piece_size < MAX_AUTO_PIECE_SIZE and -(-file_size // piece_size) > MAX_AUTO_PIECES:
        piece_size *= 2
    return piece_size


def check_piece_size(piece_size: int) -> int:
    """Return ``piece_size`` if v2 accepts it (a power of two >= 16 KiB); else ValueError."""
    if piece_size < MIN_PIECE_SIZE or piece_size & (piece_size - 1):
        raise ValueError(f"piece size must be a power of two of at least 16 KiB, got {piece_size}")
    return piece_size


def make_torrent(
    path: Path,
    *,
    trackers: Sequence[str] = (),
    piece_size: int | None = None,
    progress: bool = True,
) -> TorrentFile:
    """Hash the file at ``path`` into a hybrid v1+v2 torrent named after the file.

    ``piece_size`` None picks one with :func:`choose_piece_size`. Reading the file is
    reported as progress (pieces hashed). Raises OSError when the file cannot be read.
    """
    try:
        size = path.stat().st_size
        entries = lt.list_files(str(path))
    except (OSError, RuntimeError) as exc:
        raise OSError(f"cannot read {path} to make its torrent: {exc}") from exc
    piece_size = check_piece_size(piece_size) if piece_size else choose_piece_size(size)
    creator = lt.create_torrent(entries, piece_size)
    for url in trackers:
        creator.add_tracker(url, 0)
    creator.set_creator(CREATOR)
    with Progress(f"hashing {path.name}", total=creator.num_pieces(), unit="pieces",
                  enabled=progress) as bar:
        try:
            lt.set_piece_hashes(creator, str(path.parent), lambda _piece: bar.advance(1))
        except RuntimeError as exc:
            raise OSError(f"cannot hash {path} for its torrent: {exc}") from exc
    data: bytes = lt.bencode(creator.generate())
    hashes = lt.torrent_info(data).info_hashes()
    return TorrentFile(
        data=data,
        info_hash_v1=str(hashes.v1),
        info_hash_v2=str(hashes.v2),
        piece_size=piece_size,
    )


def read_info_hashes(data: bytes) -> tuple[str, str]:
    """The (v1, v2) info-hashes of a bencoded torrent, as lower-case hex; ValueError when
    ``data`` is not a torrent."""
    try:
        hashes = lt.torrent_info(data).info_hashes()
    except RuntimeError as exc:
        raise ValueError(f"not a valid torrent: {exc}") from exc
    return str(hashes.v1), str(hashes.v2)
