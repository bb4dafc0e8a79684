"""Choosing between the C extension and the pure-Python reference path.

The C extension (``bloomswarm.common._bloomfast``, built from csrc/bloomfast.c at install
time) is optional. Where it was not built, or when ``BLOOMSWARM_PURE_PYTHON=1`` is set,
every operation runs on the pure-Python/numpy path with identical results.
"""

from __future__ import annotations

import os
from types import ModuleType
from typing import Literal

from .errors import ConfigError

Engine = Literal["auto", "c", "python"]
"""Which implementation runs the hot paths: "auto" picks C when it is available."""


def _load_extension() -> ModuleType | None:
    if os.environ.get("BLOOMSWARM_PURE_PYTHON", "") not in ("", "0"):
        return None
    try:
        from . import _bloomfast  # type: ignore[attr-defined]
    except ImportError:
        return None
    return _bloomfast  # type: ignore[no-any-return]


EXTENSION: ModuleType | None = _load_extension()
"""The loaded C extension, or None when the pure-Python path is in use."""


def resolve_engine(engine: str) -> Literal["c", "python"]:
    """Map a requested engine to the one that will run; ConfigError if "c" is unavailable."""
    if engine == "python":
        return "python"
    if engine == "c":
        if EXTENSION is None:
            raise ConfigError("the C extension is not available (not built, or BLOOMSWARM_PURE_PYTHON set)")
        return "c"
    if engine == "auto":
        return "c" if EXTENSION is not None else "python"
    raise ConfigError(f"unknown engine {engine!r}: expected 'auto', 'c' or 'python'")
