"""Argument types for the CLI: each parses one value or raises ArgumentTypeError."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from bloomswarm.common.params import Layout

MAX_VERSION = 2**63 - 1
"""Largest version number a manifest can carry."""


def _integer(text: str) -> int:
    """An integer, thousands separators ``_`` and ``,`` allowed."""
    try:
        return int(text.replace(",", "").replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None


def positive_int(text: str) -> int:
    """An integer >= 0 (thousands separators ``_`` and ``,`` allowed)."""
    value = _integer(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative: {text}")
    return value


def count_value(text: str) -> int:
    """An integer >= 1 (a number of things that cannot be zero)."""
    value = positive_int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {text}")
    return value


def int_range(minimum: int, maximum: int | None = None) -> Callable[[str], int]:
    """An argument type: an integer within ``minimum`` .. ``maximum`` (no upper bound: None)."""
    def parse(text: str) -> int:
        value = _integer(text)
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum:,}, got {text}")
        if maximum is not None and value > maximum:
            raise argparse.ArgumentTypeError(f"must be at most {maximum:,}, got {text}")
        return value
    return parse


def seconds_value(text: str) -> float:
    """A finite number of seconds >= 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number of seconds >= 0, got {text}")
    return value


def positive_seconds_value(text: str) -> float:
    """A finite number of seconds > 0."""
    value = seconds_value(text)
    if value == 0:
        raise argparse.ArgumentTypeError(f"must be more than 0 seconds, got {text}")
    return value


def filter_version_value(text: str) -> int:
    """A filter version for a file header: 0 (unversioned) .. 2**63-1."""
    value = positive_int(text)
    if value > MAX_VERSION:
        raise argparse.ArgumentTypeError(f"must be at most 2**63-1, got {text}")
    return value


def version_value(text: str) -> int:
    """A published version number: 1 .. 2**63-1."""
    value = filter_version_value(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"versions start at 1, got {text}")
    return value


def pid_value(text: str) -> int:
    """A process id: > 0 (0 and negative ids would signal whole process groups)."""
    value = positive_int(text)
    if not 0 < value < 2**31:
        raise argparse.ArgumentTypeError(f"not a process id: {text}")
    return value


def fpp_value(text: str) -> float:
    """A false-positive rate strictly between 0 and 1."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0.0 < value < 1.0:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1 (exclusive), got {text}")
    return value


def seed_value(text: str) -> int:
    """A 32-bit unsigned hash seed."""
    value = positive_int(text)
    if value >= 2**32:
        raise argparse.ArgumentTypeError(f"must be below 2**32, got {text}")
    return value


def layout_value(text: str) -> Layout:
    """A layout name: blocked or standard."""
    try:
        return Layout.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
