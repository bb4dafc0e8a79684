"""Turning raw input fields into keys, one at a time or a whole batch at once.

A batch is what the builder inserts: a list of the exact bytes hashed (UTF-8 for str
keys, raw for bytes keys), or an int64 numpy array (int keys, each hashed as its 8
little-endian bytes). Both hash exactly like the keys :func:`convert_key` returns
(docs/format.md, "Key encoding"), so a filter built from batches is bit-identical to one
built key by key. Empty fields are never keys: they are skipped.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

import numpy as np
import numpy.typing as npt

from bloomswarm.common.errors import InputError
from bloomswarm.common.keys import INT64_MAX, INT64_MIN, Key

KeyType = Literal["str", "bytes", "int"]
"""How each field becomes a key: UTF-8 text, raw bytes, or a decimal 64-bit integer."""

IntArray = npt.NDArray[np.int64]
KeyBatch = list[bytes] | IntArray
"""Keys ready to insert: encoded bytes (str/bytes keys) or int64 values (int keys)."""

_INTEGER = re.compile(rb"-?[0-9]+")
"""A decimal integer key: an optional minus sign and digits, nothing else."""
_INT_CHARS = b"-0123456789\n"


def convert_key(raw: bytes, key_type: KeyType, path: Path | str, line_no: int) -> Key:
    """Turn one raw field into a key of ``key_type``; InputError naming file and line."""
    if key_type == "bytes":
        return raw
    if key_type == "str":
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise InputError(f"{path}:{line_no}: not valid UTF-8 (use --key-type bytes)") from None
    if not _INTEGER.fullmatch(raw):
        raise InputError(f"{path}:{line_no}: not an integer: {raw[:40]!r}")
    digits = raw.lstrip(b"-").lstrip(b"0")
    value = int(raw) if len(digits) <= 20 else None  # int() refuses > 4300 digits
    if value is None or not INT64_MIN <= value <= INT64_MAX:
        shown = value if value is not None else raw[:40].decode("ascii") + "..."
        raise InputError(f"{path}:{line_no}: integer {shown} outside the 64-bit signed range")
    return value


def convert_fields(
    fields: list[bytes], key_type: KeyType, where: str, first_no: int, *, text: bytes | None = None
) -> KeyBatch:
    """Convert a list of raw fields (empty ones skipped) into one batch.

    ``fields[i]`` is field number ``first_no + i`` of ``where`` (a line or row number,
    used in error messages). The whole list is checked at C speed; only a list with a
    bad field is walked one by one, to raise the same InputError :func:`convert_key`
    raises for the first bad field. ``text``, when given, is the block the fields were
    split from at ASCII separators: it is valid UTF-8 exactly when they all are, so it
    is checked instead of joining the fields again.
    """
    keys = list(filter(None, fields))
    if key_type == "bytes":
        return keys
    if key_type == "str":
        joined = b"\n".join(keys) if text is None else text  # "\n" splits any UTF-8 sequence
        if joined.isascii() or _is_utf8(joined):
            return keys
    else:
        values = _fast_ints(keys, b"\n".join(keys))
        if values is not None:
            return values
    _raise_first_bad(fields, key_type, where, first_no)
    raise AssertionError("unreachable: a field failed the batch check but passed alone")


def batch_keys(batch: KeyBatch, key_type: KeyType) -> list[Key]:
    """The keys of ``batch`` as :func:`convert_key` would return them (str, bytes or int)."""
    if isinstance(batch, np.ndarray):
        return list(batch.tolist())
    if key_type == "str":
        return [raw.decode("utf-8") for raw in batch]
    return list(batch)


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _fast_ints(keys: list[bytes], joined: bytes) -> IntArray | None:
    """Parse decimal integer fields; None when any is malformed or out of range."""
    if joined.translate(None, _INT_CHARS):
        return None  # a character that is neither a digit, "-" nor the separator
    try:
        # int() also accepts whitespace, "_" and "+": excluded by the check above.
        return np.array(list(map(int, keys)), dtype=np.int64)
    except (ValueError, OverflowError):
        return None


def _raise_first_bad(fields: list[bytes], key_type: KeyType, where: str, first_no: int) -> None:
    for offset, raw in enumerate(fields):
        if raw:
            convert_key(raw, key_type, where, first_no + offset)
