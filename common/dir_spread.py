"""Spreading a directory's subdirectories over the file system (ext4's ``FS_TOPDIR_FL``).

ext4 places a new directory near its parent (the Orlov allocator) unless the parent is
marked as the top of directory hierarchies (``chattr +T``); then each new subdirectory
goes to a lightly used block group of its own, and the files created in it follow it.

The agent marks the directories it creates a directory in for every version
(``versions/``, ``staging/``, and the ``filters/`` of an agent of many filters). On ext4
without a journal, each new inode is allocated by scanning its group's inode bitmap,
skipping every inode deleted there in the last 60-300 s (``recently_deleted()``, which
reads the inode table for each); with every version's files piled into one group, a
rollout of many small filters spent a third of the agents' CPU in that scan
(docs/benchmarks/many_filters.md). Spread over groups, each scan skips few. With a
journal, or on another file system, the mark changes nothing that matters.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import struct
from collections.abc import Iterator
from pathlib import Path

FS_IOC_GETFLAGS = 0x80086601
FS_IOC_SETFLAGS = 0x40086602
FS_TOPDIR_FL = 0x00020000
"""``chattr +T``: the top of directory hierarchies, for the Orlov block allocator."""

_FLAGS = struct.Struct("i")


def spread_subdirectories(directory: Path) -> bool:
    """Mark ``directory`` (which exists) so that its new subdirectories are spread over
    the file system; True when it is marked now. Best effort: a file system without such
    a flag, or a directory this process may not mark, leaves it as it is (False)."""
    try:
        with _opened(directory) as fd:
            flags = _flags(fd)
            if not flags & FS_TOPDIR_FL:
                fcntl.ioctl(fd, FS_IOC_SETFLAGS, _FLAGS.pack(flags | FS_TOPDIR_FL))
            return True
    except OSError:  # ENOTTY, EOPNOTSUPP (no such flags), EPERM (not the owner), ...
        return False


def is_spread(directory: Path) -> bool:
    """Whether ``directory`` carries the mark (False where it cannot be read)."""
    try:
        with _opened(directory) as fd:
            return bool(_flags(fd) & FS_TOPDIR_FL)
    except OSError:
        return False


@contextlib.contextmanager
def _opened(directory: Path) -> Iterator[int]:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        yield fd
    finally:
        os.close(fd)


def _flags(fd: int) -> int:
    buffer = bytearray(_FLAGS.size)
    fcntl.ioctl(fd, FS_IOC_GETFLAGS, buffer, True)
    value: int = _FLAGS.unpack(buffer)[0]
    return value


__all__ = ["FS_TOPDIR_FL", "is_spread", "spread_subdirectories"]
