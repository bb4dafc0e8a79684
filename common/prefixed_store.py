""":class:`PrefixedStore`: one folder of another store, seen as a whole store.

A bucket with many filters holds one single-filter layout per filter under
``filters/NAME/`` (:func:`~.filter_names.filter_prefix`). The publisher's and the agent's
single-filter code runs unchanged on such a folder through a PrefixedStore, and all the
folders share the inner store (one boto3 client, one connection pool).
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Sequence
from pathlib import Path

from .object_store import DEFAULT_CONTENT_TYPE, ObjectInfo, ObjectStore, PendingUpload, StoredObject


def _normalised(prefix: str) -> str:
    """``prefix`` without leading or trailing "/"; ValueError for a ".." part, a
    backslash or an empty part ("a//b")."""
    stripped = prefix.strip("/")
    parts = stripped.split("/") if stripped else []
    if "\\" in stripped or any(part in ("", ".", "..") for part in parts):
        raise ValueError(f"store prefix must be a relative folder such as 'filters/a', got {prefix!r}")
    return stripped


class PrefixedStore:
    """An :class:`~.object_store.ObjectStore` whose key ``k`` is ``prefix/k`` in ``inner``.

    Every method delegates to ``inner`` with the key prefixed; :meth:`list` and
    :meth:`list_multipart_uploads` return keys with the prefix taken off again, so the
    caller never sees it. An empty prefix is the inner store itself. Errors are the inner
    store's (messages name the full key). Thread-safe when ``inner`` is.
    """

    def __init__(self, inner: ObjectStore, prefix: str) -> None:
        self.inner = inner
        self.prefix = _normalised(prefix)
        self._base = f"{self.prefix}/" if self.prefix else ""

    def __repr__(self) -> str:
        return f"PrefixedStore({self.inner!r}, {self.prefix!r})"

    def full_key(self, key: str) -> str:
        """The key in the inner store."""
        if not key or key.startswith("/"):
            raise ValueError(f"object keys must be non-empty and relative, got {key!r}")
        return self._base + key

    def _relative(self, full_key: str) -> str:
        return full_key[len(self._base):]

    def get(self, key: str, *, if_none_match: str | None = None) -> StoredObject | None:
        """See :meth:`ObjectStore.get`."""
        return self.inner.get(self.full_key(key), if_none_match=if_none_match)

    def put(
        self,
        key: str,
        data: bytes,
        *,
        if_none_match_any: bool = False,
        if_match: str | None = None,
        content_type: str = DEFAULT_CONTENT_TYPE,
    ) -> str:
        """See :meth:`ObjectStore.put`."""
        return self.inner.put(self.full_key(key), data, if_none_match_any=if_none_match_any,
                              if_match=if_match, content_type=content_type)

    def upload_file(
        self, key: str, path: Path, *, progress: Callable[[int], None] | None = None
    ) -> str:
        """See :meth:`ObjectStore.upload_file`."""
        return self.inner.upload_file(self.full_key(key), path, progress=progress)

    def download_file(self, key: str, path: Path) -> None:
        """See :meth:`ObjectStore.download_file`."""
        self.inner.download_file(self.full_key(key), path)

    def delete(self, keys: Sequence[str]) -> None:
        """See :meth:`ObjectStore.delete`."""
        self.inner.delete([self.full_key(key) for key in keys])

    def list(self, prefix: str = "") -> builtins.list[str]:
        """See :meth:`ObjectStore.list`: keys relative to this store's prefix."""
        return [self._relative(key) for key in self.inner.list(self._base + prefix)]

    def exists(self, key: str) -> bool:
        """See :meth:`ObjectStore.exists`."""
        return self.inner.exists(self.full_key(key))

    def head(self, key: str) -> ObjectInfo:
        """See :meth:`ObjectStore.head`."""
        return self.inner.head(self.full_key(key))

    def presigned_get_url(self, key: str, expires_s: int) -> str:
        """See :meth:`ObjectStore.presigned_get_url`."""
        return self.inner.presigned_get_url(self.full_key(key), expires_s)

    def list_multipart_uploads(self, prefix: str = "") -> builtins.list[PendingUpload]:
        """See :meth:`ObjectStore.list_multipart_uploads`: keys relative to this prefix."""
        return [
            PendingUpload(self._relative(u.key), u.upload_id, u.initiated_at)
            for u in self.inner.list_multipart_uploads(self._base + prefix)
        ]

    def abort_multipart_upload(self, key: str, upload_id: str) -> None:
        """See :meth:`ObjectStore.abort_multipart_upload`."""
        self.inner.abort_multipart_upload(self.full_key(key), upload_id)

    def public_url(self, key: str) -> str | None:
        """See :meth:`ObjectStore.public_url`."""
        return self.inner.public_url(self.full_key(key))


__all__ = ["PrefixedStore"]
