""":class:`~.object_store.ObjectStore` in a dict, for fast tests: same conditions and errors as S3."""

from __future__ import annotations

import builtins
import hashlib
import threading
import urllib.parse
from collections.abc import Callable, Sequence
from pathlib import Path

from .errors import ObjectNotFound, PreconditionFailed
from .object_store import (
    DEFAULT_CONTENT_TYPE,
    DEFAULT_PART_SIZE,
    ObjectInfo,
    PendingUpload,
    StoredObject,
    check_conditions,
    check_expiry,
    check_key,
    read_parts,
    write_file_atomically,
)


def _md5_etag(data: bytes) -> str:
    return f'"{hashlib.md5(data, usedforsecurity=False).hexdigest()}"'


class MemoryObjectStore:
    """:class:`ObjectStore` in a dict, for fast tests. Same conditions and errors as S3.

    ETags are the quoted MD5 hex of the bytes (what S3 gives a single PUT). One lock
    makes every operation atomic, so compare-and-swap races behave as on S3.
    """

    def __init__(self, *, part_size: int = DEFAULT_PART_SIZE, public_base_url: str | None = None):
        self._objects: dict[str, StoredObject] = {}
        self._lock = threading.Lock()
        self._part_size = part_size
        self._public_base_url = public_base_url

    def __repr__(self) -> str:
        return f"MemoryObjectStore({len(self._objects)} objects)"

    def _lookup(self, key: str) -> StoredObject:
        check_key(key)
        obj = self._objects.get(key)
        if obj is None:
            raise ObjectNotFound(f"memory://{key} not found")
        return obj

    def get(self, key: str, *, if_none_match: str | None = None) -> StoredObject | None:
        """See :meth:`ObjectStore.get`."""
        with self._lock:
            obj = self._lookup(key)
        if if_none_match is not None and (if_none_match in (obj.etag, "*")):
            return None
        return obj

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
        check_key(key)
        check_conditions(if_none_match_any, if_match)
        obj = StoredObject(data=bytes(data), etag=_md5_etag(data))
        with self._lock:
            current = self._objects.get(key)
            if if_none_match_any and current is not None:
                raise PreconditionFailed(f"conditional write to memory://{key} failed: exists")
            if if_match is not None:
                if current is None:
                    raise ObjectNotFound(f"memory://{key} not found")
                if current.etag != if_match:
                    raise PreconditionFailed(
                        f"conditional write to memory://{key} failed: ETag changed"
                    )
            self._objects[key] = obj
        return obj.etag

    def upload_file(
        self, key: str, path: Path, *, progress: Callable[[int], None] | None = None
    ) -> str:
        """See :meth:`ObjectStore.upload_file`. The object appears only when all parts are read."""
        check_key(key)
        buffer = bytearray()
        for chunk in read_parts(path, self._part_size):
            buffer += chunk
            if progress is not None:
                progress(len(chunk))
        return self.put(key, bytes(buffer))

    def download_file(self, key: str, path: Path) -> None:
        """See :meth:`ObjectStore.download_file`."""
        with self._lock:
            data = self._lookup(key).data
        write_file_atomically(path, [data])

    def delete(self, keys: Sequence[str]) -> None:
        """See :meth:`ObjectStore.delete`."""
        for key in keys:
            check_key(key)
        with self._lock:
            for key in keys:
                self._objects.pop(key, None)

    def list(self, prefix: str = "") -> builtins.list[str]:
        """See :meth:`ObjectStore.list`."""
        with self._lock:
            return sorted(k for k in self._objects if k.startswith(prefix))

    def exists(self, key: str) -> bool:
        """See :meth:`ObjectStore.exists`."""
        check_key(key)
        with self._lock:
            return key in self._objects

    def head(self, key: str) -> ObjectInfo:
        """See :meth:`ObjectStore.head`."""
        with self._lock:
            obj = self._lookup(key)
        return ObjectInfo(size=len(obj.data), etag=obj.etag)

    def presigned_get_url(self, key: str, expires_s: int) -> str:
        """Return a ``memory://`` pseudo-URL; it names the key but cannot be fetched."""
        check_expiry(expires_s)
        with self._lock:
            self._lookup(key)
        return f"memory://{urllib.parse.quote(key)}?expires={expires_s}"

    def list_multipart_uploads(self, prefix: str = "") -> builtins.list[PendingUpload]:
        """None ever: :meth:`upload_file` here is atomic."""
        return []

    def abort_multipart_upload(self, key: str, upload_id: str) -> None:
        """Nothing to abort: :meth:`upload_file` here is atomic."""
        check_key(key)

    def public_url(self, key: str) -> str | None:
        """See :meth:`ObjectStore.public_url`."""
        check_key(key)
        if self._public_base_url is None:
            return None
        return f"{self._public_base_url.rstrip('/')}/{urllib.parse.quote(key)}"
