"""Object storage for publisher and agent: one import point for the seam and its stores.

- :mod:`.object_store`: the :class:`ObjectStore` protocol, its value types and limits;
- :mod:`.s3_config`: :class:`S3Config` and ``s3://`` URLs;
- :mod:`.s3_store`: :class:`S3ObjectStore` over boto3 (every botocore error translated);
- :mod:`.memory_store`: :class:`MemoryObjectStore`, the in-memory twin for fast tests.
"""

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
from .s3_store import MAX_PARTS, S3ObjectStore, translate_boto_error

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
