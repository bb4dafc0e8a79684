"""Key encoding: how a key becomes the bytes that are hashed (part of the file format).

- ``bytes`` / ``bytearray`` / ``memoryview``: as is;
- ``str``: UTF-8 (a lone surrogate raises UnicodeEncodeError);
- ``int``: 8 bytes little-endian two's complement; outside [-2**63, 2**63) raises OverflowError.

Anything else raises TypeError. numpy uint64/int64 arrays are encoded element-wise as
their 8 little-endian bytes (see :mod:`bloomswarm.common.batch`).
"""

from __future__ import annotations

Key = bytes | bytearray | memoryview | str | int
"""A key accepted by every lookup and insert."""

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1


def encode_key(key: Key) -> bytes | bytearray | memoryview:
    """Return the bytes hashed for ``key``; see the module docstring for the rules."""
    if isinstance(key, (bytes, bytearray, memoryview)):
        return key
    if isinstance(key, str):
        return key.encode("utf-8")
    if isinstance(key, int):
        return encode_int(key)
    raise TypeError(f"unsupported key type {type(key).__name__}: use bytes, str or int")


def encode_int(key: int) -> bytes:
    """Encode an int key as 8 little-endian bytes; OverflowError outside the int64 range."""
    if not INT64_MIN <= key <= INT64_MAX:
        raise OverflowError(f"int key {key} is outside the 64-bit signed range")
    return key.to_bytes(8, "little", signed=True)
