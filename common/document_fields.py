"""Field rules shared by the signed documents (manifest, pointer): one check per kind of
field, one message each.

A document validates its fields in its constructor, with these checks, and nowhere else:
parsing (``from_dict``) only takes the fields out of the JSON object (:class:`Fields`
names a missing one) and hands them to the constructor. Every fault is a FormatError.

Forward compatibility: both documents carry ``schema`` (1). A reader refuses an unknown
schema, and keeps unknown top-level fields in ``extra`` (they round-trip and are
otherwise ignored), which is how ``deltas`` joined schema 1: a manifest without deltas
has no such field, so its bytes are what they were before deltas existed.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from typing import Any

from .errors import FormatError

SCHEMA_VERSION = 1
"""The manifest and pointer schema this code writes and reads."""

MAX_INT = 2**63 - 1
"""The largest integer a document field holds."""

_HEX = re.compile(r"[0-9a-f]*")


class Fields:
    """Takes fields out of a parsed JSON object, remembering which were taken.

    Only presence is checked here (FormatError naming a missing field); the values are
    validated by the document they are passed to.
    """

    def __init__(self, obj: Mapping[str, Any], what: str) -> None:
        self._obj = obj
        self._what = what
        self._used: set[str] = set()

    def value(self, name: str) -> Any:
        """The value of field ``name``; FormatError when it is missing."""
        if name not in self._obj:
            raise FormatError(f"{self._what}: missing field {name!r}")
        self._used.add(name)
        return self._obj[name]

    def mapping(self, name: str) -> Mapping[str, Any]:
        """The nested JSON object in field ``name``; FormatError when it is not one."""
        value = self.value(name)
        if not isinstance(value, dict):
            raise FormatError(f"{self._what}: {name} must be an object, got {value!r:.60}")
        return value

    def objects(self, name: str) -> list[Mapping[str, Any]]:
        """The JSON array of objects in field ``name``; FormatError when it is not one."""
        value = self.value(name)
        if not isinstance(value, list) or not all(isinstance(item, dict) for item in value):
            raise FormatError(
                f"{self._what}: {name} must be an array of objects, got {value!r:.60}"
            )
        return value

    def rest(self) -> dict[str, Any]:
        """The fields not taken so far."""
        return {k: v for k, v in self._obj.items() if k not in self._used}


def require(condition: bool, message: str) -> None:
    """FormatError(``message``) unless ``condition``. (The checks below test first and
    format their message only for a value that fails: a document has a few dozen fields,
    and an agent of many filters parses thousands of documents a rollout.)"""
    if not condition:
        raise FormatError(message)


def check_schema(value: object, what: str) -> None:
    """The ``schema`` field of document ``what``: exactly SCHEMA_VERSION."""
    if not (type(value) is int and value == SCHEMA_VERSION):
        raise FormatError(f"unsupported {what} schema {value!r:.40} (this reader knows {SCHEMA_VERSION})")


def check_int(value: object, what: str, low: int = 0, high: int = MAX_INT) -> None:
    """An integer (not a bool) in [low, high]."""
    if not (isinstance(value, int) and not isinstance(value, bool) and low <= value <= high):
        raise FormatError(f"{what} must be an integer in [{low}, {high}], got {value!r:.60}")


def check_hex(value: object, length: int, what: str) -> None:
    """``length`` lower-case hex characters."""
    if not (isinstance(value, str) and len(value) == length and _HEX.fullmatch(value) is not None):
        raise FormatError(f"{what} must be {length} lower-case hex characters, got {value!r:.80}")


def check_key(value: object, what: str) -> None:
    """A relative object key: not empty, no leading "/", no backslash, no ".." part."""
    if not (
        isinstance(value, str)
        and bool(value)
        and not value.startswith("/")
        and "\\" not in value
        and ".." not in value.split("/")
    ):
        raise FormatError(f"{what} must be a relative object key, got {value!r:.80}")


def check_str(value: object, what: str, *, nonempty: bool = False) -> None:
    """A string (non-empty when ``nonempty``)."""
    if not (isinstance(value, str) and (bool(value) or not nonempty)):
        raise FormatError(f"{what} must be a {'non-empty ' if nonempty else ''}string, got {value!r:.60}")


def check_flag(value: object, what: str) -> None:
    """true or false."""
    if not isinstance(value, bool):
        raise FormatError(f"{what} must be true or false, got {value!r:.60}")


def check_extra(extra: Mapping[str, Any], known: Collection[str], what: str) -> dict[str, Any]:
    """Unknown top-level fields: string names that repeat no known field; returns a copy."""
    require(isinstance(extra, Mapping), f"{what} extra must be a mapping")
    if not extra:
        return {}
    clash = sorted(k for k in extra if k in known)
    if clash:
        raise FormatError(f"{what} extra repeats known fields: {clash}")
    require(all(isinstance(k, str) for k in extra), f"{what} extra keys must be strings")
    return dict(extra)


__all__ = [
    "MAX_INT",
    "SCHEMA_VERSION",
    "Fields",
    "check_extra",
    "check_flag",
    "check_hex",
    "check_int",
    "check_key",
    "check_schema",
    "check_str",
    "require",
]
