"""Names of the filters one bucket (and one agent) holds: what a name may be, and where it lives.

A name is used as one path component in the bucket (``filters/NAME/...``), in the agent's
data directory (``filters/NAME/``) and as a metric label, so it is kept to a portable,
lower-case alphabet that can never escape its folder: it fully matches
``[a-z0-9][a-z0-9_.-]{0,62}`` and holds no ``..`` (so it is never "", ".", "..", and has
no "/" or "\\").
"""

from __future__ import annotations

import re

MAX_FILTER_NAME = 63
"""The longest filter name, in characters (a DNS label's limit)."""

FILTERS_PREFIX = "filters"
"""The bucket folder holding one single-filter layout per named filter."""

_NAME = re.compile(r"[a-z0-9][a-z0-9_.-]{0,62}")


def check_filter_name(name: str) -> str:
    """Return ``name`` when it is a valid filter name; ValueError("filter name 'x': why") else."""
    if not isinstance(name, str):
        raise ValueError(f"filter name {name!r}: must be a string")
    if not name:
        raise ValueError("filter name '': must not be empty")
    if len(name) > MAX_FILTER_NAME:
        shown = name[:20] + "..."
        raise ValueError(f"filter name {shown!r}: {len(name)} characters, at most {MAX_FILTER_NAME}")
    if ".." in name:
        raise ValueError(f"filter name {name!r}: must not contain '..'")
    if _NAME.fullmatch(name) is None:
        raise ValueError(
            f"filter name {name!r}: use lower-case letters, digits, '_', '.' and '-', "
            "starting with a letter or digit"
        )
    return name


def filter_prefix(name: str) -> str:
    """The folder of filter ``name``, relative to the bucket prefix: "filters/NAME" (no
    trailing slash). ValueError for an invalid name."""
    return f"{FILTERS_PREFIX}/{check_filter_name(name)}"


__all__ = ["FILTERS_PREFIX", "MAX_FILTER_NAME", "check_filter_name", "filter_prefix"]
