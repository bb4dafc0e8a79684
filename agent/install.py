"""Installing a verified version into the data directory, and the checks made before a download.

Layout (common/datadir.py), with what this module adds per version::

    DATA_DIR/
      current -> versions/v42
      versions/v42/filter.bsf            the filter, mode 0444, never modified
      versions/v42/manifest.json         its signed manifest (+ .sig) and torrent, so the
      versions/v42/manifest.json.sig     agent can seed and describe it after a restart
      versions/v42/filter.torrent
      staging/v43/                       a download in progress; readers never look here
      state.json                         the last accepted pointer sequence (replay guard)

Installing is: the staged file is made read-only (0444) and fsynced; the metadata files
are written atomically into ``versions/vN/``; the file is renamed into it *last* (so
``versions/vN/filter.bsf`` exists only complete and verified); the directories are
fsynced; then :func:`~bloomswarm.common.datadir.flip_current` swaps the link. Staging and
versions live under the same data directory, so the rename never crosses file systems.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Mapping
from pathlib import Path

from bloomswarm.common.atomic_file import fsync_directory, write_atomically
from bloomswarm.common.datadir import FILTER_FILE, STAGING, VERSIONS, flip_current, version_dir
from bloomswarm.common.errors import BloomswarmError, FormatError

READ_ONLY = 0o444
MANIFEST_FILE = "manifest.json"
SIGNATURE_FILE = "manifest.json.sig"
TORRENT_FILE = "filter.torrent"
STATE_FILE = "state.json"


class DownloadRefused(BloomswarmError):
    """A version cannot be downloaded here: too large for the configured limit or the disk.

    ``reason`` is "file_too_large" or "disk_space" (the metric label).
    """

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def prepare_data_dir(data_dir: Path) -> None:
    """Create ``versions/`` and ``staging/`` under ``data_dir`` (and ``data_dir`` itself).

    New directories get explicit modes that the umask can only narrow, never widen:
    ``data_dir`` and ``versions/`` 0755 (applications read them), ``staging/`` 0700 (only
    the agent looks at unverified downloads). Existing directories keep their modes.
    """
    data_dir.mkdir(mode=0o755, parents=True, exist_ok=True)
    (data_dir / VERSIONS).mkdir(mode=0o755, exist_ok=True)
    (data_dir / STAGING).mkdir(mode=0o700, exist_ok=True)


def staging_dir(data_dir: Path, version: int) -> Path:
    """Where version ``version`` is downloaded: ``staging/vN``."""
    return data_dir / STAGING / f"v{version}"


def check_capacity(
    data_dir: Path, size: int, *, max_file_size: int, margin: int, already_present: int = 0
) -> None:
    """Refuse a download of ``size`` bytes that exceeds ``max_file_size`` or would leave less
    than ``margin`` bytes free on ``data_dir``'s file system.

    ``already_present`` bytes of the file are on disk already (a resumed download). Raises
    DownloadRefused with a message that says how much is needed and how much is free.
    """
    if size > max_file_size:
        raise DownloadRefused(
            "file_too_large",
            f"the file has {size:,} bytes, more than install.max_file_size {max_file_size:,}",
        )
    free = shutil.disk_usage(data_dir).free
    needed = max(size - already_present, 0) + margin
    if free < needed:
        raise DownloadRefused(
            "disk_space",
            f"not enough disk space on {data_dir}: {free:,} bytes free, the download needs "
            f"{needed:,} ({size - already_present:,} for the file + {margin:,} margin, "
            "install.disk_margin_bytes)",
        )


def is_installed(data_dir: Path, version: int) -> bool:
    """Whether ``versions/vN/filter.bsf`` exists (it only ever exists complete)."""
    return (version_dir(data_dir, version) / FILTER_FILE).is_file()


def install_version(
    data_dir: Path, version: int, staged_file: Path, metadata: Mapping[str, bytes]
) -> Path:
    """Move the verified ``staged_file`` to ``versions/vN/filter.bsf``; return that path.

    ``metadata`` maps file names (manifest, signature, torrent) to the bytes to store beside
    it, read-only. The file is renamed last, then the directories are fsynced. An existing
    installed file of that version is left as it is (versions are immutable) and the
    staged file is removed. Does not flip ``current``: see :func:`activate`.
    """
    target_dir = version_dir(data_dir, version)
    target = target_dir / FILTER_FILE
    if target.is_file():
        staged_file.unlink(missing_ok=True)
        return target
    os.chmod(staged_file, READ_ONLY)
    fd = os.open(staged_file, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    target_dir.mkdir(parents=True, exist_ok=True)
    for name, data in metadata.items():
        if "/" in name or name in (FILTER_FILE, "", ".", ".."):
            raise ValueError(f"invalid metadata file name {name!r}")
        path = target_dir / name
        if path.exists():
            path.unlink()
        write_atomically(path, [data], mode=READ_ONLY)
    os.rename(staged_file, target)
    fsync_directory(target_dir)
    fsync_directory(staged_file.parent)
    fsync_directory(target_dir.parent)
    return target


def activate(data_dir: Path, version: int) -> None:
    """Flip ``current`` to the installed ``version`` (atomic, durable; see flip_current)."""
    flip_current(data_dir, version)


def read_metadata(data_dir: Path, version: int, name: str) -> bytes | None:
    """A metadata file of an installed version, or None when it is missing."""
    try:
        return (version_dir(data_dir, version) / name).read_bytes()
    except FileNotFoundError:
        return None


def remove_tree(path: Path) -> None:
    """Delete ``path`` and everything below it; a missing path is fine."""
    with contextlib.suppress(FileNotFoundError):
        shutil.rmtree(path)


def read_last_sequence(data_dir: Path) -> int | None:
    """The last accepted pointer sequence from ``state.json``; None when there is none.

    A malformed state file raises FormatError (the agent refuses to guess: delete it to
    accept any sequence again).
    """
    try:
        data = (data_dir / STATE_FILE).read_bytes()
    except FileNotFoundError:
        return None
    try:
        state = json.loads(data)
        sequence = state["last_sequence"]
    except (ValueError, KeyError, TypeError) as exc:
        raise FormatError(f"{data_dir / STATE_FILE} is malformed: {exc}") from exc
    if sequence is not None and (isinstance(sequence, bool) or not isinstance(sequence, int)):
        raise FormatError(f"{data_dir / STATE_FILE}: last_sequence must be an integer")
    return sequence


def write_last_sequence(data_dir: Path, sequence: int | None) -> None:
    """Store the last accepted pointer sequence in ``state.json`` atomically."""
    data = json.dumps({"last_sequence": sequence}, sort_keys=True).encode() + b"\n"
    write_atomically(data_dir / STATE_FILE, [data], mode=0o644)


__all__ = [
    "MANIFEST_FILE",
    "SIGNATURE_FILE",
    "STATE_FILE",
    "TORRENT_FILE",
    "DownloadRefused",
    "activate",
    "check_capacity",
    "install_version",
    "is_installed",
    "prepare_data_dir",
    "read_last_sequence",
    "read_metadata",
    "remove_tree",
    "staging_dir",
    "write_last_sequence",
]
