"""bloomswarm.common: the filter format, its math, the mmap reader and the live filter.

The names below are the public API; modules stay importable for the rest. The ones that
need numpy (:class:`Filter`, :class:`FilterBuilder`, :class:`LiveFilter`) are imported on
first use, so that ``import bloomswarm.common.errors`` (every command line does) stays cheap.
"""

from typing import TYPE_CHECKING

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
from .params import FilterParams, HashId, Layout
from .sizing import expected_fpp, size_filter

if TYPE_CHECKING:
    from .builder import FilterBuilder
    from .live import LiveFilter
    from .reader import Filter

_LAZY = {"Filter": "reader", "FilterBuilder": "builder", "LiveFilter": "live"}
"""Public name -> the module (importing numpy) that defines it."""


if not TYPE_CHECKING:  # the type checker sees the imports above

    def __getattr__(name: str) -> object:
        """The names of :data:`_LAZY`, imported on first use."""
        if name in _LAZY:
            import importlib

            value = getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
            globals()[name] = value
            return value
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
