"""SHA-256 of a file on disk, read in chunks (the one place that does it)."""

from __future__ import annotations

import hashlib
from pathlib import Path

READ_CHUNK = 1 << 20
"""Bytes read at a time."""


def file_sha256(path: Path, *, offset: int = 0) -> str:
    """The SHA-256 of the file at ``path`` from byte ``offset`` to its end, lower-case hex.
    Raises OSError when the file cannot be read."""
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        fh.seek(offset)
        while chunk := fh.read(READ_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


__all__ = ["READ_CHUNK", "file_sha256"]
