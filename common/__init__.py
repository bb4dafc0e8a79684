"""bloomswarm.common: the filter format, its math, the mmap reader and the live filter.

The names below are the public API; modules stay importable for the rest.
"""

from .builder import FilterBuilder
from .errors import (
    BloomswarmError,
    ConfigError,
    FormatError,
    InputError,
    NotReadyError,
    ObjectNotFound,
    PreconditionFailed,
    StorageError,
    VerificationError,
)
from .header import FilterHeader, read_header
from .live import LiveFilter
from .params import FilterParams, HashId, Layout
from .reader import Filter
from .sizing import expected_fpp, size_filter

__all__ = [
    "BloomswarmError",
    "ConfigError",
    "Filter",
    "FilterBuilder",
    "FilterHeader",
    "FilterParams",
    "FormatError",
    "HashId",
    "InputError",
    "Layout",
    "LiveFilter",
    "NotReadyError",
    "ObjectNotFound",
    "PreconditionFailed",
    "StorageError",
    "VerificationError",
    "expected_fpp",
    "read_header",
    "size_filter",
]
