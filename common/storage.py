"""Object storage for publisher and agent: one import point for the seam and its stores.

- :mod:`.object_store`: the :class:`ObjectStore` protocol, its value types and limits;
- :mod:`.s3_config`: :class:`S3Config` and ``s3://`` URLs;
- :mod:`.s3_store`: :class:`S3ObjectStore` over botocore, boto3's core (every botocore error translated);
- :mod:`.memory_store`: :class:`MemoryObjectStore`, the in-memory twin for fast tests.

The names of :mod:`.s3_store` are loaded on first use, so that importing this module
(every config does, for :class:`S3Config`) does not import botocore.
"""

from typing import TYPE_CHECKING

from .memory_store import MemoryObjectStore
from .object_store import (
    DEFAULT_CONTENT_TYPE,
    DEFAULT_PART_SIZE,
    MAX_PART_SIZE,
    MIB,
    MIN_PART_SIZE,
    ObjectInfo,
    ObjectStore,
    PendingUpload,
    StoredObject,
)
from .s3_config import S3Config, parse_s3_url

if TYPE_CHECKING:
    from .s3_store import MAX_PARTS, S3ObjectStore, translate_boto_error

_S3_STORE_NAMES = frozenset({"MAX_PARTS", "S3ObjectStore", "translate_boto_error"})


if not TYPE_CHECKING:  # the type checker sees the imports above

    def __getattr__(name: str) -> object:
        """The :mod:`.s3_store` names, imported (with botocore) on first use."""
        if name in _S3_STORE_NAMES:
            from . import s3_store

            value = getattr(s3_store, name)
            globals()[name] = value
            return value
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "DEFAULT_CONTENT_TYPE",
    "DEFAULT_PART_SIZE",
    "MAX_PARTS",
    "MAX_PART_SIZE",
    "MIB",
    "MIN_PART_SIZE",
    "MemoryObjectStore",
    "ObjectInfo",
    "ObjectStore",
    "PendingUpload",
    "S3Config",
    "S3ObjectStore",
    "StoredObject",
    "parse_s3_url",
    "translate_boto_error",
]
