"""Making the BitTorrent ``.torrent`` of a filter file with libtorrent: v1, or hybrid v1+v2.

The torrent carries the file's piece hashes, its name (the file's base name) and the
configured trackers in one tier. It carries no web seed: agents add a presigned or CDN
URL of the filter object at run time, so nothing in the torrent expires.

Formats (``torrent_format``; docs/publishing.md weighs them):

- ``"v1"`` (the publisher's default): SHA-1 piece hashes, one info-hash. Every BitTorrent client
  reads it (Debian's aria2 1.36 computes a wrong info-hash for hybrid torrents, aria2
  issue #1903), and a tracker whitelist needs one line per version. Integrity does not
  rest on SHA-1: agents swap only after the whole file's SHA-256 equals the signed
  manifest's.
- ``"hybrid"``: v1 pieces plus v2 SHA-256 merkle trees per 16 KiB block, and two
  info-hashes (libtorrent's default). Pieces are also checked against SHA-256 as they
  arrive; clients that misread hybrid torrents cannot join the swarm.

Piece size: v2 needs a power of two of at least 16 KiB; v1 torrents follow the same rule,
so either format can be made of any version. Fewer, larger pieces mean a
smaller torrent and fewer HAVE messages; more, smaller pieces mean finer-grained
sharing early in a swarm. :func:`choose_piece_size` aims at 1024–2048 pieces within
256 KiB .. 16 MiB, the range common clients use.
"""

from __future__ import annotations

import typing
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import libtorrent as lt

from bloomswarm.common.errors import ConfigError, FormatError
from bloomswarm.common.manifest import MIN_PIECE_SIZE

from .config import TorrentFormat
from .progress import Progress

KIB = 1024
MIN_AUTO_PIECE_SIZE = 256 * KIB
MAX_AUTO_PIECE_SIZE = 16 * KIB * KIB
MAX_AUTO_PIECES = 2048
CREATOR = "bloomswarm"
TORRENT_FORMATS: tuple[TorrentFormat, ...] = typing.get_args(TorrentFormat)


@dataclass(frozen=True)
class TorrentFile:
    """A generated torrent and the identifiers the manifest records."""

    data: bytes
    """The bencoded ``.torrent`` file."""
    info_hash_v1: str
    """SHA-1 info-hash, 40 lower-case hex characters."""
    info_hash_v2: str | None
    """SHA-256 info-hash, 64 lower-case hex characters; None for a v1 torrent."""
    piece_size: int
    """Bytes per piece."""


@dataclass(frozen=True)
class SwarmCA:
    """The fleet CA that makes a version private: its certificate goes into every torrent
    of the version, its fingerprint into the manifest."""

    pem: str
    """The CA certificate, PEM."""
    sha256: str
    """SHA-256 of its DER, lower-case hex (the manifest's ``swarm_ca_sha256``)."""


def load_swarm_ca(path: Path | None) -> SwarmCA | None:
    """The CA certificate at ``path`` (None: public versions), re-serialised: only the
    certificate goes into torrents, never other text of the file. ConfigError, one line
    naming the file, when it cannot be read, holds a private key, or holds other than one
    CA certificate (``ca_certificate_pem``)."""
    if path is None:
        return None
    from bloomswarm.common.tls_identity import ca_certificate_pem, ca_fingerprint

    try:
        pem = ca_certificate_pem(path.read_bytes())
        return SwarmCA(pem=pem.decode("ascii"), sha256=ca_fingerprint(pem))
    except (OSError, FormatError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise ConfigError(f"swarm_ca {path}: {reason}") from exc


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
    torrent_format: TorrentFormat = "v1",
    root_cert: str | None = None,
    progress: bool = True,
) -> TorrentFile:
    """Hash the file at ``path`` into a torrent of ``torrent_format`` named after the file.

    ``piece_size`` None picks one with :func:`choose_piece_size`. ``root_cert`` (a CA
    certificate, PEM) makes an SSL torrent: only peers with a certificate from that CA
    may join its swarm. Reading the file is
    reported as progress (pieces hashed). Raises OSError when the file cannot be read,
    ValueError for an unknown format or a bad piece size.
    """
    if torrent_format not in TORRENT_FORMATS:
        raise ValueError(f"torrent format must be one of {', '.join(TORRENT_FORMATS)}, "
                         f"got {torrent_format!r}")
    try:
        size = path.stat().st_size
        entries = lt.list_files(str(path))
    except (OSError, RuntimeError) as exc:
        raise OSError(f"cannot read {path} to make its torrent: {exc}") from exc
    piece_size = check_piece_size(piece_size) if piece_size else choose_piece_size(size)
    flags = lt.create_torrent.v1_only if torrent_format == "v1" else 0
    creator = lt.create_torrent(entries, piece_size, flags)
    for url in trackers:
        creator.add_tracker(url, 0)
    creator.set_creator(CREATOR)
    if root_cert is not None:
        creator.set_root_cert(root_cert)
    with Progress(f"hashing {path.name}", total=creator.num_pieces(), unit="pieces",
                  enabled=progress) as bar:
        try:
            lt.set_piece_hashes(creator, str(path.parent), lambda _piece: bar.advance(1))
        except RuntimeError as exc:
            raise OSError(f"cannot hash {path} for its torrent: {exc}") from exc
    data: bytes = lt.bencode(creator.generate())
    info_hash_v1, info_hash_v2 = read_info_hashes(data)
    return TorrentFile(
        data=data,
        info_hash_v1=info_hash_v1,
        info_hash_v2=info_hash_v2,
        piece_size=piece_size,
    )


def read_info_hashes(data: bytes) -> tuple[str, str | None]:
    """The (v1, v2) info-hashes of a bencoded torrent, as lower-case hex; v2 is None for a
    v1 torrent. ValueError when ``data`` is not a torrent, or has no v1 info-hash (a v2-only
    torrent, which agents and many clients cannot use)."""
    try:
        hashes = lt.torrent_info(data).info_hashes()
    except RuntimeError as exc:
        raise ValueError(f"not a valid torrent: {exc}") from exc
    if not hashes.has_v1():
        raise ValueError("the torrent has no v1 info-hash (v2-only torrents are not supported)")
    return str(hashes.v1), str(hashes.v2) if hashes.has_v2() else None
