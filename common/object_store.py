"""The object-store seam: the :class:`ObjectStore` protocol and what every store shares.

Publisher and agent talk to storage only through :class:`ObjectStore`. Keys are plain
relative strings ("v7/manifest.json"); an implementation maps them under its own prefix.

Conditional requests carry the version protocol (design.md, "Versions, integrity,
trust"): a publisher claims ``vN/manifest.json`` with ``put(..., if_none_match_any=True)``
and moves ``latest.json`` with ``put(..., if_match=etag_it_read)``; an agent polls with
``get(key, if_none_match=etag)``, which returns None while nothing changed.

The implementations are :class:`~.s3_store.S3ObjectStore` and
:class:`~.memory_store.MemoryObjectStore`; :mod:`.storage` re-exports them all.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

from .atomic_file import write_atomically
from .errors import ConfigError, StorageError

MIB = 1024 * 1024
DEFAULT_PART_SIZE = 64 * MIB
MIN_PART_SIZE = 5 * MIB
"""S3's minimum size of every multipart part but the last."""
MAX_PART_SIZE = 5 * 1024 * MIB
DEFAULT_CONTENT_TYPE = "application/octet-stream"


@dataclass(frozen=True)
class StoredObject:
    """An object's bytes and the ETag they were stored under (quoted, as S3 sends it)."""

    data: bytes
    etag: str


@dataclass(frozen=True)
class ObjectInfo:
    """An object's metadata: size in bytes and ETag (quoted)."""

    size: int
    etag: str


@dataclass(frozen=True)
class PendingUpload:
    """A multipart upload that was started and neither completed nor aborted (its parts
    are billed storage until aborted)."""

    key: str
    """The object key it would create, relative to the store prefix."""
    upload_id: str
    initiated_at: float
    """When it was started, Unix seconds (the store's clock)."""


@runtime_checkable
class ObjectStore(Protocol):
    """A flat key/value object store with S3 semantics. Implementations are thread-safe.

    Failures raise :class:`~.errors.ObjectNotFound` (key or bucket absent),
    :class:`~.errors.PreconditionFailed` (a conditional write lost its race) or
    :class:`~.errors.StorageError` (anything else: unreachable endpoint, access denied,
    timeouts) — never a third-party exception. Keys are relative, non-empty and do not
    start with "/". ETags are opaque strings, compared as given.
    """

    def get(self, key: str, *, if_none_match: str | None = None) -> StoredObject | None:
        """Return the object (read into memory: meant for small documents); None when its
        ETag equals ``if_none_match`` (HTTP 304, not modified)."""
        ...

    def put(
        self,
        key: str,
        data: bytes,
        *,
        if_none_match_any: bool = False,
        if_match: str | None = None,
        content_type: str = DEFAULT_CONTENT_TYPE,
    ) -> str:
        """Store ``data`` and return its new ETag.

        ``if_none_match_any``: only if the key does not exist yet. ``if_match``: only if
        the current ETag equals it. A failed condition raises PreconditionFailed. The two
        conditions are exclusive (ValueError).
        """
        ...

    def upload_file(
        self, key: str, path: Path, *, progress: Callable[[int], None] | None = None
    ) -> str:
        """Upload a local file (multipart when large) and return its ETag.

        ``progress`` is called with the number of bytes just sent (an increment). Any
        exception, KeyboardInterrupt included, aborts the upload and leaves no object and
        no pending multipart upload behind.
        """
        ...

    def download_file(self, key: str, path: Path) -> None:
        """Write the object to ``path`` atomically (temporary file, fsync, rename)."""
        ...

    def delete(self, keys: Sequence[str]) -> None:
        """Delete these keys; keys that do not exist are ignored."""
        ...

    def list(self, prefix: str = "") -> builtins.list[str]:
        """Return every key starting with ``prefix``, sorted."""
        ...

    def exists(self, key: str) -> bool:
        """Return whether the key exists (a missing bucket raises ObjectNotFound)."""
        ...

    def head(self, key: str) -> ObjectInfo:
        """Return the object's size and ETag."""
        ...

    def presigned_get_url(self, key: str, expires_s: int) -> str:
        """Return a URL that lets anyone GET the object for ``expires_s`` seconds."""
        ...

    def list_multipart_uploads(self, prefix: str = "") -> builtins.list[PendingUpload]:
        """Return the unfinished multipart uploads of keys starting with ``prefix``.

        A process killed during :meth:`upload_file` (SIGKILL cannot be caught) leaves one.
        """
        ...

    def abort_multipart_upload(self, key: str, upload_id: str) -> None:
        """Abort an unfinished multipart upload; one that no longer exists is ignored."""
        ...

    def public_url(self, key: str) -> str | None:
        """Return an unsigned URL for the object (a CDN in front of it), or None."""
        ...


def check_key(key: str) -> None:
    """ValueError unless ``key`` is a non-empty relative key."""
    if not key or key.startswith("/"):
        raise ValueError(f"object keys must be non-empty and relative, got {key!r}")


def check_conditions(if_none_match_any: bool, if_match: str | None) -> None:
    """ValueError when both write conditions are given."""
    if if_none_match_any and if_match is not None:
        raise ValueError("if_none_match_any and if_match are mutually exclusive")


def check_expiry(expires_s: int) -> None:
    """ConfigError unless a presigned URL lifetime is within S3's 1 s to 7 days."""
    if not 1 <= expires_s <= 7 * 24 * 3600:
        raise ConfigError(f"presigned URL lifetime must be 1 s to 7 days, got {expires_s} s")


def write_file_atomically(
    path: Path, chunks: Iterable[bytes], *, passthrough: tuple[type[BaseException], ...] = ()
) -> None:
    """Write ``chunks`` to ``path`` atomically; StorageError when the disk refuses.
    Errors of the ``passthrough`` types (a network client's own OSError subclasses,
    raised while ``chunks`` is read) propagate unchanged."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(path, chunks)
    except OSError as exc:
        if isinstance(exc, passthrough):
            raise
        raise StorageError(f"cannot write {path}: {exc.strerror or exc}") from exc


def read_parts(path: Path, part_size: int) -> Iterator[bytes]:
    """Yield the file's bytes in ``part_size`` pieces; StorageError when it cannot be read."""
    try:
        with path.open("rb") as fh:
            while chunk := fh.read(part_size):
                yield chunk
    except OSError as exc:
        raise StorageError(f"cannot read {path} for upload: {exc.strerror or exc}") from exc
