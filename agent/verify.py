"""The swap gate: every check a downloaded file must pass before it may become ``current``.

In order, cheapest first; the first failure raises :class:`CheckFailed` naming the check
(the label of the ``verification_failures_total`` metric):

==============  ==============================================================================
``torrent``     the .torrent parses and holds exactly one file, named ``filter.bsf``, of the
                manifest's size and piece size, and carries the swarm CA the manifest names
                (none for a public version)
``info_hash``   the torrent's v1 and v2 info-hashes equal the manifest's (the manifest is
                signed; the torrent is not, so this ties the piece hashes to the signature).
                A v1 torrent has no v2 info-hash, and then neither may the manifest: a
                hybrid torrent under a v1 manifest, or the reverse, is refused
``transfer``    the transfer reports the download finished: every piece on disk and
                hash-checked (libtorrent), no error
``size``        the file's size equals the manifest's
``sha256``      the whole file's SHA-256 equals the manifest's (taken from a
                :class:`HashedFile` when the file's writer computed it while writing:
                the file is then not read again for it)
``header``      the header parses (format, CRC, exact file size) and agrees with the
                manifest: version, creation time, body SHA-256 and every filter parameter
==============  ==============================================================================

The announcement source applies the first two before anything is downloaded, so a bad
torrent never reaches a transfer. Nothing here modifies the file.
"""

from __future__ import annotations

import collections
import hashlib
import os
import threading
from dataclasses import dataclass
from pathlib import Path

import libtorrent as lt

from bloomswarm.common.bucket_layout import FILTER_FILE_NAME
from bloomswarm.common.errors import CheckFailed, FormatError
from bloomswarm.common.file_hash import file_sha256
from bloomswarm.common.header import FilterHeader, read_header
from bloomswarm.common.manifest import Manifest

from .transfer import TransferStatus


@dataclass(frozen=True)
class TorrentSummary:
    """What the gate reads from a .torrent file."""

    info_hash_v1: str
    """Empty for a v2-only torrent (which no manifest matches)."""
    info_hash_v2: str | None
    """None for a v1 torrent."""
    file_name: str
    total_size: int
    piece_size: int
    ca_sha256: str | None = None
    """SHA-256 of the CA certificate an SSL torrent carries (lower-case hex); None for an
    ordinary torrent."""


_SUMMARIES_KEPT = 1024
_summaries: collections.OrderedDict[bytes, TorrentSummary] = collections.OrderedDict()
_summaries_lock = threading.Lock()


def read_torrent(torrent: bytes) -> TorrentSummary:
    """Parse a .torrent with libtorrent; CheckFailed("torrent") when it is not one.

    Remembers the summaries of the last 1024 torrents parsed, by their SHA-256 (a summary
    is immutable; the torrents themselves, up to megabytes for a large filter, are not
    kept): a version's torrent is read when it is announced, routed, started and
    verified, and an agent of many filters reads a hundred at once. Thread-safe."""
    digest = hashlib.sha256(torrent).digest()
    with _summaries_lock:
        summary = _summaries.get(digest)
        if summary is not None:
            _summaries.move_to_end(digest)
            return summary
    summary = _parse_torrent(torrent)
    with _summaries_lock:
        _summaries[digest] = summary
        while len(_summaries) > _SUMMARIES_KEPT:
            _summaries.popitem(last=False)
    return summary


def _ca_sha256(root_cert: str) -> str:
    """The fingerprint of a private torrent's CA; CheckFailed when it is no certificate.
    (x509 is loaded here, by an agent that meets a private torrent, not by every agent.)"""
    from bloomswarm.common.tls_identity import ca_fingerprint

    try:
        return ca_fingerprint(root_cert)
    except FormatError as exc:
        raise CheckFailed("torrent", f"the torrent's CA certificate: {exc}") from exc


def _parse_torrent(torrent: bytes) -> TorrentSummary:
    try:
        info = lt.torrent_info(torrent)
        hashes = info.info_hashes()
        files = info.layout()
        names = [files.file_path(i) for i in range(files.num_files())]
        root_cert = str(info.ssl_cert())
    except (RuntimeError, TypeError, ValueError) as exc:
        raise CheckFailed("torrent", f"not a valid torrent: {exc}") from exc
    ca_sha256 = _ca_sha256(root_cert) if root_cert else None
    if len(names) != 1:
        raise CheckFailed("torrent", f"the torrent holds {len(names)} files, expected one")
    return TorrentSummary(
        info_hash_v1=str(hashes.v1) if hashes.has_v1() else "",
        info_hash_v2=str(hashes.v2) if hashes.has_v2() else None,
        file_name=names[0],
        total_size=int(info.total_size()),
        piece_size=int(info.piece_length()),
        ca_sha256=ca_sha256,
    )


def check_swarm_ca(expected: str | None, summary: TorrentSummary, what: str = "torrent") -> None:
    """CheckFailed("torrent") unless the torrent carries exactly the CA the signed manifest
    names (``expected``; None: no CA, a public version)."""
    if summary.ca_sha256 != expected:
        raise CheckFailed(
            "torrent",
            f"the {what} carries swarm CA {summary.ca_sha256 or 'none'}, the manifest "
            f"names {expected or 'none'}",
        )


def check_torrent(manifest: Manifest, torrent: bytes) -> TorrentSummary:
    """Checks ``torrent`` and ``info_hash``: the torrent is the one the manifest signs for."""
    summary = read_torrent(torrent)
    if summary.file_name != FILTER_FILE_NAME:
        raise CheckFailed(
            "torrent", f"the torrent's file is {summary.file_name!r}, expected {FILTER_FILE_NAME!r}"
        )
    if summary.total_size != manifest.size or summary.piece_size != manifest.piece_size:
        raise CheckFailed(
            "torrent",
            f"the torrent describes {summary.total_size} bytes in {summary.piece_size}-byte "
            f"pieces, the manifest {manifest.size} bytes in {manifest.piece_size}-byte pieces",
        )
    if (summary.info_hash_v1, summary.info_hash_v2) != (manifest.info_hash_v1, manifest.info_hash_v2):
        raise CheckFailed(
            "info_hash",
            f"torrent info-hashes v1 {summary.info_hash_v1 or '-'} v2 {summary.info_hash_v2 or '-'} "
            f"differ from the manifest's v1 {manifest.info_hash_v1} v2 {manifest.info_hash_v2 or '-'}",
        )
    check_swarm_ca(manifest.swarm_ca_sha256, summary)
    return summary


def check_transfer(status: TransferStatus | None) -> None:
    """Check ``transfer``: the download finished without error, every piece verified."""
    if status is None:
        raise CheckFailed("transfer", "the transfer does not know this version")
    if status.error is not None or status.state == "error":
        raise CheckFailed("transfer", f"the transfer failed: {status.error or 'unknown error'}")
    if not status.finished:
        raise CheckFailed(
            "transfer", f"the transfer is not finished ({status.progress:.1%} verified)"
        )


@dataclass(frozen=True)
class HashedFile:
    """A file whose SHA-256 its writer computed from the very bytes it wrote (the delta's
    apply does, :func:`~bloomswarm.common.delta.apply_delta`), so that the gate need not
    read it again.

    ``identity`` ties the digest to that file as it was when the digest was taken: its
    device, inode, size and modification time. A file replaced or rewritten since then no
    longer matches, and the gate hashes it after all.
    """

    path: Path
    sha256: str
    """Lower-case hex, as in a manifest."""
    identity: tuple[int, int, int, int]

    @classmethod
    def of(cls, path: Path, sha256: str) -> HashedFile:
        """The file at ``path`` as it is now, with the SHA-256 its writer computed
        (OSError when it cannot be stat'ed)."""
        return cls(path, sha256, _identity(path.stat()))


def _identity(stat: os.stat_result) -> tuple[int, int, int, int]:
    return stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns


def check_file(manifest: Manifest, file: Path | HashedFile) -> FilterHeader:
    """Checks ``size``, ``sha256`` and ``header`` of ``file``; its header.

    A plain path is read and hashed whole. For a :class:`HashedFile` whose identity still
    matches, its writer's digest is compared instead: the file is not read for it (the
    header is still read, and the size still checked). A file that cannot be read fails
    ``size`` (it is missing or unreadable).
    """
    path = file.path if isinstance(file, HashedFile) else file
    try:
        stat = path.stat()
    except OSError as exc:
        raise CheckFailed("size", f"cannot read {path}: {exc.strerror or exc}") from exc
    if stat.st_size != manifest.size:
        raise CheckFailed("size", f"the file has {stat.st_size} bytes, the manifest says {manifest.size}")
    if isinstance(file, HashedFile) and file.identity == _identity(stat):
        digest = file.sha256
    else:
        try:
            digest = file_sha256(path)
        except OSError as exc:
            raise CheckFailed("sha256", f"cannot read {path}: {exc.strerror or exc}") from exc
    if digest != manifest.sha256:
        raise CheckFailed(
            "sha256", f"the file's SHA-256 {digest} differs from the manifest's {manifest.sha256}"
        )
    try:
        header = read_header(str(path))
    except (FormatError, OSError) as exc:
        raise CheckFailed("header", f"the header does not parse: {exc}") from exc
    problems = manifest.header_mismatches(header)
    if problems:
        raise CheckFailed("header", "the header disagrees with the manifest: " + "; ".join(problems))
    return header


def verify_download(
    manifest: Manifest, torrent: bytes, status: TransferStatus | None, file: Path | HashedFile
) -> FilterHeader:
    """Run the whole gate on a downloaded file (or one made from a downloaded delta:
    ``status`` is then the delta's transfer, and ``file`` a :class:`HashedFile`); return
    its header, or raise CheckFailed."""
    check_torrent(manifest, torrent)
    check_transfer(status)
    return check_file(manifest, file)


__all__ = [
    "CheckFailed",
    "HashedFile",
    "TorrentSummary",
    "check_file",
    "check_torrent",
    "check_transfer",
    "read_torrent",
    "verify_download",
]
