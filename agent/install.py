"""Installing a verified version into the data directory, and the checks made before a download.

The layout is :class:`~bloomswarm.common.datadir.DataDir`'s. Installing is: the
manifest, its signature and the torrent are written into the version's directory; the
staged file is made read-only (0444), fsynced and renamed into it *last*
(so an installed filter exists only complete and verified; or hard-linked, ``keep_staged``,
when the transfer that downloaded it goes on seeding it: see
:meth:`~.transfer.Transfer.relocate`); the directories are
fsynced; then :meth:`~bloomswarm.common.datadir.DataDir.flip_current` swaps the link.
Staging and versions live under the same data directory, so the rename never crosses
file systems.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import stat
import sys
from dataclasses import dataclass
from pathlib import Path

from bloomswarm.common.atomic_file import fsync_directory, write_atomically, write_new_file
from bloomswarm.common.datadir import DataDir
from bloomswarm.common.dir_spread import spread_subdirectories
from bloomswarm.common.errors import DownloadRefused, FormatError

READ_ONLY = 0o444


def prepare_data_dir(data_dir: Path) -> None:
    """Create ``versions/`` and ``staging/`` under ``data_dir`` (and ``data_dir`` itself).

    New directories get explicit modes that the umask can only narrow, never widen:
    ``data_dir`` and ``versions/`` 0755 (applications read them), ``staging/`` 0700 (only
    the agent looks at unverified downloads). Existing directories keep their modes.
    ``versions/`` and ``staging/`` spread their subdirectories over the file system
    (:func:`~bloomswarm.common.dir_spread.spread_subdirectories`, best effort).
    """
    layout = DataDir(data_dir)
    data_dir.mkdir(mode=0o755, parents=True, exist_ok=True)
    layout.versions.mkdir(mode=0o755, exist_ok=True)
    layout.staging.mkdir(mode=0o700, exist_ok=True)
    spread_subdirectories(layout.versions)
    spread_subdirectories(layout.staging)


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
    """Whether version ``version``'s filter is installed (it only ever exists complete)."""
    return DataDir(data_dir).filter_file(version).is_file()


@dataclass(frozen=True)
class InstalledDocuments:
    """The signed documents stored beside an installed filter, read-only."""

    manifest: bytes
    manifest_signature: bytes
    torrent: bytes


def install_version(
    data_dir: Path, version: int, staged_file: Path, documents: InstalledDocuments,
    *, keep_staged: bool = False,
) -> Path:
    """Move the verified ``staged_file`` into version ``version``'s directory; return its
    new path.

    ``documents`` are stored beside it, read-only. The file is made read-only (0444) and
    renamed last, then the directories are fsynced: a failure or a crash before that step
    leaves ``staged_file`` with its mode (writable, for a resumed download; a crash between
    the chmod and the rename leaves it 0444: see :func:`make_owner_writable`). An existing
    installed file of that version is left as it is (versions are immutable) and the
    staged file is removed. Does not flip ``current``: see :func:`activate`.

    ``keep_staged``: the file is hard-linked into place instead of renamed, so that a
    transfer still reading ``staged_file`` keeps working until it is switched to the new
    name (:meth:`~.transfer.Transfer.relocate`); the caller deletes the staging directory
    afterwards. The link appears as atomically as the rename does (complete, fsynced and
    read-only, or not at all); where the file system has no hard links the file is
    renamed. An existing installed file is left as it is, and so is ``staged_file``.
    """
    layout = DataDir(data_dir)
    target_dir = layout.version_dir(version)
    target = layout.filter_file(version)
    if target.is_file():
        if not keep_staged:
            staged_file.unlink(missing_ok=True)
        return target
    fd = os.open(staged_file, os.O_RDONLY)
    try:
        target_dir.mkdir(parents=True, exist_ok=True)
        for path, data in (
            (layout.manifest_file(version), documents.manifest),
            (layout.signature_file(version), documents.manifest_signature),
            (layout.torrent_file(version), documents.torrent),
        ):
            # Written in place: the directory is no version until its filter file appears
            # (below, after these are fsynced); a crash's leftovers are replaced here or
            # collected with the incomplete directory.
            path.unlink(missing_ok=True)
            write_new_file(path, data, mode=READ_ONLY)
        # Read-only only now, right before it is placed: until then a crash (or a failure
        # above) leaves a staged file the resumed transfer can still write to. One fsync
        # makes its bytes and its mode durable before the name that publishes it.
        os.fchmod(fd, READ_ONLY)
        os.fsync(fd)
    finally:
        os.close(fd)
    _place(staged_file, target, keep_staged=keep_staged)
    fsync_directory(target_dir)  # the documents' and the filter file's names
    fsync_directory(target_dir.parent)  # the version directory's own name
    return target


def install_delta(data_dir: Path, version: int, base: int, staged_delta: Path, torrent: bytes,
                  *, keep_staged: bool = False) -> None:
    """Keep the delta from ``base`` that produced installed ``version`` beside it, read-only,
    with its torrent (so it is seeded, and deleted with the version). The torrent is
    written first: a delta file is only ever kept with its torrent. ``keep_staged``: as
    for :func:`install_version` (a hard link, the staged name kept)."""
    layout = DataDir(data_dir)
    torrent_file = layout.delta_torrent_file(version, base)
    if torrent_file.exists():
        torrent_file.unlink()
    write_atomically(torrent_file, [torrent], mode=READ_ONLY)
    os.chmod(staged_delta, READ_ONLY)  # only now: see install_version
    _place(staged_delta, layout.delta_file(version, base), keep_staged=keep_staged)
    fsync_directory(layout.version_dir(version))


def _place(staged: Path, target: Path, *, keep_staged: bool) -> None:
    """Give the finished ``staged`` file its installed name ``target`` in one step: a
    rename, or with ``keep_staged`` a hard link (a rename where links are refused)."""
    if keep_staged:
        try:
            os.link(staged, target)
            return
        except OSError as exc:
            if exc.errno not in _NO_LINKS:
                raise
    os.rename(staged, target)


_NO_LINKS = frozenset({errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EXDEV, errno.EMLINK})
"""Errors of ``link()`` that mean "no hard link here", where a rename still works."""


def make_owner_writable(path: Path) -> bool:
    """Give the regular file ``path`` back its owner's write bit when it lacks it; return
    whether its mode was changed (a missing file, a link or a writable file: unchanged).

    For a staged download that :func:`install_version` made read-only (0444) just before
    a crash kept it from being placed: the transfer that resumes it (direct or swarm)
    opens it for writing, which a non-root owner could not. Raises OSError when the mode
    cannot be changed (not the file's owner)."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return False
    if not stat.S_ISREG(mode) or mode & stat.S_IWUSR:
        return False
    os.chmod(path, stat.S_IMODE(mode) | stat.S_IWUSR)
    return True


def activate(data_dir: Path, version: int) -> None:
    """Flip ``current`` to the installed ``version`` (atomic, durable; see
    :meth:`DataDir.flip_current`)."""
    DataDir(data_dir).flip_current(version)


def read_if_present(path: Path) -> bytes | None:
    """The bytes of ``path``, or None when it is missing."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def remove_tree(path: Path) -> None:
    """Delete ``path`` and everything below it; a missing path is fine.

    A symbolic link is removed as a link, never followed (even to a directory), as is
    any other entry that is not a directory: nothing outside ``path`` is ever deleted.
    Everything that can be deleted is; then the first failure is raised as an OSError
    naming the full path of what could not be deleted (and, in a note, how many other
    deletions failed).
    """
    try:
        is_dir = stat.S_ISDIR(os.lstat(path).st_mode)
    except FileNotFoundError:
        return
    if not is_dir:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        return
    failures: list[OSError] = []

    def failed(_function: object, failed_path: str, exc: BaseException) -> None:
        if isinstance(exc, FileNotFoundError):
            return  # gone meanwhile: deleted all the same
        if not isinstance(exc, OSError):
            raise exc
        # rmtree names the entry relative to its directory's descriptor: name it fully.
        failures.append(OSError(exc.errno, exc.strerror or str(exc), os.fsdecode(failed_path)))

    if sys.version_info >= (3, 12):
        shutil.rmtree(path, onexc=failed)
    else:
        shutil.rmtree(path, onerror=lambda function, where, info: failed(function, where, info[1]))
    if failures:
        first = failures[0]
        if len(failures) > 1 and sys.version_info >= (3, 11):
            first.add_note(f"{len(failures) - 1} other deletion(s) under {path} failed too")
        raise first


def read_last_sequence(data_dir: Path) -> int | None:
    """The last accepted pointer sequence from the state file; None when there is none.

    A malformed state file (empty, not JSON, no integer ``last_sequence``) raises
    FormatError, whose one-line message names the file, the fault and the remedy: the agent
    refuses to guess (a replayed older pointer must stay refused); deleting the file
    accepts any pointer sequence again.
    """
    state_file = DataDir(data_dir).state_file
    try:
        data = state_file.read_bytes()
    except FileNotFoundError:
        return None
    try:
        state = json.loads(data)
        sequence = state["last_sequence"]
    except (ValueError, KeyError, TypeError) as exc:
        fault = f"no {exc} field" if isinstance(exc, KeyError) else str(exc)
        raise FormatError(_malformed_state(state_file, fault or type(exc).__name__)) from exc
    if sequence is not None and (isinstance(sequence, bool) or not isinstance(sequence, int)):
        raise FormatError(_malformed_state(state_file, "last_sequence must be an integer"))
    return sequence


def _malformed_state(state_file: Path, fault: str) -> str:
    """The one-line message of a malformed state file: what is wrong, and what to do."""
    fault = " ".join(fault.split())
    return f"{state_file} is malformed ({fault}): delete it to accept any pointer sequence again"


def write_last_sequence(data_dir: Path, sequence: int | None) -> None:
    """Store the last accepted pointer sequence in the state file atomically."""
    data = json.dumps({"last_sequence": sequence}, sort_keys=True).encode() + b"\n"
    write_atomically(DataDir(data_dir).state_file, [data], mode=0o644)


__all__ = [
    "DownloadRefused",
    "InstalledDocuments",
    "activate",
    "check_capacity",
    "install_delta",
    "install_version",
    "is_installed",
    "make_owner_writable",
    "prepare_data_dir",
    "read_if_present",
    "read_last_sequence",
    "remove_tree",
    "write_last_sequence",
]
