"""Writing files atomically: a temporary name, fsync, rename, fsync of the directory.

A reader sees either no file or the whole file; a crash leaves at most a temporary file
whose name starts with ``.tmp-`` (:data:`TEMPORARY_PREFIX`; :func:`temporaries_in` finds
them), never a partial target. :func:`write_new_file` is the cheaper write for a directory
nobody reads until a later step marks it complete.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

TEMPORARY_PREFIX = ".tmp-"
"""How the name of :func:`write_atomically`'s temporary file begins (then the target's name)."""


def fsync_directory(directory: str | os.PathLike[str]) -> None:
    """Flush a directory's entries (a rename or new link in it) to disk."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomically(
    path: str | os.PathLike[str],
    parts: Iterable[bytes | bytearray | memoryview],
    *,
    mode: int = 0o644,
    overwrite: bool = True,
    durable: bool = True,
    sync_directory: bool = True,
) -> None:
    """Write the concatenated ``parts`` to ``path`` atomically with permission ``mode``.

    With ``overwrite=False`` an existing target raises FileExistsError (checked by a
    hard link, so two racing writers cannot both win). The temporary file is removed on
    any failure, including KeyboardInterrupt.

    ``durable=False`` skips both fsyncs: readers still see the old or the whole new file
    while the machine runs, but after a crash the target may be empty or missing. Only for
    files whose reader checks them and can do without (documents kept in staging, which
    are verified again). ``sync_directory=False`` skips the directory's fsync alone, for a
    caller that fsyncs the directory itself once after several files.
    """
    target = Path(path)
    directory = target.parent
    fd, tmp_name = tempfile.mkstemp(prefix=f"{TEMPORARY_PREFIX}{target.name}.", dir=directory)
    try:
        with os.fdopen(fd, "wb") as out:
            for part in parts:
                out.write(part)
            out.flush()
            os.fchmod(out.fileno(), mode)
            if durable:
                os.fsync(out.fileno())
        if overwrite:
            os.replace(tmp_name, target)
        else:
            os.link(tmp_name, target)
            os.unlink(tmp_name)
        if durable and sync_directory:
            fsync_directory(directory)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp_name)
        raise


def temporaries_in(directory: str | os.PathLike[str]) -> list[Path]:
    """The files in ``directory`` named like an atomic write's temporary file
    (:data:`TEMPORARY_PREFIX`), sorted: a crash's leftovers when no write into
    ``directory`` is in progress (only the caller can know that). Not directories, and
    nothing when ``directory`` is missing or cannot be listed."""
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return []
    return sorted(Path(entry.path) for entry in entries
                  if entry.name.startswith(TEMPORARY_PREFIX) and not entry.is_dir(follow_symlinks=False))


def write_new_file(path: str | os.PathLike[str], data: bytes, *, mode: int = 0o644) -> None:
    """Create ``path`` (FileExistsError when it exists) holding ``data`` with permission
    ``mode``, fsynced; the directory is not. Not atomic: a crash can leave the file
    partial. Only for a directory no reader trusts until a later step marks it complete
    (a version directory before its filter file appears); a partial file is then removed
    with the incomplete directory, or replaced by the next attempt."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fchmod(fd, mode)  # the umask narrowed the mode os.open gave
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        raise
    os.close(fd)
